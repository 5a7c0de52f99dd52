"""The alignment model of §3.1 and App. A.1.2 (additive attention).

    e_ij = v_aᵀ tanh(W_a s_{i−1} + U_a h_j)          (alignment energies)
    α_ij = exp(e_ij) / Σ_k exp(e_ik)                  (softmax over the real source words only)
    c_i  = Σ_j α_ij h_j                               (expected annotation, the context vector)

U_a h_j does not depend on i, so it is computed once per batch (`precompute`) and reused at every step.
"""

from __future__ import annotations

import torch
from torch import nn


class AdditiveAttention(nn.Module):
    def __init__(self, n: int, ctx_dim: int, n_align: int):
        super().__init__()
        self.W_a = nn.Linear(n, n_align, bias=False)
        self.U_a = nn.Linear(ctx_dim, n_align, bias=False)
        self.v_a = nn.Linear(n_align, 1, bias=False)

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return self.U_a(h)  # (B, Tx, n')

    def forward(self, s_prev: torch.Tensor, h: torch.Tensor, U_a_h: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """s_prev (B, n), h (B, Tx, 2n), U_a_h (B, Tx, n'), mask (B, Tx) True on real words.

        Returns c (B, 2n) and alpha (B, Tx); alpha is exactly 0 on padding and sums to 1 over real words.
        """
        e = self.v_a(torch.tanh(self.W_a(s_prev).unsqueeze(1) + U_a_h)).squeeze(2)  # (B, Tx)
        e = e.masked_fill(~mask, float("-inf"))
        alpha = torch.softmax(e, dim=1)  # (B, Tx)
        c = torch.bmm(alpha.unsqueeze(1), h).squeeze(1)  # (B, 2n)
        return c, alpha
