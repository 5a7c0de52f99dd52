"""The optimizers: `make_optimizer` (the paper's Adadelta or Adam). Adadelta (App. B.2: ρ = 0.95, ε = 10⁻⁶) as
torch.optim.Adadelta, with its step on a GPU one Triton kernel per parameter (`adadelta_step`).

torch's Adadelta runs each of its eight element-wise operations over all parameters in turn (foreach kernels):
at the paper's size (80 million parameters) about 3 ms of an update of 20 on an H100, reading and writing the
parameters' four float32 tensors several times. One kernel reads each once and writes three. The state (step,
square_avg, acc_delta), its initialisation and the state_dict are torch's own; the CPU, and any setting the kernel
does not cover (weight decay, maximize, differentiable, complex or non-contiguous tensors), run torch's step.
Both optimizers step, and start, without importing torch._dynamo (`_plain_optimizer_methods`).
"""

from __future__ import annotations

import inspect

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
        acc_delta = tl.load(AD + i, mask=ok, other=0)  # read once
        delta = tl.sqrt(acc_delta + eps) / tl.sqrt(square_avg + eps) * g
        acc_delta = acc_delta * rho + (1 - rho) * delta * delta
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


def _plain_optimizer_methods() -> None:
    """Every torch.optim step runs in a wrapper that imports torch._dynamo to mark graph breaks for torch.compile, and
    Optimizer's add_param_group (from __init__), zero_grad, state_dict and load_state_dict in torch._disable_dynamo,
    which imports it at their first call: 1.5 s of CPU in every process that trains (as long as importing torch),
    for a compiler rnnsearch never runs. Outside torch.compile both wrappers only call the function (the step with
    gradients off, as `_step` does). The second first looks for its function's cached disabled form
    (`__dynamo_disable`): the function itself here. A torch whose wrappers differ leaves the attribute unread and
    imports torch._dynamo as before."""
    wrapper = torch._disable_dynamo(lambda: None).__code__
    for method in vars(torch.optim.Optimizer).values():
        function = getattr(method, "__wrapped__", None)
        if function is not None and getattr(method, "__code__", None) is wrapper:
            setattr(function, "__dynamo_disable", function)


_plain_optimizer_methods()


def _step(optimizer_class):
    """`optimizer_class.step` as it runs outside torch.compile (see `_plain_optimizer_methods`): gradients off."""
    return torch.no_grad()(inspect.unwrap(optimizer_class.step))


class Adadelta(torch.optim.Adadelta):
    _torch_step = _step(torch.optim.Adadelta)

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None or not all(self._covered(group) for group in self.param_groups):
            return self._torch_step(closure)
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


class Adam(torch.optim.Adam):
    """torch's Adam; its step without the wrapper that imports torch._dynamo (`_plain_optimizer_methods`)."""

    step = _step(torch.optim.Adam)


def make_optimizer(params, optimizer: str, lr: float, rho: float = 0.95, eps: float = 1e-6,
                   capturable: bool = False) -> torch.optim.Optimizer:
    """Adadelta (the paper's, ρ, ε) or Adam (fused: a kernel per tensor); `capturable`: for a CUDA graph's replay."""
    if optimizer == "adadelta":
        return Adadelta(params, lr=lr, rho=rho, eps=eps, capturable=capturable)  # torch's; on a GPU one kernel
    return Adam(params, lr=lr, fused=True, capturable=capturable)
