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
    encoder_forward,   one step of nn.GRU's equations for both directions (its product W_h h beside it), and its
    encoder_backward   backward pass

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

BLOCK = 256  # columns of a state per program
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
        a_h = _dot(zero, CC, cc_stride, rows, rok, C_w, 1, CTX, cols, cok, CTX, BK, PRECISION)
        a_z = _dot(zero, CC, cc_stride, rows, rok, C_w + N * CTX, 1, CTX, cols, cok, CTX, BK, PRECISION)
        a_r = _dot(zero, CC, cc_stride, rows, rok, C_w + 2 * N * CTX, 1, CTX, cols, cok, CTX, BK, PRECISION)
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
    def _encoder_forward(XI, x_d, x_b, G, BH, H, h_d, h_b, RZ, rz_d, rz_b, NT, nt_d, nt_b, GN, OUT, o_d, o_b, OUT_lp,
                         rows, N, HAS_H: tl.constexpr, BLOCK: tl.constexpr):
        d, b = tl.program_id(0) // rows, tl.program_id(0) % rows
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < N
        x, g, bh = XI + d * x_d + b * x_b + cols, G + (d * rows + b) * 3 * N + cols, BH + d * 3 * N + cols
        g_r = tl.load(bh, mask=ok, other=0)
        g_z = tl.load(bh + N, mask=ok, other=0)
        g_n = tl.load(bh + 2 * N, mask=ok, other=0)
        h = tl.zeros([BLOCK], dtype=tl.float32)
        if HAS_H:
            g_r += tl.load(g, mask=ok, other=0).to(tl.float32)
            g_z += tl.load(g + N, mask=ok, other=0).to(tl.float32)
            g_n += tl.load(g + 2 * N, mask=ok, other=0).to(tl.float32)
            h = tl.load(H + d * h_d + b * h_b + cols, mask=ok, other=0)
        r = tl.sigmoid(tl.load(x, mask=ok, other=0) + g_r)
        z = tl.sigmoid(tl.load(x + N, mask=ok, other=0) + g_z)
        n_tilde = _tanh(tl.load(x + 2 * N, mask=ok, other=0) + r * g_n)
        out = n_tilde + z * (h - n_tilde)  # (1 − z) ∘ ñ + z ∘ h
        tl.store(RZ + d * rz_d + b * rz_b + cols, r, mask=ok)
        tl.store(RZ + d * rz_d + b * rz_b + N + cols, z, mask=ok)
        tl.store(NT + d * nt_d + b * nt_b + cols, n_tilde, mask=ok)
        tl.store(GN + d * nt_d + b * nt_b + cols, g_n, mask=ok)
        tl.store(OUT + d * o_d + b * o_b + cols, out, mask=ok)
        tl.store(OUT_lp + (d * rows + b) * N + cols, _to(out, OUT_lp), mask=ok)

    @triton.jit
    def _encoder_backward(DOUT, o_d, o_b, DH1, DH2, rows_next, RZ, rz_d, rz_b, NT, nt_d, nt_b, GN, H, DG, dg_d, dg_b,
                          DG_lp, DAN, DH_out, rows, N, HAS_DH: tl.constexpr, HAS_H: tl.constexpr,
                          BLOCK: tl.constexpr):
        d, b = tl.program_id(0) // rows, tl.program_id(0) % rows
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < N
        gh = tl.load(DOUT + d * o_d + b * o_b + cols, mask=ok, other=0)
        if HAS_DH:  # ∂L/∂h_t from step t + 1, for the rows active there
            later = ok & (cols * 0 + b < rows_next)
            gh += tl.load(DH1 + (d * rows_next + b) * N + cols, mask=later, other=0)
            gh += tl.load(DH2 + (d * rows_next + b) * N + cols, mask=later, other=0).to(tl.float32)
        r = tl.load(RZ + d * rz_d + b * rz_b + cols, mask=ok, other=0)
        z = tl.load(RZ + d * rz_d + b * rz_b + N + cols, mask=ok, other=0)
        n_tilde = tl.load(NT + d * nt_d + b * nt_b + cols, mask=ok, other=0)
        g_n = tl.load(GN + d * nt_d + b * nt_b + cols, mask=ok, other=0)
        h = tl.zeros([BLOCK], dtype=tl.float32)
        if HAS_H:
            h = tl.load(H + d * o_d + b * o_b + cols, mask=ok, other=0)
        da_n = gh * (1 - z) * (1 - n_tilde * n_tilde)  # through ñ
        dg_r = da_n * g_n * r * (1 - r)
        dg_z = gh * (h - n_tilde) * z * (1 - z)
        dg_n = da_n * r
        dg, dg_lp = DG + d * dg_d + b * dg_b + cols, DG_lp + (d * rows + b) * 3 * N + cols
        tl.store(dg, dg_r, mask=ok)
        tl.store(dg + N, dg_z, mask=ok)
        tl.store(dg + 2 * N, dg_n, mask=ok)
        tl.store(dg_lp, _to(dg_r, DG_lp), mask=ok)
        tl.store(dg_lp + N, _to(dg_z, DG_lp), mask=ok)
        tl.store(dg_lp + 2 * N, _to(dg_n, DG_lp), mask=ok)
        tl.store(DAN + d * nt_d + b * nt_b + cols, da_n, mask=ok)
        tl.store(DH_out + (d * rows + b) * N + cols, gh * z, mask=ok)


