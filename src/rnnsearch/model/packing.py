"""Weights packed once for the many same-sized products of decoding (CPU with MKL).

A GEMM first copies its weight operand into the kernel's blocked layout, on every call. A decoder step
multiplies a few dozen rows (the batch, or batch × beam) by each of its weights, so that copy costs a good
part of the product. `prepacked` packs each 2-D-input linear layer's weight once (MKL's cblas_sgemm_pack,
through PyTorch's private `mkl::_mkl_linear`, the operator its compiler uses for frozen weights) and runs only
the compute at every step. The results are bit-identical to nn.Linear's; greedy decoding at the benchmark
sizes ran 8 % faster with every decoder layer packed (tests/test_search.py checks the outputs are the same).

Packed weights are a copy: the context restores the plain layers on exit, and it packs nothing while autograd
is recording, on another device or dtype, or in a PyTorch build without MKL.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn


def _available() -> bool:
    try:
        W = torch.ones(2, 2)
        packed = torch.ops.mkl._mkl_reorder_linear_weight(W, 1)
        return torch.backends.mkl.is_available() and bool(
            torch.ops.mkl._mkl_linear(torch.ones(1, 2), packed, W, None, 1).eq(2).all())
    except (AttributeError, RuntimeError):  # no MKL, or the private operators moved
        return False


MKL_PACKING = _available()


def _packed_forward(layer: nn.Linear, rows: int):
    W = layer.weight.detach()
    b = layer.bias.detach() if layer.bias is not None else None
    packed = torch.ops.mkl._mkl_reorder_linear_weight(W, rows)
    plain = layer.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2 and not torch.is_grad_enabled():
            return torch.ops.mkl._mkl_linear(x, packed, W, b, rows)
        return plain(x)

    return forward


@contextmanager
def prepacked(module: nn.Module, rows: int):
    """Within the block, every nn.Linear of `module` (CPU, float32) multiplies 2-D inputs, under no_grad, with
    its weight packed for about `rows` rows (a hint: any row count gives the right result)."""
    layers = [m for m in module.modules() if isinstance(m, nn.Linear) and m.weight.device.type == "cpu"
              and m.weight.dtype == torch.float32] if MKL_PACKING and not torch.is_grad_enabled() else []
    try:
        for layer in layers:
            layer.forward = _packed_forward(layer, rows)
        yield
    finally:
        for layer in layers:
            layer.__dict__.pop("forward", None)
