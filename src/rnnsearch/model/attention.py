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

A variant is a subclass of `Attention` in `VARIANTS` (and its name in rnnsearch.model.presets.ATTENTIONS, which
the configuration is checked against without importing torch): its scores, the initialisation of its weights
(App. B.1) and its FLOPs. The fused recurrences (model/fused.py) serve only the additive score (`fused = True`);
a model with another variant trains through plain autograd.
"""

from __future__ import annotations

import torch
from torch import nn

from rnnsearch.model.equations import additive_energies, align
from rnnsearch.model.presets import ATTENTIONS


class Attention(nn.Module):
    """An alignment model: `precompute(h)` (the part of e_ij that depends on h_j only, once per batch) and
    `energies(q, keys)` → e (B, Tx); `forward` turns them into c_i and α_i. `init_weight` starts its weights
    (App. B.1), `flops` counts its matrix products (rnnsearch.bench.flops)."""

    fused = False  # model/fused.py's hand-written recurrences serve this variant

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def energies(self, q: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, q: torch.Tensor, h: torch.Tensor, keys: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, n), h (B, Tx, ctx), keys (B, Tx, ·), mask (B, Tx) True on real words → c (B, ctx), α (B, Tx)."""
        return align(self.energies(q, keys), h, ~mask)

    def init_weight(self, name: str, weight: torch.Tensor) -> None:
        """App. B.1: the alignment model's matrices ~ N(0, 0.001²)."""
        nn.init.normal_(weight, 0.0, 0.001)

    @staticmethod
    def flops(ctx: int, n: int, n_align: int, S: int) -> tuple[int, int]:
        """Matrix-product FLOPs (2 per multiply-add) for S source positions of annotations of size ctx: those of
        `precompute`, and those of one decoder step."""
        raise NotImplementedError


class AdditiveAttention(Attention):
    """e_ij = v_aᵀ tanh(W_a s_{i−1} + U_a h_j), App. A.1.2 (n' = n_align hidden units)."""

    fused = True

    def __init__(self, n: int, ctx_dim: int, n_align: int):
        super().__init__()
        self.W_a = nn.Linear(n, n_align, bias=False)
        self.U_a = nn.Linear(ctx_dim, n_align, bias=False)
        self.v_a = nn.Linear(n_align, 1, bias=False)

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return self.U_a(h)  # (B, Tx, n')

    def energies(self, s_prev: torch.Tensor, U_a_h: torch.Tensor) -> torch.Tensor:
        """s_prev (B, n), U_a_h (B, Tx, n') → e (B, Tx)."""
        return additive_energies(self.W_a(s_prev), U_a_h, lambda p: self.v_a(p).squeeze(2))[1]

    def init_weight(self, name: str, weight: torch.Tensor) -> None:
        """App. B.1: W_a and U_a ~ N(0, 0.001²), v_a = 0."""
        nn.init.zeros_(weight) if name == "v_a.weight" else nn.init.normal_(weight, 0.0, 0.001)

    @staticmethod
    def flops(ctx: int, n: int, n_align: int, S: int) -> tuple[int, int]:
        return S * 2 * ctx * n_align, 2 * n * n_align + 2 * S * n_align + 2 * S * ctx  # W_a s, v_a, c = Σ α h


class MultiplicativeAttention(Attention):
    """e_ij = qᵀ W_a h_j (bilinear); W_a h_j is precomputed, so a step costs one batched matrix-vector product."""

    def __init__(self, n: int, ctx_dim: int, n_align: int = 0):
        super().__init__()
        self.W_a = nn.Linear(ctx_dim, n, bias=False)

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return self.W_a(h)  # (B, Tx, n)

    def energies(self, q, W_a_h):
        return torch.bmm(W_a_h, q.unsqueeze(2)).squeeze(2)  # (B, Tx)

    @staticmethod
    def flops(ctx: int, n: int, n_align: int, S: int) -> tuple[int, int]:
        return S * 2 * ctx * n, 2 * S * n + 2 * S * ctx


class DotAttention(Attention):
    """e_ij = qᵀ h_j, no parameters (q and h_j of the same size: rnnsearch.model.presets.check)."""

    def __init__(self, n: int = 0, ctx_dim: int = 0, n_align: int = 0):
        super().__init__()

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def energies(self, q, keys):
        return torch.bmm(keys, q.unsqueeze(2)).squeeze(2)

    @staticmethod
    def flops(ctx: int, n: int, n_align: int, S: int) -> tuple[int, int]:
        return 0, 4 * S * ctx


VARIANTS: dict[str, type[Attention]] = {"additive": AdditiveAttention, "multiplicative": MultiplicativeAttention,
                                        "dot": DotAttention}


def make_attention(kind: str, n: int, ctx_dim: int, n_align: int) -> Attention | None:
    """The alignment model named by `kind` (None for "none": a fixed context, as in RNNencdec)."""
    if kind == "none":
        return None
    if kind not in VARIANTS:
        raise ValueError(f"unknown attention {kind!r}: expected one of {', '.join(ATTENTIONS)}")
    if kind == "dot" and n != ctx_dim:
        raise ValueError(f"dot attention needs the query size ({n}) to equal the annotation size ({ctx_dim})")
    return VARIANTS[kind](n, ctx_dim, n_align)
