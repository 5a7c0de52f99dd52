"""The optimizers: `make_optimizer` (the paper's Adadelta or Adam). Adadelta (App. B.2: ρ = 0.95, ε = 10⁻⁶) as
torch.optim.Adadelta, with its step on a GPU one Triton kernel per parameter (`adadelta_step`).

torch's Adadelta runs each of its eight element-wise operations over all parameters in turn (foreach kernels):
at the paper's size (80 million parameters) about 3 ms of an update of 20 on an H100, reading and writing the
parameters' four float32 tensors several times. One kernel reads each once and writes three. The state (step,
square_avg, acc_delta), its initialisation and the state_dict are torch's own; the CPU, and any setting the kernel
does not cover (weight decay, maximize, differentiable, complex or non-contiguous tensors), run torch's step.
"""

from __future__ import annotations

import torch

from rnnsearch.model import triton_kernels

triton = triton_kernels.triton
if triton is not None:
    import triton.language as tl

    @triton.jit
    def _adadelta(P, G, SA, AD, LR, numel, rho, eps, LR_TENSOR: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = i < numel
        g = tl.load(G + i, mask=ok, other=0).to(tl.float32)
        square_avg = tl.load(SA + i, mask=ok, other=0) * rho + (1 - rho) * g * g
        delta = tl.sqrt(tl.load(AD + i, mask=ok, other=0) + eps) / tl.sqrt(square_avg + eps) * g
        acc_delta = tl.load(AD + i, mask=ok, other=0) * rho + (1 - rho) * delta * delta
        lr = tl.load(LR) if LR_TENSOR else LR
        tl.store(SA + i, square_avg, mask=ok)
        tl.store(AD + i, acc_delta, mask=ok)
        tl.store(P + i, tl.load(P + i, mask=ok, other=0) - lr * delta, mask=ok)


def adadelta_step(param, grad, square_avg, acc_delta, lr, rho: float, eps: float):
    """Adadelta's update of one contiguous float32 parameter in one kernel (torch.optim.Adadelta's equations):
        E[g²] ← ρ E[g²] + (1 − ρ) g²,  Δ = √(E[Δ²] + ε) / √(E[g²] + ε) · g,  E[Δ²] ← ρ E[Δ²] + (1 − ρ) Δ²,  θ ← θ − lr Δ
    `lr` a float or a one-element tensor on the parameter's device (a CUDA graph's)."""
    numel, block = param.numel(), 1024
    lr_tensor = isinstance(lr, torch.Tensor)
    _adadelta[(triton.cdiv(numel, block),)](param, grad, square_avg, acc_delta, lr, numel, rho, eps, lr_tensor,
                                            BLOCK=block)


class Adadelta(torch.optim.Adadelta):
    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None or not all(self._covered(group) for group in self.param_groups):
            return super().step(closure)
        for group in self.param_groups:
            params, grads, square_avgs, acc_deltas, steps = [], [], [], [], []
            self._init_group(group, params, grads, square_avgs, acc_deltas, steps)
            for p, g, square_avg, acc_delta, step in zip(params, grads, square_avgs, acc_deltas, steps):
                step += 1
                adadelta_step(p, g, square_avg, acc_delta, group["lr"], group["rho"], group["eps"])
        return None

    @staticmethod
    def _covered(group: dict) -> bool:
        """Whether the kernel computes this group's update as torch's step would."""
        if group["weight_decay"] or group["maximize"] or group["differentiable"]:
            return False
        lr = group["lr"]
        for p in group["params"]:
            if p.grad is None:
                continue
            if not triton_kernels.usable(p) or p.dtype != torch.float32 or not p.is_contiguous():
                return False
            if p.grad.dtype != torch.float32 or not p.grad.is_contiguous() or p.grad.is_sparse:
                return False
            if isinstance(lr, torch.Tensor) and lr.device != p.device:
                return False
        return True


def make_optimizer(params, optimizer: str, lr: float, rho: float = 0.95, eps: float = 1e-6,
                   capturable: bool = False) -> torch.optim.Optimizer:
    """Adadelta (the paper's, ρ, ε) or Adam (fused: a kernel per tensor); `capturable`: for a CUDA graph's replay."""
    if optimizer == "adadelta":
        return Adadelta(params, lr=lr, rho=rho, eps=eps, capturable=capturable)  # torch's; on a GPU one kernel
    return torch.optim.Adam(params, lr=lr, fused=True, capturable=capturable)
