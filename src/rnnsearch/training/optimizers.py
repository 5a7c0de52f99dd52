"""The optimizers: `make_optimizer` (the paper's Adadelta or Adam). Adadelta (App. B.2: ρ = 0.95, ε = 10⁻⁶) as
torch.optim.Adadelta, with its step on a GPU one Triton kernel per
parameter (`triton_kernels.adadelta_step`).

torch's Adadelta runs each of its eight element-wise operations over all parameters in turn (foreach kernels):
at the paper's size (80 million parameters) about 3 ms of an update of 20 on an H100, reading and writing the
parameters' four float32 tensors several times. One kernel reads each once and writes three. The state (step,
square_avg, acc_delta), its initialisation and the state_dict are torch's own; the CPU, and any setting the kernel
does not cover (weight decay, maximize, differentiable, complex or non-contiguous tensors), run torch's step.
"""

from __future__ import annotations

import torch

from rnnsearch.model import triton_kernels


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
                triton_kernels.adadelta_step(p, g, square_avg, acc_delta, group["lr"], group["rho"], group["eps"])
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
