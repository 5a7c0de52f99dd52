"""The decoder recurrence of training (teacher forcing) with a hand-written backward pass.

Autograd through the per-step loop of a decoder records some twenty small operations per target position, and
its backward pass adds up the gradient of every weight used inside the loop step by step: at the paper's sizes
(batch 80, 50 words) 51 additions of C's 24 MB gradient alone, and weight-gradient products whose inner
dimension is the batch (80 rows), which a GEMM runs far below its peak. Here the backward pass walks the steps
backwards (backpropagation through time), keeping per step only what it needs (gate values, the alignment
MLP's tanh, α), and computes each weight's gradient in one GEMM over all steps at the end:
    dW = Σ_i g_iᵀ x_i = Gᵀ X        (inner dimension B·Ty)
and ∂L/∂h_j = Σ_i α_ij ∂L/∂c_i as one batched product.

Two recurrences, the only ones the presets train with a GRU and additive (or no) attention:
    `deep_output_recurrence`      App. A.2.2 (RNNsearch, RNNencdec): c_i = attend(s_{i−1}); s_i = GRU(s_{i−1}, E y_{i−1}, c_i)
    `combined_output_recurrence`  attention on the new state, input feeding: s_t = GRU(s_{t−1}, [E y_{t−1}; o_{t−1}]);
                                  a_t = attend(s_t); o_t = tanh(W_u [a_t; s_t])  (JoeyNMT's decoder, Luong et al. 2015)
The forward equations are `model/equations.py`'s, which `decoders.ConditionalGRU` and
`attention.AdditiveAttention` call too; this module's own code is the hand-written backward pass.
tests/test_fused.py checks logits and every gradient against the autograd path (`fused = False` on the decoder).

Symbols (App. A), per target position i (rows of the batch b, source positions j):
    X        W E y_{i−1} + biases, all three gates' input-side terms [x_h | x_zr]   (B, Ty, 3n)
    S        s_{i−1} (deep output) or s_0 … s_Ty (combined output)                 (B, Ty(+1), n)
    ZR, St   [z_i; r_i] (B, Ty, 2n), s̃_i; RS = r_i ∘ s_{i−1}                      (B, Ty, n)
    keys     U_a h_j, precomputed once per batch                                  (B, Tx, n')
    P        tanh(W_a s_{i−1} + U_a h_j), kept per step for the backward pass      (B, Tx, n') each
    A, Cc    α_ij and c_i                                                         (B, Ty, Tx), (B, Ty, ctx)
    W_a, v_a, C, U_zr, U    the weights W_a, v_a, [C; C_z; C_r], [U_z; U_r], U
    O, W_u   o_t and W_u of the combined-output decoder
    dX, dS…  ∂L/∂X, ∂L/∂S, …

The encoder's GRU (`encoder_gru`, nn.GRU's equations) gets the same treatment, and more: both directions advance
in one batched product per step, and the rows are sorted by length so that step t computes only the sentences
still running (what a packed sequence does, without its slow backward pass).

Under autocast (`train.precision: bf16`) the recurrences run their matrix products in autocast's dtype and keep
everything else in float32 (`_apply`); without autocast every operation runs in the inputs' dtype.
"""

from __future__ import annotations

import bisect

import torch

from rnnsearch.model import triton_kernels
from rnnsearch.model.equations import additive_energies, align
from rnnsearch.model.fused_gpu import DeepOutputKernels, EncoderKernels
from rnnsearch.model.fused_memory import memory_path
from rnnsearch.model.gru import gru as _gru
from rnnsearch.model.gru import gru_backward as _gru_backward
from rnnsearch.model.products import addmm, addmm_, mm


# ------------------------------------------------------------------------------------------- mixed precision
def _apply(function, *args, memory=()):
    """function.apply(*args, lp, *memory), lp the dtype of its matrix products. Without autocast, lp is the
    inputs' own dtype. Under autocast (train.precision: bf16), lp is autocast's dtype and only the products use
    it: the inputs are cast to float32 and autocast is switched off inside, so states, gates, attention weights
    and sums over steps stay in float32; each product casts its activation operand, the weights are cast once per
    call. `memory`: an alignment model's, its m_0 and weights, as they are (fused_memory.py casts its products)."""
    device = args[0].device.type
    if not torch.is_autocast_enabled(device):
        return function.apply(*args, args[0].dtype, *memory)
    args = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    with torch.autocast(device, enabled=False):
        return function.apply(*args, torch.get_autocast_dtype(device), *memory)


