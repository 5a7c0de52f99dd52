"""The paper's GRU step (App. A.2.2, `equations.gru_step`'s equations) written into the buffers a backward pass
reads, and that backward pass: the hand-written recurrences' (model/fused.py) and neural coverage's, whose GRU
runs over the B·Tx source words (model/fused_memory.py)."""

from __future__ import annotations

import torch

from rnnsearch.model.products import addmm, addmm_, mm


def gru(x: torch.Tensor, s: torch.Tensor, U_zr: torch.Tensor, U: torch.Tensor, ZR: torch.Tensor, RS: torch.Tensor,
         St: torch.Tensor, s_next: torch.Tensor) -> torch.Tensor:
    """The paper's GRU (`equations.gru_step`'s equations) from its input-side sum x = [x_h | x_zr] (B, 3n), each
    result written where the backward pass reads it: [z; r] into ZR (B, 2n), r ∘ s into RS, s̃ into St, and s_i
    into s_next, which is returned; s_i = (1 − z) ∘ s + z ∘ s̃ as one lerp (on a GPU each operation is a kernel
    launch: no copies after, one operation where gru_step has four)."""
    n = s.size(1)
    x_h, x_zr = x.split([n, 2 * n], dim=1)
    zr = torch.sigmoid(addmm(x_zr, s, U_zr.t()), out=ZR)
    rs = torch.mul(zr[:, n:], s, out=RS)
    s_tilde = torch.tanh(addmm(x_h, rs, U.t()), out=St)
    return torch.lerp(s, s_tilde, zr[:, :n], out=s_next)  # (1 − z) ∘ s + z ∘ s̃


def gru_backward(g: torch.Tensor, s: torch.Tensor, zr, s_tilde, U_zr, U, dx: torch.Tensor) -> torch.Tensor:
    """Given ∂L/∂s_i and the gates [z; r] (B, 2n): writes ∂L/∂x into dx (B, 3n) and returns ∂L/∂s_{i−1}."""
    n = s.size(1)
    z, r = zr[:, :n], zr[:, n:]
    da_h = torch.ops.aten.tanh_backward.grad_input(g * z, s_tilde, grad_input=dx[:, :n])  # through s̃ = tanh(a_h)
    drs = mm(da_h, U)  # ∂L/∂(r ∘ s)
    torch.ops.aten.sigmoid_backward.grad_input(g * (s_tilde - s), z, grad_input=dx[:, n : 2 * n])  # through z
    torch.ops.aten.sigmoid_backward.grad_input(drs * s, r, grad_input=dx[:, 2 * n :])  # through r
    ds = torch.addcmul(g, g, z, value=-1).addcmul_(drs, r)  # g ∘ (1 − z) + ∂L/∂(r ∘ s) ∘ r
    return addmm_(ds, dx[:, n:], U_zr)
