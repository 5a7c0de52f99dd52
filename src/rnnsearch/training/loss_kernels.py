"""The training loss, Σ −log p(y_i | y_<i, x) over the batch's target words, as two Triton kernels on a GPU.

torch's cross-entropy under bf16 autocast first copies the logits (B·Ty × K, K = 30,003 at the paper's size) to
float32, then runs log-softmax and the NLL over the copy, and its backward pass writes a float32 gradient that is
cast back to bf16: about 1.1 ms of a 20 ms update on an H100 (docs/benchmarks.md). Here the forward kernel reads
each row of logits once, in their own dtype, for its log-sum-exp (in float32, a running maximum), and the
backward kernel writes ∂L/∂logits = g (softmax − one-hot) in the logits' dtype in one pass:
    loss_r = logsumexp_k x_rk − x_r,y_r        (0 where y_r is PAD)
"""

from __future__ import annotations

import torch

from rnnsearch.model import triton_kernels

triton = triton_kernels.triton
BLOCK = 4096  # logits per program: a row of 30,003 in 8 chunks
if triton is not None:
    import triton.language as tl

    from rnnsearch.model.triton_kernels import _to

    @triton.jit
    def _nll_forward(L, l_stride, T, LOSS, LSE, ignore, K: tl.constexpr, BLOCK: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)  # r × the row stride passes 2³¹ past 71,000 rows of 30,008
        m = tl.full([BLOCK], float("-inf"), tl.float32)  # per lane: the running maximum and Σ exp(x − m)
        s = tl.zeros([BLOCK], dtype=tl.float32)
        for k0 in range(0, K, BLOCK):
            cols = k0 + tl.arange(0, BLOCK)
            x = tl.load(L + r * l_stride + cols, mask=cols < K, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            seen = m_new > float("-inf")  # a lane past K in every chunk so far stays at 0
            s = tl.where(seen, s * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
            m = m_new
        top = tl.max(m, axis=0)
        lse = top + tl.log(tl.sum(tl.where(m > float("-inf"), s * tl.exp(m - top), 0.0), axis=0))
        y = tl.load(T + r)
        x_y = tl.load(L + r * l_stride + y).to(tl.float32)
        tl.store(LSE + r, lse)
        tl.store(LOSS + r, tl.where(y != ignore, lse - x_y, 0.0))

    @triton.jit
    def _nll_backward(L, l_stride, T, LSE, G, D, d_stride, ignore, K: tl.constexpr, BLOCK: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)  # r × the row stride passes 2³¹ past 71,000 rows of 30,008
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < K
        y = tl.load(T + r)
        x = tl.load(L + r * l_stride + cols, mask=ok, other=0).to(tl.float32)
        d = tl.exp(x - tl.load(LSE + r)) - tl.where(cols == y, 1.0, 0.0)  # softmax − one-hot
        d = tl.where(y != ignore, d * tl.load(G), 0.0)
        tl.store(D + r * d_stride + cols, _to(d, D), mask=ok)


class _SummedNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore):
        N, K = logits.shape
        loss, lse = logits.new_empty(N, dtype=torch.float32), logits.new_empty(N, dtype=torch.float32)
        _nll_forward[(N,)](logits, logits.stride(0), target, loss, lse, ignore, K, BLOCK=BLOCK, num_warps=8)
        ctx.ignore = ignore
        ctx.save_for_backward(logits, target, lse)
        return loss.sum()

    @staticmethod
    def backward(ctx, grad):
        logits, target, lse = ctx.saved_tensors
        N, K = logits.shape
        d = torch.empty_like(logits, memory_format=torch.contiguous_format)
        grad = grad.float().reshape(1).contiguous()
        _nll_backward[(N, triton.cdiv(K, BLOCK))](logits, logits.stride(0), target, lse, grad, d, d.stride(0),
                                                  ctx.ignore, K, BLOCK=BLOCK, num_warps=8)
        return d, None, None


def summed_nll(logits: torch.Tensor, target: torch.Tensor, ignore: int) -> torch.Tensor:
    """F.cross_entropy(logits, target, ignore_index=ignore, reduction="sum") for logits (N, K) whose rows may be
    strided (the output layer's padded rows), target (N,); float32 whatever the logits' dtype."""
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    return _SummedNLL.apply(logits, target.contiguous(), ignore)