# ------------------------------------------------------------------------------------------- the two pieces
def _attend(q_proj: torch.Tensor, keys: torch.Tensor, v: torch.Tensor, h: torch.Tensor, masked: torch.Tensor):
    """Additive attention from W_a q (`equations.additive_energies`, `equations.align`): p = tanh(W_a q + U_a h_j)
    (B, Tx, n'), α (B, Tx), c (B, ctx)."""
    p, e = additive_energies(q_proj, keys, lambda p: torch.matmul(p, v))  # (B, Tx, n'), (B, Tx)
    c, alpha = align(e, h, masked)
    return p, alpha, c


def _attend_backward(gc: torch.Tensor, p: torch.Tensor, alpha: torch.Tensor, h: torch.Tensor, v: torch.Tensor,
                     dkeys: torch.Tensor, dv: torch.Tensor, dalpha_memory: torch.Tensor | None = None):
    """Given ∂L/∂c (B, ctx) (and ∂L/∂α (B, Tx) from an alignment model's memory): adds into dkeys (B, Tx, n') and
    dv (n'), returns ∂L/∂(W_a q) (B, n') and ∂L/∂(the tanh's input) (B, Tx, n')."""
    dalpha = torch.bmm(h, gc.unsqueeze(2)).squeeze(2)  # (B, Tx): h_j · ∂L/∂c
    if dalpha_memory is not None:
        dalpha += dalpha_memory
    de = alpha * (dalpha - (alpha * dalpha).sum(1, keepdim=True))  # softmax backward; 0 on padding (α = 0)
    dv.addmv_(p.flatten(0, 1).t(), de.flatten())  # Σ_bj de_bj p_bj
    dp = torch.ops.aten.tanh_backward(de.unsqueeze(2) * v, p)  # (1 − p²) ∘ de v_aᵀ
    dkeys.add_(dp)
    return dp.sum(1), dp


