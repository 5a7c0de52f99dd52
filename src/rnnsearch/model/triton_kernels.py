"""Triton kernels for one step of the recurrences of App. A.2 on a GPU (`fused_gpu.py` runs them): the GRU steps of
the decoder and of the encoder here, the attention's in `attention_kernels.py`; the loss's and Adadelta's kernels
are beside what they speed up (training/loss_kernels.py, training/optimizers.py).

On a GPU the recurrence is bound by the number of kernels, not their work: the autograd-free loop of `fused.py`
launches some 24 small kernels per target position forward and 36 backward (docs/benchmarks.md). Here the
decoder's GRU step is two kernels each way, each a matrix product (tl.dot over blocks of rows and columns of the
result) with the element-wise work that follows it:

    _gru_gates         [C; C_z; C_r] c_i and U_zr s_{i−1};  [z; r] = σ(x_zr + both),  r ∘ s_{i−1},  x_h + C c_i
    _gru_state         U [r ∘ s_{i−1}];  s̃ = tanh(x_h + C c_i + it),  s_i = (1 − z) ∘ s_{i−1} + z ∘ s̃
    _gru_grad_gates    g = ∂L/∂s_i (the next position's [∂L/∂a_zr | ∂L/∂(W_a s_i)] [U_zr; W_a] added here);
                       ∂L/∂a_h = g ∘ z ∘ (1 − s̃²),  ∂L/∂a_z = g ∘ (s̃ − s) ∘ z(1 − z)
    _gru_grad_reset    ∂L/∂a_h U;  ∂L/∂a_r = it ∘ s ∘ r(1 − r),  ∂L/∂s_{i−1} but the product by [U_zr; W_a]
    encoder_forward    W_h h_{t−1} for both directions; one step of nn.GRU's equations (r, z, ñ, h_t)
    encoder_backward   the next step's ∂L/∂g W_h; the step's backward pass (∂L/∂g, ∂L/∂a_n, ∂L/∂h_t ∘ z)

The products accumulate in float32 and are never rounded to the products' dtype (bf16 under autocast) before the
element-wise work; every value is computed in float32, and each kernel also writes, where a product reads it next, a
copy in the products' dtype (`*_lp`). tanh(x) is written 2σ(2x) − 1 (Triton has no tanh of its own on every
backend, its interpreter included); `_tanh` and `_to` (a float32 value in a pointer's dtype) serve the attention's
kernels too.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU wheel of torch comes without Triton: the kernels are for a GPU only
    triton = None

# Triton's interpreter multiplies bf16 operands of tl.dot as their raw bits (3.9): there the products' operands are
# made float32 first, which gives what a GPU's bf16 tensor cores give (exact products, float32 sums)
_UPCAST = os.environ.get("TRITON_INTERPRET") == "1"


def _pow2(x: int, least: int = 16) -> int:
    return max(least, 1 << (x - 1).bit_length())


if triton is not None:
    UPCAST = tl.constexpr(_UPCAST)

    @triton.jit
    def _tanh(x):
        return 2 * tl.sigmoid(2 * x) - 1

    @triton.jit
    def _to(x, PTR):
        """x in PTR's element type; to bf16 rounded to nearest even, written out (Triton's interpreter truncates)."""
        if PTR.dtype.element_ty == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits += 0x7FFF + ((bits >> 16) & 1)
            x = (bits & 0xFFFF0000).to(tl.float32, bitcast=True)
        return x.to(PTR.dtype.element_ty)

    @triton.jit
    def _dot(acc, A, a_stride, rows, rok, W, w_k, w_n, cols, cok, K, BK: tl.constexpr, PRECISION: tl.constexpr):
        """acc + A[rows, :K] @ B[:K, cols], B[k, j] at W + k·w_k + j·w_n (a weight, w_k = 1 for its transpose), A and
        W in the products' dtype, the sum in float32: the matrix product of a step, before its element-wise work."""
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            kok = ks < K
            a = tl.load(A + rows[:, None] * a_stride + ks[None, :], mask=rok[:, None] & kok[None, :], other=0)
            w = tl.load(W + ks[:, None] * w_k + cols[None, :] * w_n, mask=kok[:, None] & cok[None, :], other=0)
            if UPCAST:
                a, w = a.to(tl.float32), w.to(tl.float32)
            acc = tl.dot(a, w, acc, input_precision=PRECISION)
        return acc

    @triton.jit
    def _dot3(acc0, acc1, acc2, A, a_stride, rows, rok, W, w_k, w_n, part, cols, cok, K, BK: tl.constexpr,
              PRECISION: tl.constexpr):
        """`_dot` for the three parts of a weight at once (B_p[k, j] at W + p·part + k·w_k + j·w_n, p = 0, 1, 2):
        A's tile read once for the three sums, each summed in the order `_dot` sums it."""
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            kok = ks < K
            a = tl.load(A + rows[:, None] * a_stride + ks[None, :], mask=rok[:, None] & kok[None, :], other=0)
            at, wok = W + ks[:, None] * w_k + cols[None, :] * w_n, kok[:, None] & cok[None, :]
            w0, w1, w2 = tl.load(at, mask=wok, other=0), tl.load(at + part, mask=wok, other=0), \
                tl.load(at + 2 * part, mask=wok, other=0)
            if UPCAST:
                a, w0, w1, w2 = a.to(tl.float32), w0.to(tl.float32), w1.to(tl.float32), w2.to(tl.float32)
            acc0 = tl.dot(a, w0, acc0, input_precision=PRECISION)
            acc1 = tl.dot(a, w1, acc1, input_precision=PRECISION)
            acc2 = tl.dot(a, w2, acc2, input_precision=PRECISION)
        return acc0, acc1, acc2

    @triton.jit
    def _tile_of(B, N, BM: tl.constexpr, BN: tl.constexpr):
        """Program (row block, column block)'s rows and columns of a (B, N) result, and which are inside it."""
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        cols = tl.program_id(1) * BN + tl.arange(0, BN)
        return rows, cols, rows < B, cols < N

    @triton.jit
    def _gru_gates(X, x_stride, CC, cc_stride, C_w, CTX, SL, sl_stride, U_zr, S, s_stride, ZR, zr_stride, RS_lp,
                   rs_stride, AH, ah_stride, B, N, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                   PRECISION: tl.constexpr):
        """[C; C_z; C_r] c_i (CTX = 0: no attention) and [U_z; U_r] s_{i−1}, then z, r = σ(x_zr + both) into ZR,
        r ∘ s_{i−1} into RS_lp (the products' dtype), and x_h + C c_i into AH (where `_gru_state` adds
        U [r ∘ s_{i−1}])."""
        rows, cols, rok, cok = _tile_of(B, N, BM, BN)
        zero = tl.zeros([BM, BN], dtype=tl.float32)
        a_h, a_z, a_r = _dot3(zero, zero, zero, CC, cc_stride, rows, rok, C_w, 1, CTX, N * CTX, cols, cok, CTX, BK,
                              PRECISION)
        a_z = _dot(a_z, SL, sl_stride, rows, rok, U_zr, 1, N, cols, cok, N, BK, PRECISION)
        a_r = _dot(a_r, SL, sl_stride, rows, rok, U_zr + N * N, 1, N, cols, cok, N, BK, PRECISION)
        ok, x = rok[:, None] & cok[None, :], X + rows[:, None] * x_stride + cols[None, :]
        z = tl.sigmoid(a_z + tl.load(x + N, mask=ok, other=0))
        r = tl.sigmoid(a_r + tl.load(x + 2 * N, mask=ok, other=0))
        zr = ZR + rows[:, None] * zr_stride + cols[None, :]
        tl.store(zr, z, mask=ok)
        tl.store(zr + N, r, mask=ok)
        rs = r * tl.load(S + rows[:, None] * s_stride + cols[None, :], mask=ok, other=0)
        tl.store(RS_lp + rows[:, None] * rs_stride + cols[None, :], _to(rs, RS_lp), mask=ok)
        tl.store(AH + rows[:, None] * ah_stride + cols[None, :], a_h + tl.load(x, mask=ok, other=0), mask=ok)

    @triton.jit
    def _gru_state(RS_lp, rs_stride, U, AH, ah_stride, ZR, zr_stride, S, s_stride, SN, sn_stride, SN_lp, snl_stride,
                   B, N, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
        """U [r ∘ s_{i−1}], then s̃ = tanh(AH + it) over AH (the same place: each program reads and writes its own
        tile), s_i = (1 − z) ∘ s_{i−1} + z ∘ s̃ into SN and SN_lp."""
        rows, cols, rok, cok = _tile_of(B, N, BM, BN)
        a_h = _dot(tl.zeros([BM, BN], dtype=tl.float32), RS_lp, rs_stride, rows, rok, U, 1, N, cols, cok, N, BK,
                   PRECISION)
        ok, at = rok[:, None] & cok[None, :], rows[:, None] * ah_stride + cols[None, :]
        s_tilde = _tanh(a_h + tl.load(AH + at, mask=ok, other=0))
        z = tl.load(ZR + rows[:, None] * zr_stride + cols[None, :], mask=ok, other=0)
        s = tl.load(S + rows[:, None] * s_stride + cols[None, :], mask=ok, other=0)
        s_new = s + z * (s_tilde - s)
        tl.store(AH + at, s_tilde, mask=ok)
        tl.store(SN + rows[:, None] * sn_stride + cols[None, :], s_new, mask=ok)
        tl.store(SN_lp + rows[:, None] * snl_stride + cols[None, :], _to(s_new, SN_lp), mask=ok)

    @triton.jit
    def _gru_grad_gates(G1, g1_stride, DP, K, W_g, ZR, zr_stride, ST, st_stride, S, s_stride, DS, ds_stride, DX,
                        dx_stride, DX_lp, dxl_stride, GOUT, B, N, BM: tl.constexpr, BN: tl.constexpr,
                        BK: tl.constexpr, PRECISION: tl.constexpr):
        """g = ∂L/∂s_i = G1 + DP[:, n:n+K] W_g (the next position's [∂L/∂a_zr | ∂L/∂(W_a s_i)] through [U_zr; W_a];
        K = 0: none), then ∂L/∂a_h = g ∘ z ∘ (1 − s̃²) and ∂L/∂a_z = g ∘ (s̃ − s) ∘ z(1 − z) into DX and DX_lp,
        and the element-wise part of ∂L/∂s_{i−1}, g ∘ (1 − z) + DS, into GOUT (`_gru_grad_reset` adds the rest)."""
        rows, cols, rok, cok = _tile_of(B, N, BM, BN)
        g = _dot(tl.zeros([BM, BN], dtype=tl.float32), DP + N, dxl_stride, rows, rok, W_g, N, 1, cols, cok, K, BK,
                 PRECISION)
        ok, at = rok[:, None] & cok[None, :], rows[:, None] * N + cols[None, :]
        g += tl.load(G1 + rows[:, None] * g1_stride + cols[None, :], mask=ok, other=0)
        zr = ZR + rows[:, None] * zr_stride + cols[None, :]
        z = tl.load(zr, mask=ok, other=0)
        s_tilde = tl.load(ST + rows[:, None] * st_stride + cols[None, :], mask=ok, other=0)
        s = tl.load(S + rows[:, None] * s_stride + cols[None, :], mask=ok, other=0)
        da_h = g * z * (1 - s_tilde * s_tilde)
        da_z = g * (s_tilde - s) * z * (1 - z)
        dx, dx_lp = DX + rows[:, None] * dx_stride + cols[None, :], DX_lp + rows[:, None] * dxl_stride + cols[None, :]
        tl.store(dx, da_h, mask=ok)
        tl.store(dx + N, da_z, mask=ok)
        tl.store(dx_lp, _to(da_h, DX_lp), mask=ok)
        tl.store(dx_lp + N, _to(da_z, DX_lp), mask=ok)
        ds = g * (1 - z) + tl.load(DS + rows[:, None] * ds_stride + cols[None, :], mask=ok, other=0)
        tl.store(GOUT + at, ds, mask=ok)

    @triton.jit
    def _gru_grad_reset(DX_lp, dxl_stride, U, ZR, zr_stride, S, s_stride, DX, dx_stride, GOUT, B, N,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
        """∂L/∂(r ∘ s_{i−1}) = ∂L/∂a_h U (DX_lp's first n columns), then ∂L/∂a_r = it ∘ s ∘ r(1 − r) into DX and
        DX_lp (columns 2n…3n: apart from those read) and GOUT += it ∘ r: ∂L/∂s_{i−1} but the product by U_zr."""
        rows, cols, rok, cok = _tile_of(B, N, BM, BN)
        drs = _dot(tl.zeros([BM, BN], dtype=tl.float32), DX_lp, dxl_stride, rows, rok, U, N, 1, cols, cok, N, BK,
                   PRECISION)
        ok, at = rok[:, None] & cok[None, :], rows[:, None] * N + cols[None, :]
        r = tl.load(ZR + rows[:, None] * zr_stride + N + cols[None, :], mask=ok, other=0)
        s = tl.load(S + rows[:, None] * s_stride + cols[None, :], mask=ok, other=0)
        da_r = drs * s * r * (1 - r)
        tl.store(DX + rows[:, None] * dx_stride + 2 * N + cols[None, :], da_r, mask=ok)
        tl.store(DX_lp + rows[:, None] * dxl_stride + 2 * N + cols[None, :], _to(da_r, DX_lp), mask=ok)
        tl.store(GOUT + at, tl.load(GOUT + at, mask=ok, other=0) + drs * r, mask=ok)

    @triton.jit
    def _encoder_tile(rows, N, BM: tl.constexpr, BN: tl.constexpr):
        """Program (direction and block of rows, block of columns)'s direction d, rows and columns of a (D, rows, N)
        result, and which are inside it."""
        blocks = tl.cdiv(rows, BM)
        rws = (tl.program_id(0) % blocks) * BM + tl.arange(0, BM)
        cols = tl.program_id(1) * BN + tl.arange(0, BN)
        return tl.program_id(0) // blocks, rws, cols, rws < rows, cols < N

    @triton.jit
    def _encoder_forward(XI, x_d, x_b, HL, hl_d, W, BH, H, h_d, h_b, RZ, rz_d, rz_b, NT, nt_d, nt_b, GN, OUT, o_d, o_b,
                         OUT_lp, rows, N, HAS_H: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                         PRECISION: tl.constexpr):
        """g = W_h h_{t−1} + b_h (a product: HL (D, ≥rows, n) h_{t−1} in the products' dtype by W (D, 3n, n); none at
        the first step, where h = 0), then r, z = σ(a_rz + g_rz) into RZ, ñ = tanh(a_n + r ∘ g_n) into NT, g_n into
        GN and h_t = (1 − z) ∘ ñ + z ∘ h_{t−1} into OUT and OUT_lp (D, rows, n)."""
        d, rws, cols, rok, cok = _encoder_tile(rows, N, BM, BN)
        ok = rok[:, None] & cok[None, :]
        zero = tl.zeros([BM, BN], dtype=tl.float32)
        g_r, g_z, g_n, h = zero, zero, zero, zero
        if HAS_H:
            g_r, g_z, g_n = _dot3(zero, zero, zero, HL + d * hl_d, N, rws, rok, W + d * 3 * N * N, 1, N, N * N, cols,
                                  cok, N, BK, PRECISION)
            h = tl.load(H + d * h_d + rws[:, None] * h_b + cols[None, :], mask=ok, other=0)
        bh, x = BH + d * 3 * N + cols, XI + d * x_d + rws[:, None] * x_b + cols[None, :]
        r = tl.sigmoid(tl.load(x, mask=ok, other=0) + g_r + tl.load(bh, mask=cok, other=0)[None, :])
        z = tl.sigmoid(tl.load(x + N, mask=ok, other=0) + g_z + tl.load(bh + N, mask=cok, other=0)[None, :])
        g_n += tl.load(bh + 2 * N, mask=cok, other=0)[None, :]
        n_tilde = _tanh(tl.load(x + 2 * N, mask=ok, other=0) + r * g_n)
        out = n_tilde + z * (h - n_tilde)  # (1 − z) ∘ ñ + z ∘ h
        rz, at = RZ + d * rz_d + rws[:, None] * rz_b + cols[None, :], d * nt_d + rws[:, None] * nt_b + cols[None, :]
        tl.store(rz, r, mask=ok)
        tl.store(rz + N, z, mask=ok)
        tl.store(NT + at, n_tilde, mask=ok)
        tl.store(GN + at, g_n, mask=ok)
        tl.store(OUT + d * o_d + rws[:, None] * o_b + cols[None, :], out, mask=ok)
        tl.store(OUT_lp + (d * rows + rws[:, None]) * N + cols[None, :], _to(out, OUT_lp), mask=ok)

    @triton.jit
    def _encoder_backward(DOUT, o_d, o_b, DH1, DGN, rows_next, W, K3, RZ, rz_d, rz_b, NT, nt_d, nt_b, GN, H, DG, dg_d,
                          dg_b, DG_lp, DAN, DH_out, rows, N, HAS_H: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                          BK: tl.constexpr, PRECISION: tl.constexpr):
        """∂L/∂h_t = DOUT + DH1 + DGN W_h, the last two from step t + 1 (DH1 (D, rows_next, n) its ∂L/∂h ∘ z, DGN
        (D, rows_next, 3n) its ∂L/∂g in the products' dtype, a product by W (D, 3n, n); K3 = 0 and rows_next = 0 at
        the last step: none), then ∂L/∂g into DG and DG_lp (D, rows, 3n), ∂L/∂a_n into DAN, ∂L/∂h_t ∘ z into DH_out
        (D, rows, n). H: h_{t−1}, with DOUT's strides."""
        d, rws, cols, rok, cok = _encoder_tile(rows, N, BM, BN)
        later = rws < rows_next
        gh = _dot(tl.zeros([BM, BN], dtype=tl.float32), DGN + d * rows_next * 3 * N, 3 * N, rws, later,
                  W + d * 3 * N * N, N, 1, cols, cok, K3, BK, PRECISION)
        ok, at_o = rok[:, None] & cok[None, :], d * o_d + rws[:, None] * o_b + cols[None, :]
        gh += tl.load(DOUT + at_o, mask=ok, other=0)
        gh += tl.load(DH1 + (d * rows_next + rws[:, None]) * N + cols[None, :], mask=later[:, None] & cok[None, :],
                      other=0)
        rz, at = RZ + d * rz_d + rws[:, None] * rz_b + cols[None, :], d * nt_d + rws[:, None] * nt_b + cols[None, :]
        r, z = tl.load(rz, mask=ok, other=0), tl.load(rz + N, mask=ok, other=0)
        n_tilde, g_n = tl.load(NT + at, mask=ok, other=0), tl.load(GN + at, mask=ok, other=0)
        h = tl.zeros([BM, BN], dtype=tl.float32)
        if HAS_H:
            h = tl.load(H + at_o, mask=ok, other=0)
        da_n = gh * (1 - z) * (1 - n_tilde * n_tilde)  # through ñ
        dg_r = da_n * g_n * r * (1 - r)
        dg_z = gh * (h - n_tilde) * z * (1 - z)
        dg_n = da_n * r
        dg, dg_lp = DG + d * dg_d + rws[:, None] * dg_b + cols[None, :], DG_lp + (d * rows + rws[:, None]) * 3 * N + \
            cols[None, :]
        tl.store(dg, dg_r, mask=ok)
        tl.store(dg + N, dg_z, mask=ok)
        tl.store(dg + 2 * N, dg_n, mask=ok)
        tl.store(dg_lp, _to(dg_r, DG_lp), mask=ok)
        tl.store(dg_lp + N, _to(dg_z, DG_lp), mask=ok)
        tl.store(dg_lp + 2 * N, _to(dg_n, DG_lp), mask=ok)
        tl.store(DAN + at, da_n, mask=ok)
        tl.store(DH_out + (d * rows + rws[:, None]) * N + cols[None, :], gh * z, mask=ok)


def _grid(B: int, N: int, lp: torch.dtype) -> tuple[tuple[int, int], dict]:
    """The grid, tiles and tl.dot's PRECISION of a step's product with its element-wise work, (B, N) the result's
    shape, lp its operands' dtype: blocks of 32 rows (16 up to 16) and 64 columns, the tile cuBLAS chose for the same products at
    batch 80 (nvjet 64x32, in its column-major terms 64 of the result's columns by 32 rows;
    docs/bench/gpu-h200-2026-11-28.json), and 64 of the inner dimension in bf16, 16 in float32 (compiled for sm_90,
    _gru_gates spilled 1.1 KB a thread to local memory at 64 float32 values, 316 bytes at 32 with Triton 3.6, the
    GPU image's; none at 16). Not yet timed on a GPU."""
    BM = 16 if B <= 16 else 32
    tiles = {"BM": BM, "BN": 64, "BK": 64 if lp.itemsize == 2 else 16, "PRECISION": precision(lp)}
    return (triton.cdiv(B, BM), triton.cdiv(N, 64)), tiles


def precision(lp: torch.dtype) -> str:
    """tl.dot's input precision for products in `lp`: float32 ones on TF32 tensor cores where torch's products run
    there (CUDA's allow_tf32, as bench-train's tf32 sets it), else in full float32."""
    return "tf32" if lp == torch.float32 and torch.backends.cuda.matmul.allow_tf32 else "ieee"


def gru_forward(X, C_lp, C_w, S_lp, U_zr, U, S, ZR, RS_lp, St, S_next, S_next_lp):
    """One GRU step (App. A.2.2) in two kernels, each a matrix product with its element-wise work: X (B, 3n)
    [x_h | x_z | x_r]; C_lp (B, ctx) c_i and C_w (3n, ctx) [C; C_z; C_r], or both None (no attention); S (B, n)
    s_{i−1} and S_lp its copy in the products' dtype; U_zr (2n, n) and U (n, n) in that dtype. Gates into ZR,
    r ∘ s into RS_lp (the products' dtype), s̃ into St, s_i into S_next and S_next_lp."""
    B, N = S.shape
    grid, tiles = _grid(B, N, U.dtype)
    ctx, cc, cw = (C_lp.size(1), C_lp, C_w) if C_lp is not None else (0, S_lp, U)
    _gru_gates[grid](X, X.stride(0), cc, cc.stride(0), cw, ctx, S_lp, S_lp.stride(0), U_zr, S, S.stride(0), ZR,
                     ZR.stride(0), RS_lp, RS_lp.stride(0), St, St.stride(0), B, N, **tiles)
    _gru_state[grid](RS_lp, RS_lp.stride(0), U, St, St.stride(0), ZR, ZR.stride(0), S, S.stride(0), S_next,
                     S_next.stride(0), S_next_lp, S_next_lp.stride(0), B, N, **tiles)


def gru_backward(G1, DP, W_g, ZR, St, S, DS, U, DX, DX_lp, G_out):
    """The GRU step's backward pass in two kernels, each a matrix product with its element-wise work, from ∂L/∂s_i =
    G1 + DP[:, n:] W_g (DP: the next position's DX_lp, or None; W_g (2n + n', n) [U_zr; W_a] in the products'
    dtype): ∂L/∂[a_h | a_z | a_r] into DX (B, 3n) and DX_lp (B, 3n + n'; another tensor than DP), and into G_out
    ∂L/∂s_{i−1} through the step plus DS (B, n), all but its product by U_zr and W_a (the next call's)."""
    B, N = S.shape
    grid, tiles = _grid(B, N, U.dtype)
    dp, k = (DP, W_g.size(0)) if DP is not None else (DX_lp, 0)
    assert dp.stride(0) == DX_lp.stride(0)
    _gru_grad_gates[grid](G1, G1.stride(0), dp, k, W_g, ZR, ZR.stride(0), St, St.stride(0), S, S.stride(0), DS,
                          DS.stride(0), DX, DX.stride(0), DX_lp, DX_lp.stride(0), G_out, B, N, **tiles)
    _gru_grad_reset[grid](DX_lp, DX_lp.stride(0), U, ZR, ZR.stride(0), S, S.stride(0), DX, DX.stride(0), G_out, B, N,
                          **tiles)


def encoder_forward(XI, H_lp, W, b_h, H, RZ, Nt, Gn, OUT, OUT_lp):
    """One step of both directions (`fused._EncoderGRU`'s equations) for the rows inside their sentence, in one kernel,
    the product W_h h inside it: XI (D, rows, 3n) W_i x + b_i; H_lp (D, ≥rows, n) h_{t−1} in the products' dtype and
    H (D, rows, n) in float32, both None at the first step (h = 0); W (D, 3n, n) W_h in the products' dtype, b_h
    (D, 3n) → r and z into RZ, ñ into Nt, g_n = (W_h h + b_h)'s third part into Gn, h_t into OUT and OUT_lp (D,
    rows, n; its rows contiguous, as the next step reads it)."""
    D, rows, n3 = XI.shape
    N = n3 // 3
    grid, tiles = _grid(rows, N, W.dtype)
    hl, h = (H_lp, H) if H is not None else (OUT_lp, OUT)
    assert hl.stride(1) == N and OUT_lp.is_contiguous()
    _encoder_forward[(D * grid[0], grid[1])](
        XI, XI.stride(0), XI.stride(1), hl, hl.stride(0), W, b_h, h, h.stride(0), h.stride(1), RZ, RZ.stride(0),
        RZ.stride(1), Nt, Nt.stride(0), Nt.stride(1), Gn, OUT, OUT.stride(0), OUT.stride(1), OUT_lp, rows, N,
        H is not None, **tiles)


def encoder_backward(DOUT, DH1, DGN, W, RZ, Nt, Gn, H, DG, DG_lp, DAN, DH_out):
    """The step's backward pass in one kernel, from ∂L/∂h_t = DOUT + DH1 + DGN W_h (DH1 (D, rows_next, n) and DGN
    (D, rows_next, 3n; the products' dtype) from step t + 1, or both None; W (D, 3n, n) W_h in that dtype): ∂L/∂g
    into DG and DG_lp (D, rows, 3n, contiguous), ∂L/∂a_n into DAN, and DH_out = ∂L/∂h_t ∘ z (D, rows, n), the
    element-wise part of ∂L/∂h_{t−1}. H: h_{t−1}, None at the first step. Nt and Gn share their strides."""
    D, rows, N = DOUT.shape
    rows_next, k3 = (DH1.size(1), 3 * N) if DH1 is not None else (0, 0)
    grid, tiles = _grid(rows, N, W.dtype)
    h = H if H is not None else DOUT
    assert DG_lp.is_contiguous() and DH_out.is_contiguous() and (DGN is None or DGN.is_contiguous())
    _encoder_backward[(D * grid[0], grid[1])](
        DOUT, DOUT.stride(0), DOUT.stride(1), DH1 if DH1 is not None else DOUT, DGN if DGN is not None else DG_lp,
        rows_next, W, k3, RZ, RZ.stride(0), RZ.stride(1), Nt, Nt.stride(0), Nt.stride(1), Gn, h, DG, DG.stride(0),
        DG.stride(1), DG_lp, DAN, DH_out, rows, N, H is not None, **tiles)


def usable(x: torch.Tensor) -> bool:
    """Whether these kernels can run on x's device (a GPU with Triton, or Triton's interpreter on the CPU)."""
    if triton is None or os.environ.get("RNNSEARCH_TRITON", "1") == "0":
        return False
    return x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


__all__ = ["encoder_backward", "encoder_forward", "gru_backward", "gru_forward", "usable"]
