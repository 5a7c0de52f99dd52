"""The decoder recurrence of App. A.2.2 under teacher forcing on a GPU: `fused._DeepOutputRecurrence`'s forward and
backward passes in Triton kernels (`triton_kernels.py`, the attention's in `attention_kernels.py`), 4 kernels per
target position forward (from 24) and 4 backward (from 36) for RNNsearch, 2 each way for RNNencdec, every matrix
product of a step inside a kernel with the element-wise work beside it; and the encoder's GRU (`EncoderKernels`).

Per position i, forward (s = s_{i−1}, the paper's symbols; see fused.py):
    W_a s: p, e's shares;  α_i, c_i                          attend_forward (two kernels, the first a product, then
                                                            the element-wise work on its result)
    C c_i + U_zr s: z, r, r ∘ s;  U [r ∘ s]: s̃, s_i           gru_forward (two kernels, each likewise)
backward, from ∂L/∂s_i = G1 + [∂L/∂a_zr | ∂L/∂(W_a s_i)] [U_zr; W_a] of position i + 1:
    that product: ∂L/∂a_h, ∂L/∂a_z;  ∂L/∂a_h U: ∂L/∂a_r, G1   gru_backward (two kernels, likewise)
    ∂L/∂x C: ∂L/∂c_i, ∂L/∂α's shares;  de, ∂L/∂(W_a s)       attend_backward (two kernels, the first likewise)
after the loop, ∂L/∂(U_a h) and ∂L/∂v_a from every step's softmax backward: keys_grad (one kernel). p is not kept:
the kernels that need it recompute it from W_a s (kept per position) and U_a h.
The weights' gradients are the same GEMMs over all steps as fused.py's. The products run in `lp` (bf16 under
autocast), everything else in float32, as in fused.py; tests/test_fused.py and tests/test_triton.py check both paths
alike.
"""

from __future__ import annotations

import torch

from rnnsearch.model import triton_kernels as K
from rnnsearch.model.attention_kernels import attend_backward, attend_forward, keys_grad
from rnnsearch.model.products import mm