# ------------------------------------------------------------------------------------------- App. A.2.2
class _DeepOutputRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, s0, h, keys, mask, W_a, v_a, C, U_zr, U, lp, attention=None, m0=None, *memory_weights):
        W_a, C, U_zr, U = (w.to(lp) if w is not None else None for w in (W_a, C, U_zr, U))  # the products' dtype
        B, Ty, _ = X.shape
        n = s0.size(1)
        attn = h is not None
        ctx.memory = memory_path(attention, keys, m0, list(memory_weights), lp) if m0 is not None else None
        if attn:
            keys = keys[..., : W_a.size(0)]  # U_a h_j (a variant with memory may keep more beside it)
        S = X.new_empty(B, Ty, n)  # s_{i−1} of every position
        ZR = X.new_empty(B, max(Ty - 1, 0), 2 * n)  # [z_i; r_i]
        St, RS = (X.new_empty(B, max(Ty - 1, 0), n) for _ in range(2))
        if attn:
            masked = ~mask
            v = v_a.view(-1)
            Cc = X.new_empty(B, Ty, h.size(2))  # c_i
            A = X.new_empty(B, Ty, h.size(1))  # α_i
            P = []
        S[:, 0] = s = s0
        for i in range(Ty):
            if attn:
                U_a_h = keys if ctx.memory is None else keys + ctx.memory.term(i)  # + M_i from m_{i−1}
                p, A[:, i], Cc[:, i] = _attend(mm(s, W_a.t()), U_a_h, v, h, masked)
                P.append(p)
                if ctx.memory is not None and i + 1 < Ty:
                    ctx.memory.advance(A[:, i], s)
            if i + 1 < Ty:  # the last state is never read
                x = addmm(X[:, i], Cc[:, i], C.t()) if attn else X[:, i]
                s = _gru(x, s, U_zr, U, ZR[:, i], RS[:, i], St[:, i], S[:, i + 1])
        ctx.attn = attn
        if attn:
            ctx.P = P
            ctx.save_for_backward(S, ZR, St, RS, h, Cc, A, W_a, v_a, C, U_zr, U)
            return S, Cc
        ctx.save_for_backward(S, ZR, St, RS, U_zr, U)
        return S

    @staticmethod
    def backward(ctx, dS, dCc=None):
        if ctx.attn:
            S, ZR, St, RS, h, Cc, A, W_a, v_a, C, U_zr, U = ctx.saved_tensors
            v = v_a.view(-1)
            memory = ctx.memory
            dkeys = torch.zeros_like(ctx.P[0]) if memory is None else memory.start_backward()[..., : W_a.size(0)]
            dv = torch.zeros_like(v)
            Gc, DQ = torch.empty_like(Cc), S.new_empty(S.size(0), S.size(1), W_a.size(0))
        else:
            S, ZR, St, RS, U_zr, U = ctx.saved_tensors
        B, Ty, n = S.shape
        lp = U.dtype
        dX = S.new_zeros(B, Ty, 3 * n)  # the last position's input is never used
        g = None  # ∂L/∂s_i from the later steps
        for i in reversed(range(Ty)):
            gs = dS[:, i].clone()
            if g is not None:
                gs += _gru_backward(g, S[:, i], ZR[:, i], St[:, i], U_zr, U, dX[:, i])
            if ctx.attn:
                gc = dCc[:, i] + mm(dX[:, i], C) if g is not None else dCc[:, i]
                Gc[:, i] = gc
                if memory is None:
                    DQ[:, i] = _attend_backward(gc, ctx.P[i], A[:, i], h, v, dkeys, dv)[0]
                else:
                    gs += _memory_backward(memory, i, gc, ctx.P[i], A[:, i], S[:, i], h, v, dkeys, dv, DQ)
                addmm_(gs, DQ[:, i], W_a)
            g = gs
        dU_zr = mm(dX[:, :-1, n:].flatten(0, 1).t(), S[:, :-1].flatten(0, 1), lp)
        dU = mm(dX[:, :-1, :n].flatten(0, 1).t(), RS.flatten(0, 1), lp)
        if not ctx.attn:
            return dX, g, None, None, None, None, None, None, dU_zr, dU, None
        dC = mm(dX[:, :-1].flatten(0, 1).t(), Cc[:, :-1].flatten(0, 1), lp)
        dW_a = mm(DQ.flatten(0, 1).t(), S.flatten(0, 1), lp)
        dh = torch.bmm(A.transpose(1, 2), Gc)  # Σ_i α_ij ∂L/∂c_i
        grads = dX, g, dh, dkeys, None, dW_a, dv.view_as(v_a), dC, dU_zr, dU, None
        if memory is None:
            return grads
        return *grads[:3], memory.dkeys, *grads[4:], None, memory.m0_grad(), *memory.weight_grads()


def _memory_backward(memory, i, gc, p, alpha, s_prev, h, v, dkeys, dv, DQ) -> torch.Tensor:
    """Step i of the attention's backward pass with an alignment model's memory (fused_memory.py): ∂L/∂α_i from
    m_i joins the softmax's, ∂L/∂M_i is the tanh input's; writes ∂L/∂(W_a s_{i−1}) into DQ[:, i] and returns
    ∂L/∂s_{i−1} through m_i (0 where the variant does not read s)."""
    dalpha, ds = memory.advance_backward(i, alpha, s_prev)
    DQ[:, i], dM = _attend_backward(gc, p, alpha, h, v, dkeys, dv, dalpha)
    memory.term_backward(i, dM)
    return ds if ds is not None else 0


def deep_output_recurrence(X, s0, cell, attention=None, h=None, keys=None, mask=None, m0=None):
    """App. A.2.2 under teacher forcing. X (B, Ty, 3n): W E y_{i−1} (plus C c for a fixed context), s0 (B, n),
    and m0 (B, Tx, d), the start of an alignment model's memory (fused_memory.py; the CPU's recurrence only).

    Returns S (B, Ty, n) = s_{i−1} per position and, with attention, the contexts c_i (B, Ty, ctx).
    """
    function = _DeepOutputRecurrence
    if triton_kernels.usable(X) and m0 is None:  # on a GPU: each element-wise stretch of a step one kernel
        function = DeepOutputKernels
    if attention is None:
        return _apply(function, X, s0, None, None, None, None, None, None, cell.U_zr.weight, cell.U.weight)
    args = (X, s0, h, keys, mask, attention.W_a.weight, attention.v_a.weight, cell.C.weight, cell.U_zr.weight,
            cell.U.weight)
    if m0 is None:
        return _apply(function, *args)
    weights = [w for w in attention.parameters() if w is not attention.W_a.weight and w is not attention.v_a.weight]
    return _apply(function, *args, memory=(attention, m0, *weights))