def _grid(B: int, N: int) -> tuple[tuple[int, int], dict]:
    """The grid and tiles of a step's product with its element-wise work, (B, N) the result's shape: blocks of 32
    rows (16 up to 16) and 64 columns, 64 of the inner dimension: the tile cuBLAS chose for the same products at
    batch 80 (nvjet 64x32, in its column-major terms 64 of the result's columns by 32 rows;
    docs/bench/gpu-h200-2026-11-28.json). Not yet timed on a GPU."""
    BM = 16 if B <= 16 else 32
    return (triton.cdiv(B, BM), triton.cdiv(N, 64)), {"BM": BM, "BN": 64, "BK": 64}


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
    grid, tiles = _grid(B, N)
    ctx, cc, cw = (C_lp.size(1), C_lp, C_w) if C_lp is not None else (0, S_lp, U)
    prec = precision(U.dtype)
    _gru_gates[grid](X, X.stride(0), cc, cc.stride(0), cw, ctx, S_lp, S_lp.stride(0), U_zr, S, S.stride(0), ZR,
                     ZR.stride(0), RS_lp, RS_lp.stride(0), St, St.stride(0), B, N, **tiles, PRECISION=prec)
    _gru_state[grid](RS_lp, RS_lp.stride(0), U, St, St.stride(0), ZR, ZR.stride(0), S, S.stride(0), S_next,
                     S_next.stride(0), S_next_lp, S_next_lp.stride(0), B, N, **tiles, PRECISION=prec)


def gru_backward(G1, DP, W_g, ZR, St, S, DS, U, DX, DX_lp, G_out):
    """The GRU step's backward pass in two kernels, each a matrix product with its element-wise work, from ∂L/∂s_i =
    G1 + DP[:, n:] W_g (DP: the next position's DX_lp, or None; W_g (2n + n', n) [U_zr; W_a] in the products'
    dtype): ∂L/∂[a_h | a_z | a_r] into DX (B, 3n) and DX_lp (B, 3n + n'; another tensor than DP), and into G_out
    ∂L/∂s_{i−1} through the step plus DS (B, n), all but its product by U_zr and W_a (the next call's)."""
    B, N = S.shape
    grid, tiles = _grid(B, N)
    prec = precision(U.dtype)
    dp, k = (DP, W_g.size(0)) if DP is not None else (DX_lp, 0)
    assert dp.stride(0) == DX_lp.stride(0)
    _gru_grad_gates[grid](G1, G1.stride(0), dp, k, W_g, ZR, ZR.stride(0), St, St.stride(0), S, S.stride(0), DS,
                          DS.stride(0), DX, DX.stride(0), DX_lp, DX_lp.stride(0), G_out, B, N, **tiles,
                          PRECISION=prec)
    _gru_grad_reset[grid](DX_lp, DX_lp.stride(0), U, ZR, ZR.stride(0), S, S.stride(0), DX, DX.stride(0), G_out, B, N,
                          **tiles, PRECISION=prec)


def encoder_forward(XI, G, b_h, H, RZ, Nt, Gn, OUT, OUT_lp):
    """One step of both directions (`fused._EncoderGRU`'s equations) for the rows inside their sentence: XI (D, rows,
    3n) W_i x + b_i, G (D, rows, 3n) W_h h (None at the first step, where h = 0), b_h (D, 3n), H (D, rows, n) h_{t−1}
    → r and z into RZ, ñ into Nt, b_h + W_h h's third part into Gn, h_t into OUT and OUT_lp (D, rows, n)."""
    D, rows, n3 = XI.shape
    N = n3 // 3
    h, g = (H, G) if G is not None else (OUT, OUT_lp)
    _encoder_forward[(D * rows, triton.cdiv(N, BLOCK))](
        XI, XI.stride(0), XI.stride(1), g, b_h, h, h.stride(0), h.stride(1), RZ, RZ.stride(0), RZ.stride(1), Nt,
        Nt.stride(0), Nt.stride(1), Gn, OUT, OUT.stride(0), OUT.stride(1), OUT_lp, rows, N, G is not None,
        BLOCK=BLOCK)


def encoder_backward(DOUT, DH1, DH2, RZ, Nt, Gn, H, DG, DG_lp, DAN, DH_out):
    """The step's backward from ∂L/∂h_t = DOUT + DH1 + DH2 (the last two (D, rows_next, n) from step t + 1, or None):
    ∂L/∂g into DG and DG_lp (D, rows, 3n), ∂L/∂a_n into DAN, and DH_out = ∂L/∂h_t ∘ z (D, rows, n), to which
    DG_lp W_h adds the rest of ∂L/∂h_{t−1}. H: h_{t−1}, None at the first step. Nt and Gn share their strides."""
    D, rows, N = DOUT.shape
    rows_next = DH1.size(1) if DH1 is not None else 0
    h = H if H is not None else DOUT
    _encoder_backward[(D * rows, triton.cdiv(N, BLOCK))](
        DOUT, DOUT.stride(0), DOUT.stride(1), DH1 if DH1 is not None else DOUT, DH2 if DH2 is not None else DOUT,
        rows_next, RZ, RZ.stride(0), RZ.stride(1), Nt, Nt.stride(0), Nt.stride(1), Gn, h, DG, DG.stride(0),
        DG.stride(1), DG_lp, DAN, DH_out, rows, N, DH1 is not None, H is not None, BLOCK=BLOCK)


def usable(x: torch.Tensor) -> bool:
    """Whether these kernels can run on x's device (a GPU with Triton, or Triton's interpreter on the CPU)."""
    if triton is None or os.environ.get("RNNSEARCH_TRITON", "1") == "0":
        return False
    return x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


__all__ = ["encoder_backward", "encoder_forward", "gru_backward", "gru_forward", "usable"]