def _over_steps(G: torch.Tensor, Y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A weight's gradient Σ_bi G_biᵀ Y_bi from G (B, Ty, ·) and Y (B, Ty, ·) in the products' dtype, views read as
    they lie (no copies), the result in `dtype`: as fused.py's, whose operands are cast to that dtype first."""
    return (G.flatten(0, 1).t() @ Y.flatten(0, 1)).to(dtype)


class DeepOutputKernels(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, s0, h, keys, mask, W_a, v_a, C, U_zr, U, lp):
        attn = h is not None
        B, Ty, n3 = X.shape
        n = n3 // 3
        X = X.contiguous()
        U_zr_lp, U_lp = U_zr.to(lp).contiguous(), U.to(lp).contiguous()
        S, S_lp = X.new_empty(B, Ty, n), X.new_empty(B, Ty, n, dtype=lp)  # s_{i−1} of every position
        S[:, 0], S_lp[:, 0] = s0, s0
        T1 = max(Ty - 1, 0)
        ZR, St = X.new_empty(B, T1, 2 * n), X.new_empty(B, T1, n)
        RS_lp = X.new_empty(B, Ty, n, dtype=lp)  # r_i ∘ s_{i−1}, 0 at the last position (no step: dU's sum over all)
        RS_lp[:, -1].zero_()
        C_lp = C_w = Q = None
        if attn:
            # U_a h, a product of the encoder's (autocast's dtype already), read in lp: half the bytes of float32;
            # h stays float32 (read in bf16, c_i and through it the attention's gradients drifted from float32's
            # several times as far as the autograd path's, tests/test_fused.py at 50 words)
            h, keys_lp, M = h.contiguous(), keys.to(lp).contiguous(), mask.to(torch.uint8).contiguous()
            Tx, ctx_dim = h.shape[1:]
            W_a_lp, C_w, v = W_a.to(lp).contiguous(), C.to(lp).contiguous(), v_a.reshape(-1).contiguous()
            Q = X.new_empty(Ty, B, W_a.size(0), dtype=lp)  # W_a s_{i−1} per position
            A, Cc, C_lp = X.new_empty(B, Ty, Tx), X.new_empty(B, Ty, ctx_dim), X.new_empty(B, Ty, ctx_dim, dtype=lp)
        for i in range(Ty if attn else T1):
            if attn:
                attend_forward(S_lp[:, i], W_a_lp, Q[i], keys_lp, v, h, M, A[:, i], Cc[:, i], C_lp[:, i])
            if i + 1 < Ty:
                K.gru_forward(X[:, i], C_lp[:, i] if attn else None, C_w, S_lp[:, i], U_zr_lp, U_lp, S[:, i], ZR[:, i],
                              RS_lp[:, i], St[:, i], S[:, i + 1], S_lp[:, i + 1])
        ctx.attn, ctx.lp = attn, lp
        if attn:  # the weights in lp as cast here, for the backward pass's products
            ctx.save_for_backward(S, S_lp, ZR, St, RS_lp, h, keys_lp, Q, C_lp, A, W_a_lp, v, C_w, U_zr_lp, U_lp)
            return S, Cc
        ctx.save_for_backward(S, S_lp, ZR, St, RS_lp, U_zr_lp, U_lp)
        return S

    @staticmethod
    def backward(ctx, dS, dCc=None):
        attn, lp = ctx.attn, ctx.lp
        if attn:
            S, S_lp, ZR, St, RS_lp, h, keys_lp, Q, C_lp, A, W_a_lp, v, C_w, U_zr_lp, U_lp = ctx.saved_tensors
        else:
            S, S_lp, ZR, St, RS_lp, U_zr_lp, U_lp = ctx.saved_tensors
        B, Ty, n = S.shape
        na = W_a_lp.size(0) if attn else 0
        dS = torch.zeros_like(S) if dS is None else dS.contiguous()
        dX = S.new_zeros(B, Ty, 3 * n)  # the last position's input is never used
        # [∂L/∂a_h | ∂L/∂a_zr | ∂L/∂(W_a s)] per position in lp, as the weights' gradients read it (the GRU's part 0
        # at the last position, which has no step); a step reads the next position's
        DX_lp = S.new_empty(B, Ty, 3 * n + na, dtype=lp)
        DX_lp[:, -1, : 3 * n].zero_()
        W_g = torch.cat([U_zr_lp, W_a_lp]) if attn else U_zr_lp  # (2n + n', n)
        buffers = S.new_empty(B, n), S.new_empty(B, n)
        if attn:
            dCc = torch.zeros_like(C_lp, dtype=S.dtype) if dCc is None else dCc.contiguous()
            Gc, DE = torch.empty_like(dCc), torch.empty_like(A)
        G1, later = dS[:, Ty - 1], None  # ∂L/∂s_i = G1 + later[:, n:] W_g
        for i in reversed(range(Ty)):
            here, step = DX_lp[:, i], i + 1 < Ty
            if step:
                K.gru_backward(G1, later, W_g, ZR[:, i], St[:, i], S[:, i], dS[:, i], U_lp, dX[:, i], here,
                               buffers[i % 2])
                G1, later = buffers[i % 2], here
            if attn:
                attend_backward(dCc[:, i], here if step else None, C_w, Gc[:, i], Q[i], keys_lp, A[:, i], h, v,
                                DE[:, i], here[:, 3 * n :])
                later = here
        g = G1 + (later[:, n:] @ W_g).float() if later is not None else G1.clone()
        dU_zr = _over_steps(DX_lp[..., n : 3 * n], S_lp, S.dtype)
        dU = _over_steps(DX_lp[..., :n], RS_lp, S.dtype)
        if not attn:
            return dX, g, None, None, None, None, None, None, dU_zr, dU, None
        dC = _over_steps(DX_lp[..., : 3 * n], C_lp, S.dtype)
        dW_a = _over_steps(DX_lp[..., 3 * n :], S_lp, S.dtype)
        dh = torch.bmm(A.transpose(1, 2), Gc)  # Σ_i α_ij ∂L/∂c_i
        dkeys, dv = keys_grad(DE, Q, keys_lp, v)
        return dX, g, dh, dkeys, None, dW_a, dv.view(1, -1), dC, dU_zr, dU, None


class EncoderKernels(torch.autograd.Function):
    """`fused._EncoderGRU` (nn.GRU's equations, D directions at once, the rows inside their sentence a prefix of the
    batch) in one kernel per step each way (from 9 forward and about 20 backward), each the step's product for both
    directions (W_h h_{t−1}; backward, the next step's ∂L/∂g W_h) with the element-wise work on its result."""

    @staticmethod
    def forward(ctx, XI, W_h, b_h, active, last, lp):
        D, B, Tx, n3 = XI.shape
        n = n3 // 3
        XI = XI.contiguous()
        OUT = XI.new_zeros(D, B, Tx, n)  # h_t; zero at padding
        RZ, Nt, Gn = XI.new_empty(D, B, Tx, 2 * n), XI.new_empty(D, B, Tx, n), XI.new_empty(D, B, Tx, n)
        W_lp, b_h = W_h.to(lp).contiguous(), b_h.contiguous()  # (D, 3n, n)
        h_lp = None
        for t, rows in enumerate(active):
            out_lp = XI.new_empty(D, rows, n, dtype=lp)
            K.encoder_forward(XI[:, :rows, t], h_lp, W_lp, b_h, OUT[:, :rows, t - 1] if t else None, RZ[:, :rows, t],
                              Nt[:, :rows, t], Gn[:, :rows, t], OUT[:, :rows, t], out_lp)
            h_lp = out_lp
        ctx.active, ctx.last, ctx.lp = active, last, lp
        ctx.save_for_backward(OUT, RZ, Nt, Gn, W_lp)  # W_h in lp as cast here, for the backward pass's products
        return OUT, OUT[:, torch.arange(B, device=XI.device), last]  # each row's state at its last word

    @staticmethod
    def backward(ctx, dOUT, dH):
        OUT, RZ, Nt, Gn, W_lp = ctx.saved_tensors
        D, B, Tx, n = OUT.shape
        dOUT = dOUT.clone(memory_format=torch.contiguous_format)
        dOUT[:, torch.arange(B, device=OUT.device), ctx.last] += dH
        dG = OUT.new_zeros(D, B, Tx, 3 * n)  # ∂L/∂g (zero where a row was not computed)
        DAN = OUT.new_zeros(D, B, Tx, n)  # ∂L/∂a_n
        DH1 = DGN = None  # from step t + 1: ∂L/∂h_t = DH1 + DGN W_h (in the next step's kernel)
        for t in reversed(range(len(ctx.active))):
            rows = ctx.active[t]
            dG_lp, DH_out = OUT.new_empty(D, rows, 3 * n, dtype=ctx.lp), OUT.new_empty(D, rows, n)
            K.encoder_backward(dOUT[:, :rows, t], DH1, DGN, W_lp, RZ[:, :rows, t], Nt[:, :rows, t], Gn[:, :rows, t],
                               OUT[:, :rows, t - 1] if t else None, dG[:, :rows, t], dG_lp, DAN[:, :rows, t], DH_out)
            DH1, DGN = DH_out, dG_lp
        dXI = torch.cat([dG[..., : 2 * n], DAN], dim=3)  # ∂L/∂[a_r; a_z; a_n]
        H_prev = torch.cat([OUT.new_zeros(D, B, 1, n), OUT[:, :, :-1]], dim=2)  # h_{t−1} per position
        dW_h = mm(dG.flatten(1, 2).transpose(1, 2), H_prev.flatten(1, 2), ctx.lp)  # (D, 3n, n)
        return dXI, dW_h, dG.sum((1, 2)), None, None, None