# ------------------------------------------------------------------------------------------- combined output
class _CombinedOutputRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, s0, h, keys, mask, W_a, v_a, C, U_zr, U, W_u, lp):
        W_a, C, U_zr, U, W_u = (w.to(lp) if w is not None else None for w in (W_a, C, U_zr, U, W_u))
        B, Ty, _ = X.shape
        n = s0.size(1)
        v, masked = v_a.view(-1), ~mask
        S = X.new_empty(B, Ty + 1, n)  # s_0 … s_Ty
        ZR = X.new_empty(B, Ty, 2 * n)  # [z_t; r_t]
        St, RS = (X.new_empty(B, Ty, n) for _ in range(2))
        O = X.new_empty(B, Ty + 1, n)  # o_0 = 0, o_1 … o_Ty
        O[:, 0] = 0
        Actx, A, P = X.new_empty(B, Ty, h.size(2)), X.new_empty(B, Ty, h.size(1)), []
        S[:, 0] = s0
        for t in range(Ty):
            x = addmm(X[:, t], O[:, t], C.t()) if C is not None else X[:, t]  # input feeding: C o_{t−1}
            _gru(x, S[:, t], U_zr, U, ZR[:, t], RS[:, t], St[:, t], S[:, t + 1])
            p, A[:, t], Actx[:, t] = _attend(mm(S[:, t + 1], W_a.t()), keys, v, h, masked)
            P.append(p)
            torch.tanh(mm(torch.cat([Actx[:, t], S[:, t + 1]], dim=1), W_u.t()), out=O[:, t + 1])
        ctx.P = P
        ctx.save_for_backward(S, ZR, St, RS, O, Actx, A, h, W_a, v_a, C, U_zr, U, W_u)
        return O[:, 1:]

    @staticmethod
    def backward(ctx, dO):
        S, ZR, St, RS, O, Actx, A, h, W_a, v_a, C, U_zr, U, W_u = ctx.saved_tensors
        B, Ty, n = dO.shape
        v, lp = v_a.view(-1), U.dtype
        dkeys, dv = torch.zeros_like(ctx.P[0]), torch.zeros_like(v)
        dX, Ga = dO.new_empty(B, Ty, 3 * n), torch.empty_like(Actx)
        DQ, DPRE = dO.new_empty(B, Ty, W_a.size(0)), dO.new_empty(B, Ty, n)
        g_s, g_o = torch.zeros_like(dO[:, 0]), torch.zeros_like(dO[:, 0])  # ∂L/∂s_t, ∂L/∂o_t from step t+1
        for t in reversed(range(Ty)):
            o = O[:, t + 1]
            torch.mul(dO[:, t] + g_o, 1 - o * o, out=DPRE[:, t])  # through o_t = tanh(W_u [a_t; s_t])
            d_as = mm(DPRE[:, t], W_u)
            Ga[:, t], ds = d_as.split([Actx.size(2), n], dim=1)
            DQ[:, t] = _attend_backward(Ga[:, t], ctx.P[t], A[:, t], h, v, dkeys, dv)[0]
            g = addmm_(g_s + ds, DQ[:, t], W_a)
            g_s = _gru_backward(g, S[:, t], ZR[:, t], St[:, t], U_zr, U, dX[:, t])
            if C is not None:
                g_o = mm(dX[:, t], C)
        S_new, S_prev = S[:, 1:].flatten(0, 1), S[:, :-1].flatten(0, 1)
        dW_u = mm(DPRE.flatten(0, 1).t(), torch.cat([Actx, S[:, 1:]], dim=2).flatten(0, 1), lp)
        dW_a = mm(DQ.flatten(0, 1).t(), S_new, lp)
        dU_zr = mm(dX[..., n:].flatten(0, 1).t(), S_prev, lp)
        dU = mm(dX[..., :n].flatten(0, 1).t(), RS.flatten(0, 1), lp)
        dC = mm(dX.flatten(0, 1).t(), O[:, :-1].flatten(0, 1), lp) if C is not None else None
        dh = torch.bmm(A.transpose(1, 2), Ga)
        return dX, g_s, dh, dkeys, None, dW_a, dv.view_as(v_a), dC, dU_zr, dU, dW_u, None


