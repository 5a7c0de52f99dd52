"""The equations of App. A that two code paths compute: each decoder step of a module (decoding, and training
of the ablations) and the recurrences of `model/fused.py` (training with hand-written backward passes). Each
equation is written once, here; the matrix products are passed in, so that each path keeps its own kernels
(nn.Linear, which decoding may pack; addmm in place over all steps in the fused path).
"""

from __future__ import annotations

from typing import Callable

import torch

Product = Callable[[torch.Tensor], torch.Tensor]


def additive_energies(W_a_q: torch.Tensor, U_a_h: torch.Tensor, v_a: Product) -> tuple[torch.Tensor, torch.Tensor]:
    """e_ij = v_aᵀ tanh(W_a q + U_a h_j) (§3.1, App. A.1.2).

    W_a_q (B, n'), U_a_h (B, Tx, n'), `v_a` maps p (B, Tx, n') to v_aᵀ p (B, Tx).
    Returns p = tanh(W_a q + U_a h_j) (B, Tx, n'), which the backward pass needs, and e (B, Tx).
    """
    p = torch.add(U_a_h, W_a_q.unsqueeze(1)).tanh_()  # (B, Tx, n')
    return p, v_a(p)


def align(e: torch.Tensor, h: torch.Tensor, pad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """α_ij = exp(e_ij) / Σ_k exp(e_ik) over the real source words (`pad` (B, Tx) True on padding, where α is
    exactly 0), and c_i = Σ_j α_ij h_j (App. A.1.2). e (B, Tx), h (B, Tx, ctx) → c (B, ctx), α (B, Tx)."""
    alpha = torch.softmax(e.masked_fill(pad, float("-inf")), dim=1)  # (B, Tx)
    c = torch.bmm(alpha.unsqueeze(1), h).squeeze(1)  # (B, ctx)
    return c, alpha


def gru_step(s_prev: torch.Tensor, a_zr: Product, a_h: Product):
    """The paper's GRU (App. A.2.2), from its pre-activations:
        [z_i; r_i] = σ(a_zr(s_{i−1})),   a_zr(s) = [W_z; W_r] E y_{i−1} + [C_z; C_r] c_i + [U_z; U_r] s
        s̃_i = tanh(a_h(r_i ∘ s_{i−1})),  a_h(rs) = W E y_{i−1} + C c_i + U rs
        s_i = (1 − z_i) ∘ s_{i−1} + z_i ∘ s̃_i
    s_prev (B, n) → s_i, z_i, r_i, s̃_i (B, n) each (the gates for the backward pass)."""
    z, r = torch.sigmoid(a_zr(s_prev)).chunk(2, dim=1)  # (B, n) each
    s_tilde = torch.tanh(a_h(r * s_prev))
    return (1 - z) * s_prev + z * s_tilde, z, r, s_tilde
