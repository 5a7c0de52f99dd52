"""Triton kernels for one step of the recurrences of App. A.2 on a GPU (`fused_gpu.py` runs them): the GRU steps of
the decoder and of the encoder here, the attention's in `attention_kernels.py`; the loss's and Adadelta's kernels
are beside what they speed up (training/loss_kernels.py, training/optimizers.py).

On a GPU the recurrence is bound by the number of kernels, not their work: the autograd-free loop of `fused.py`
launches some 24 small kernels per target position forward and 36 backward (docs/benchmarks.md). Here each
element-wise stretch between two matrix products is one kernel:

    gru_forward_a      [z; r] = σ(x_zr + C_zr c_i + U_zr s_{i−1}),  r ∘ s_{i−1}
    gru_forward_b      s̃ = tanh(x_h + C c_i + U [r ∘ s_{i−1}]),  s_i = (1 − z) ∘ s_{i−1} + z ∘ s̃
    gru_backward_a     ∂L/∂a_h = g ∘ z ∘ (1 − s̃²),  ∂L/∂a_z = g ∘ (s̃ − s) ∘ z(1 − z)
    gru_backward_b     ∂L/∂a_r = (Uᵀ ∂L/∂a_h) ∘ s ∘ r(1 − r),  ∂L/∂s_{i−1} (its element-wise part)
    encoder_forward,   one step of nn.GRU's equations for both directions, and its backward pass
    encoder_backward

g = ∂L/∂s_i arrives as two parts (`g1` float32 + `g2` in the products' dtype, the second the output of a matrix
product) so that their sum needs no kernel of its own. Every value is computed in float32; each kernel also
writes, where a matrix product reads it next, a copy in the products' dtype (`*_lp`, bf16 under autocast).
tanh(x) is written 2σ(2x) − 1 (Triton has no tanh of its own on every backend, its interpreter included);
`_tanh` and `_to` (a float32 value in a pointer's dtype) serve the attention's kernels too.
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


def _pow2(x: int, least: int = 16) -> int:
    return max(least, 1 << (x - 1).bit_length())


if triton is not None:

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
    def _gru_forward_a(X, x_stride, CX, QZ, qz_stride, S, s_stride, ZR, zr_stride, RS, rs_stride, RS_lp, N,
                       HAS_CX: tl.constexpr, BLOCK: tl.constexpr):
        b = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < N
        a_z = tl.load(X + b * x_stride + N + cols, mask=ok, other=0)
        a_z += tl.load(QZ + b * qz_stride + cols, mask=ok, other=0).to(tl.float32)
        a_r = tl.load(X + b * x_stride + 2 * N + cols, mask=ok, other=0)
        a_r += tl.load(QZ + b * qz_stride + N + cols, mask=ok, other=0).to(tl.float32)
        if HAS_CX:
            a_z += tl.load(CX + b * 3 * N + N + cols, mask=ok, other=0).to(tl.float32)
            a_r += tl.load(CX + b * 3 * N + 2 * N + cols, mask=ok, other=0).to(tl.float32)
        z, r = tl.sigmoid(a_z), tl.sigmoid(a_r)
        tl.store(ZR + b * zr_stride + cols, z, mask=ok)
        tl.store(ZR + b * zr_stride + N + cols, r, mask=ok)
        rs = r * tl.load(S + b * s_stride + cols, mask=ok, other=0)
        tl.store(RS + b * rs_stride + cols, rs, mask=ok)
        tl.store(RS_lp + b * N + cols, _to(rs, RS_lp), mask=ok)

    @triton.jit
    def _gru_forward_b(X, x_stride, CX, UR, S, s_stride, ZR, zr_stride, ST, st_stride, SN, sn_stride, SN_lp,
                       snl_stride, N, HAS_CX: tl.constexpr, BLOCK: tl.constexpr):
        b = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < N
        a_h = tl.load(X + b * x_stride + cols, mask=ok, other=0)
        a_h += tl.load(UR + b * N + cols, mask=ok, other=0).to(tl.float32)
        if HAS_CX:
            a_h += tl.load(CX + b * 3 * N + cols, mask=ok, other=0).to(tl.float32)
        s_tilde = _tanh(a_h)
        z = tl.load(ZR + b * zr_stride + cols, mask=ok, other=0)
        s = tl.load(S + b * s_stride + cols, mask=ok, other=0)
        s_new = s + z * (s_tilde - s)
        tl.store(ST + b * st_stride + cols, s_tilde, mask=ok)
        tl.store(SN + b * sn_stride + cols, s_new, mask=ok)
        tl.store(SN_lp + b * snl_stride + cols, _to(s_new, SN_lp), mask=ok)

    @triton.jit
    def _state_grad(G1, g1_stride, G2, b, N, cols, ok):
        """g = ∂L/∂s_i of row b, columns `cols`: G1 (float32) + G2 (the products' dtype, (B, n))."""
        return tl.load(G1 + b * g1_stride + cols, mask=ok, other=0) + tl.load(G2 + b * N + cols, mask=ok,
                                                                               other=0).to(tl.float32)

    @triton.jit
    def _gru_backward_a(G1, g1_stride, G2, ZR, zr_stride, ST, st_stride, S, s_stride, DX, dx_stride, DX_lp,
                        dxl_stride, N, BLOCK: tl.constexpr):
        b = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < N
        g = _state_grad(G1, g1_stride, G2, b, N, cols, ok)
        z = tl.load(ZR + b * zr_stride + cols, mask=ok, other=0)
        s_tilde = tl.load(ST + b * st_stride + cols, mask=ok, other=0)
        s = tl.load(S + b * s_stride + cols, mask=ok, other=0)
        da_h = g * z * (1 - s_tilde * s_tilde)
        da_z = g * (s_tilde - s) * z * (1 - z)
        tl.store(DX + b * dx_stride + cols, da_h, mask=ok)
        tl.store(DX + b * dx_stride + N + cols, da_z, mask=ok)
        tl.store(DX_lp + b * dxl_stride + cols, _to(da_h, DX_lp), mask=ok)
        tl.store(DX_lp + b * dxl_stride + N + cols, _to(da_z, DX_lp), mask=ok)

    @triton.jit
    def _gru_backward_b(G1, g1_stride, G2, ZR, zr_stride, S, s_stride, DRS, DS, ds_stride, DX, dx_stride, DX_lp,
                        dxl_stride, GOUT, N, BLOCK: tl.constexpr):
        b = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < N
        g = _state_grad(G1, g1_stride, G2, b, N, cols, ok)
        z = tl.load(ZR + b * zr_stride + cols, mask=ok, other=0)
        r = tl.load(ZR + b * zr_stride + N + cols, mask=ok, other=0)
        s = tl.load(S + b * s_stride + cols, mask=ok, other=0)
        drs = tl.load(DRS + b * N + cols, mask=ok, other=0).to(tl.float32)  # ∂L/∂(r ∘ s)
        da_r = drs * s * r * (1 - r)
        tl.store(DX + b * dx_stride + 2 * N + cols, da_r, mask=ok)
        tl.store(DX_lp + b * dxl_stride + 2 * N + cols, _to(da_r, DX_lp), mask=ok)
        ds = g * (1 - z) + drs * r + tl.load(DS + b * ds_stride + cols, mask=ok, other=0)
        tl.store(GOUT + b * N + cols, ds, mask=ok)

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


def gru_forward(X, CX, QZ, UR_of, S, ZR, RS, RS_lp, St, S_next, S_next_lp):
    """One GRU step from X (B, 3n) [x_h | x_z | x_r], CX (B, 3n) C c_i or None, QZ (B, 2n) U_zr s_{i−1}, S (B, n)
    s_{i−1}: gates into ZR, r ∘ s into RS and RS_lp, then `UR_of(RS_lp)` = U [r ∘ s], s̃ into St and s_i into
    S_next and S_next_lp."""
    B, N = S.shape
    grid = (B, triton.cdiv(N, BLOCK))
    cx = CX if CX is not None else X
    _gru_forward_a[grid](X, X.stride(0), cx, QZ, QZ.stride(0), S, S.stride(0), ZR, ZR.stride(0), RS, RS.stride(0),
                         RS_lp, N, CX is not None, BLOCK=BLOCK)
    UR = UR_of(RS_lp)
    _gru_forward_b[grid](X, X.stride(0), cx, UR, S, S.stride(0), ZR, ZR.stride(0), St, St.stride(0), S_next,
                         S_next.stride(0), S_next_lp, S_next_lp.stride(0), N, CX is not None, BLOCK=BLOCK)


def gru_backward(G1, G2, ZR, St, S, DS, DRS_of, DX, DX_lp, G_out):
    """The GRU step's backward from g = G1 + G2 = ∂L/∂s_i: ∂L/∂[a_h | a_z | a_r] into DX (B, 3n) and DX_lp, with
    DRS_of(DX_lp[:, :n]) = ∂L/∂a_h U; G_out = ∂L/∂s_{i−1} through the step, plus DS (B, n)."""
    B, N = S.shape
    grid = (B, triton.cdiv(N, BLOCK))
    _gru_backward_a[grid](G1, G1.stride(0), G2, ZR, ZR.stride(0), St, St.stride(0), S, S.stride(0), DX,
                          DX.stride(0), DX_lp, DX_lp.stride(0), N, BLOCK=BLOCK)
    DRS = DRS_of(DX_lp[:, :N])
    _gru_backward_b[grid](G1, G1.stride(0), G2, ZR, ZR.stride(0), S, S.stride(0), DRS, DS, DS.stride(0), DX,
                          DX.stride(0), DX_lp, DX_lp.stride(0), G_out, N, BLOCK=BLOCK)


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
