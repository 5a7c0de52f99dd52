"""Alignment models: the paper's additive one (§3.1, App. A.1.2) and the two scores of its ablations.

Every alignment model scores each source annotation h_j against a query q (the paper: q = s_{i−1}), then
    α_ij = exp(e_ij) / Σ_k exp(e_ik)                  (softmax over the real source words only)
    c_i  = Σ_j α_ij h_j                               (expected annotation, the context vector)
The scores:
    additive (the paper)    e_ij = v_aᵀ tanh(W_a q + U_a h_j)
    multiplicative          e_ij = qᵀ W_a h_j          (Luong et al. 2015 "general"; Luong et al.'s W_attProj)
    dot                     e_ij = qᵀ h_j              (needs q and h_j of the same size)
The part that depends on h_j only (U_a h_j, W_a h_j, h_j) is computed once per batch (`precompute`) and
reused at every decoder step.
"""

from __future__ import annotations

import torch
from torch import nn

from rnnsearch.model.equations import additive_energies, align
from rnnsearch.model.presets import ATTENTIONS


class AdditiveAttention(nn.Module):
    """e_ij = v_aᵀ tanh(W_a s_{i−1} + U_a h_j), App. A.1.2 (n' = n_align hidden units)."""

    def __init__(self, n: int, ctx_dim: int, n_align: int):
        super().__init__()
        self.W_a = nn.Linear(n, n_align, bias=False)
        self.U_a = nn.Linear(ctx_dim, n_align, bias=False)
        self.v_a = nn.Linear(n_align, 1, bias=False)

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return self.U_a(h)  # (B, Tx, n')

    def forward(self, s_prev: torch.Tensor, h: torch.Tensor, U_a_h: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """s_prev (B, n), h (B, Tx, ctx), U_a_h (B, Tx, n'), mask (B, Tx) True on real words → c (B, ctx), α (B, Tx)."""
        _, e = additive_energies(self.W_a(s_prev), U_a_h, lambda p: self.v_a(p).squeeze(2))  # (B, Tx)
        return align(e, h, ~mask)


class MultiplicativeAttention(nn.Module):
    """e_ij = qᵀ W_a h_j (bilinear); W_a h_j is precomputed, so a step costs one batched matrix-vector product."""

    def __init__(self, n: int, ctx_dim: int):
        super().__init__()
        self.W_a = nn.Linear(ctx_dim, n, bias=False)

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return self.W_a(h)  # (B, Tx, n)

    def forward(self, q, h, W_a_h, mask):
        e = torch.bmm(W_a_h, q.unsqueeze(2)).squeeze(2)  # (B, Tx)
        return align(e, h, ~mask)


class DotAttention(nn.Module):
    """e_ij = qᵀ h_j, no parameters."""

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def forward(self, q, h, keys, mask):
        return align(torch.bmm(keys, q.unsqueeze(2)).squeeze(2), h, ~mask)


def make_attention(kind: str, n: int, ctx_dim: int, n_align: int) -> nn.Module | None:
    """The alignment model named by `kind` (None for "none": a fixed context, as in RNNencdec)."""
    if kind == "additive":
        return AdditiveAttention(n, ctx_dim, n_align)
    if kind == "multiplicative":
        return MultiplicativeAttention(n, ctx_dim)
    if kind == "dot":
        if n != ctx_dim:
            raise ValueError(f"dot attention needs the query size ({n}) to equal the annotation size ({ctx_dim})")
        return DotAttention()
    if kind == "none":
        return None
    raise ValueError(f"unknown attention {kind!r}: expected one of {', '.join(ATTENTIONS)}")