def combined_output_recurrence(X, s0, cell, attention, W_u, h, keys, mask):
    """The combined-output decoder (GRU, additive attention, with or without input feeding) under teacher
    forcing. X (B, Ty, 3n): W E y_{t−1}, s0 (B, n) → o_1 … o_Ty (B, Ty, n)."""
    C = cell.C.weight if cell.C is not None else None
    return _apply(_CombinedOutputRecurrence, X, s0, h, keys, mask, attention.W_a.weight, attention.v_a.weight, C,
                  cell.U_zr.weight, cell.U.weight, W_u.weight)


# ------------------------------------------------------------------------------------------- the encoder
class _EncoderGRU(torch.autograd.Function):
    """nn.GRU's recurrence (gates r, z, n; the reset gate after the recurrent matrix) for D directions at once,
    over rows sorted by length, longest first, so that step t computes only the rows still inside their
    sentence (a prefix of the batch):
        [a_r; a_z; a_n] = x_t (precomputed W_i x + b_i),   g = W_h h + b_h
        r = σ(a_r + g_r),  z = σ(a_z + g_z),  ñ = tanh(a_n + r ∘ g_n),  h' = (1 − z) ∘ ñ + z ∘ h
    Both directions' products are one batched GEMM per step; the backward pass gets dW_h from one GEMM per
    direction over all steps."""

    @staticmethod
    def forward(ctx, XI, W_h, b_h, active, last, lp):
        D, B, Tx, n3 = XI.shape
        n = n3 // 3
        OUT = XI.new_zeros(D, B, Tx, n)  # h_t; zero at padding
        RZ, Nt, Gn = XI.new_empty(D, B, Tx, 2 * n), XI.new_empty(D, B, Tx, n), XI.new_empty(D, B, Tx, n)
        W_h = W_h.to(lp)  # the products' dtype
        W_h_t, b = W_h.transpose(1, 2), b_h.unsqueeze(1)  # (D, n, 3n), (D, 1, 3n)
        for t, rows in enumerate(active):
            h = OUT[:, :rows, t - 1] if t else XI.new_zeros(D, rows, n)  # the active rows were active at t − 1
            g = addmm(b, h, W_h_t)  # (D, rows, 3n)
            a = XI[:, :rows, t]
            rz = torch.sigmoid(a[..., : 2 * n] + g[..., : 2 * n], out=RZ[:, :rows, t])
            Gn[:, :rows, t] = g[..., 2 * n :]
            nt = torch.tanh(torch.addcmul(a[..., 2 * n :], rz[..., :n], g[..., 2 * n :]), out=Nt[:, :rows, t])
            torch.lerp(nt, h, rz[..., n:], out=OUT[:, :rows, t])  # (1 − z) ∘ ñ + z ∘ h
        ctx.active, ctx.last = active, last
        ctx.save_for_backward(OUT, RZ, Nt, Gn, W_h)
        return OUT, OUT[:, torch.arange(B, device=XI.device), last]  # each row's state at its last word

    @staticmethod
    def backward(ctx, dOUT, dH):
        OUT, RZ, Nt, Gn, W_h = ctx.saved_tensors
        D, B, Tx, n = OUT.shape
        dOUT = dOUT.clone()
        dOUT[:, torch.arange(B, device=OUT.device), ctx.last] += dH
        dG = OUT.new_zeros(D, B, Tx, 3 * n)  # ∂L/∂g (zero where a row was not computed)
        DAN = OUT.new_zeros(D, B, Tx, n)  # ∂L/∂a_n
        dh = None  # ∂L/∂h_t from step t + 1, for the rows active there
        for t in reversed(range(len(ctx.active))):
            rows = ctx.active[t]
            gh = dOUT[:, :rows, t].clone()
            if dh is not None:
                gh[:, : dh.size(1)] += dh
            r, z, nt, gn = RZ[:, :rows, t, :n], RZ[:, :rows, t, n:], Nt[:, :rows, t], Gn[:, :rows, t]
            dg = dG[:, :rows, t]
            da_n = torch.ops.aten.tanh_backward(gh * (1 - z), nt)  # through ñ
            DAN[:, :rows, t] = da_n
            torch.mul(da_n * gn, r * (1 - r), out=dg[..., :n])
            h_prev = OUT[:, :rows, t - 1] if t else torch.zeros_like(gh)
            torch.mul(gh * (h_prev - nt), z * (1 - z), out=dg[..., n : 2 * n])
            torch.mul(da_n, r, out=dg[..., 2 * n :])
            dh = addmm(gh * z, dg, W_h)  # ∂L/∂h_{t−1}
        dXI = torch.cat([dG[..., : 2 * n], DAN], dim=3)  # ∂L/∂[a_r; a_z; a_n]
        H_prev = torch.cat([OUT.new_zeros(D, B, 1, n), OUT[:, :, :-1]], dim=2)  # h_{t−1} per position
        dW_h = mm(dG.flatten(1, 2).transpose(1, 2), H_prev.flatten(1, 2), W_h.dtype)  # (D, 3n, n)
        return dXI, dW_h, dG.sum((1, 2)), None, None, None


