"""The decoder of App. A.2.2: a GRU conditioned on a context vector, and the deep maxout output.

Decoder state (App. A.2.2, bias terms omitted as in the paper):
    z_i = σ(W_z E y_{i−1} + U_z s_{i−1} + C_z c_i)
    r_i = σ(W_r E y_{i−1} + U_r s_{i−1} + C_r c_i)
    s̃_i = tanh(W E y_{i−1} + U [r_i ∘ s_{i−1}] + C c_i)
    s_i = (1 − z_i) ∘ s_{i−1} + z_i ∘ s̃_i
Output:
    t̃_i = U_o s_{i−1} + V_o E y_{i−1} + C_o c_i        (2l units)
    t_i = [max(t̃_{i,2j−1}, t̃_{i,2j})]_{j=1..l}          (maxout over pairs)
    p(y_i | y_{<i}, x) ∝ exp(y_iᵀ W_o t_i)

c_i comes from the alignment model (RNNsearch) or is the same fixed c at every step (RNNencdec).
The input projections W E y, W_z E y, W_r E y and V_o E y do not depend on the previous step, so under
teacher forcing they are computed for the whole target sequence at once (`project_inputs`).
"""

from __future__ import annotations

import torch
from torch import nn


class ConditionalGRU(nn.Module):
    """The paper's GRU with context terms; the reset gate multiplies s_{i−1} before U (not after)."""

    def __init__(self, m: int, n: int, ctx_dim: int):
        super().__init__()
        self.W = nn.Linear(m, 3 * n)  # [W; W_z; W_r] stacked, with the biases
        self.U_zr = nn.Linear(n, 2 * n, bias=False)  # [U_z; U_r]
        self.U = nn.Linear(n, n, bias=False)
        self.C = nn.Linear(ctx_dim, 3 * n, bias=False)  # [C; C_z; C_r]
        self.n = n

    def forward(self, W_Ey: torch.Tensor, s_prev: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """W_Ey (B, 3n) = self.W(E y_{i−1}) precomputed, s_prev (B, n), c (B, ctx) → s_i (B, n)."""
        # split/chunk rather than slicing: their backward concatenates instead of filling zeros per slice
        x_h, x_zr = (W_Ey + self.C(c)).split([self.n, 2 * self.n], dim=1)  # (B, n), (B, 2n) from y and c
        z, r = torch.sigmoid(x_zr + self.U_zr(s_prev)).chunk(2, dim=1)  # (B, n) each
        s_tilde = torch.tanh(x_h + self.U(r * s_prev))
        return (1 - z) * s_prev + z * s_tilde


class DeepOutput(nn.Module):
    """t̃ = U_o s_{i−1} + V_o E y_{i−1} + C_o c_i, maxout over pairs, then W_o (logits over the shortlist)."""

    def __init__(self, vocab_size: int, m: int, n: int, ctx_dim: int, l: int):
        super().__init__()
        self.U_o = nn.Linear(n, 2 * l)  # carries the bias of t̃
        self.V_o = nn.Linear(m, 2 * l, bias=False)
        self.C_o = nn.Linear(ctx_dim, 2 * l, bias=False)
        self.W_o = nn.Linear(l, vocab_size)
        self.l = l

    def forward(self, s_prev: torch.Tensor, V_o_Ey: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Any leading shape (…): s_prev (…, n), V_o_Ey (…, 2l) precomputed, c (…, ctx) → logits (…, K)."""
        t_tilde = self.U_o(s_prev) + V_o_Ey + self.C_o(c)  # (…, 2l)
        t = t_tilde.unflatten(-1, (self.l, 2)).amax(-1)  # (…, l)
        return self.W_o(t)
