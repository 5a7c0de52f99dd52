"""Matrix products with their operands in a chosen dtype, the rest of the computation in another: the fused
recurrences' bf16 products (model/fused.py, model/fused_gpu.py) without autocast."""

from __future__ import annotations

import torch


def mm(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """a @ b (2-D or batched) with both operands in `dtype` (default: b's), the result in a's dtype."""
    dtype = dtype or b.dtype
    if a.dtype == b.dtype == dtype:
        return a @ b
    return (a.to(dtype) @ b.to(dtype)).to(a.dtype)


def addmm(x: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x + a @ w (2-D or batched), the product in w's dtype, the sum in x's."""
    if a.dtype == w.dtype == x.dtype:
        return torch.addmm(x, a, w) if a.dim() == 2 else torch.baddbmm(x, a, w)
    return torch.add(x, a.to(w.dtype) @ w)


def addmm_(x: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x += a @ w in place, the product in w's dtype."""
    return x.addmm_(a, w) if a.dtype == w.dtype == x.dtype else x.add_(a.to(w.dtype) @ w)