def encoder_gru(Ex: torch.Tensor, lengths: torch.Tensor | None, w: list[torch.Tensor],
                real_lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The states of a one-layer nn.GRU over Ex (B, Tx, m), from its weights `w` (its `_flat_weights`: w_ih, w_hh,
    b_ih, b_hh per direction): annotations (B, Tx, dirs·n), zero at padding, and each direction's final state
    (B, dirs·n): [→h_Tx; ←h_1]. The backward direction runs over each sentence reversed within its length.

    `lengths` (B,) may stay on the CPU, as a Batch carries them: the steps and the rows active at each are read
    from there, and `real_lengths`, the same lengths on Ex's device, order the rows there. No value goes from the
    GPU to the host, so an update can be captured in a CUDA graph (without `real_lengths`, lengths are copied).
    `lengths` None (`real_lengths` given): every row runs all Tx steps, its states past the sentence's end masked
    out of h; the same results, from kernels set by the batch's shape alone (the training's CUDA graphs)."""
    B, Tx, _ = Ex.shape
    D, n = len(w) // 4, w[1].size(1)
    if lengths is None:
        T, active = Tx, [B] * Tx
    else:
        host = sorted(lengths.tolist())  # ascending; free for a CPU tensor
        T = host[-1]  # the longest sentence
        active = [B - bisect.bisect_right(host, t) for t in range(T)]  # rows inside their sentence at step t
        real_lengths = lengths.to(Ex.device) if real_lengths is None else real_lengths
    order = torch.argsort(real_lengths, descending=True, stable=True)  # longest first: the active rows, a prefix
    inverse = torch.argsort(order)
    sorted_len = real_lengths[order]
    X = Ex.index_select(0, order)[:, :T]  # (B, T, m)
    pos = torch.arange(T, device=Ex.device).unsqueeze(0)
    real = pos < sorted_len.unsqueeze(1)  # (B, T)
    rev = torch.where(real, sorted_len.unsqueeze(1) - 1 - pos, pos).unsqueeze(2)  # reversal within length
    inputs = [X] if D == 1 else [X, X.gather(1, rev.expand_as(X))]
    XI = torch.stack([torch.addmm(w[4 * d + 2], x.flatten(0, 1), w[4 * d].t()) for d, x in enumerate(inputs)])
    W_h = torch.stack([w[4 * d + 1] for d in range(D)])  # (D, 3n, n)
    b_h = torch.stack([w[4 * d + 3] for d in range(D)])  # (D, 3n)
    function = _EncoderGRU
    if triton_kernels.usable(Ex):  # on a GPU: each step's element-wise work one kernel each way (fused_gpu.py)
        function = EncoderKernels
    OUT, H = _apply(function, XI.view(D, B, T, 3 * n), W_h, b_h, active, sorted_len - 1)  # (D, B, T, n), (D, B, n)
    outputs = [OUT[0]] if D == 1 else [OUT[0], OUT[1].gather(1, rev.expand(-1, -1, n))]
    h = torch.cat(outputs, dim=2)  # (B, T, dirs·n), rows longest first
    if lengths is None:  # every row ran all Tx steps: zero past each sentence's end
        h = h * real.unsqueeze(2).to(h.dtype)
    h = h.index_select(0, inverse)
    if T < Tx:
        h = torch.cat([h, h.new_zeros(B, Tx - T, h.size(2))], dim=1)
    return h, torch.cat(H.unbind(0), dim=1).index_select(0, inverse)
