"""Data-parallel training on CUDA graphs (`train.cuda_graphs: true` with `train.processes` > 1).

DistributedDataParallel all-reduces gradient buckets from hooks inside the backward pass: a collective between
processes, which one process's CUDA graph cannot hold. So each process's update (App. B.2) is cut in three phases:

1. **backward**: the forward pass of this process's share of the minibatch and the backward pass of its summed NLL
   scaled by w / B (w: the share's weight, 1 or 0; B: the global minibatch's rows), into one flat gradient buffer
   of which every parameter's `.grad` is a view. One CUDA graph per padded share shape (B', Tx, Ty), as
   `UpdateGraphs` keeps them;
2. **all-reduce**: the flat buffer summed across the processes, one collective per update, between the replays:
   every process then holds the gradient of the whole minibatch's mean loss, as DDP gives it;
3. **step**: the gradient's L2 norm rescaled to at most `clip_norm`, one optimizer step. Its shapes never change:
   one CUDA graph for the whole training.

The first share of a new shape runs phase 1 eagerly (on a side stream, a capture's warm-up), the second records it
and replays; phase 3 runs eagerly once (the optimizer's state is made there) and is recorded at the second update.
With `graphs=False` the same three phases run eagerly: the CPU's reference (tests check it against DDP in
float64), and the graphs' twin on a GPU. Two processes on one GPU (a test, a benchmark) need the gloo backend
(`RNNSEARCH_DIST_BACKEND=gloo`): NCCL refuses two ranks on one device.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from rnnsearch.data.batching import Batch
from rnnsearch.training.graphs import capturable_lr, padded, side_stream, static_encoder
from rnnsearch.training.scoring import training_loss


class FlatGradients:
    """One flat buffer holding every parameter's gradient: `p.grad` is a view of it, so the backward pass adds into
    it in place and one collective reduces all of them. Nothing may set a gradient to None while it is in use."""

    def __init__(self, params: list[torch.Tensor]):
        self.params = params
        first = params[0]
        self.buffer = torch.zeros(sum(p.numel() for p in params), device=first.device, dtype=first.dtype)
        offset = 0
        for p in params:
            p.grad = self.buffer[offset : offset + p.numel()].view_as(p)
            offset += p.numel()

    def attached(self) -> bool:
        """Whether every parameter's gradient is still a view of the buffer."""
        start = self.buffer.data_ptr()
        return all(p.grad is not None and start <= p.grad.data_ptr() < start + self.buffer.nbytes
                   for p in self.params)


class DataParallelGraphs:
    """A data-parallel training's updates in three phases (see the module's docstring), from CUDA graphs when
    `graphs` (a capturable optimizer, its learning rate a GPU tensor set by each call) or eagerly."""

    def __init__(self, model, optimizer, bf16: bool, clip_norm: float, graphs: bool = True):
        self.model, self.optimizer, self.bf16, self.clip_norm, self.use_graphs = model, optimizer, bf16, clip_norm, graphs
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.device = params[0].device
        self.flat = FlatGradients(params)
        self.scale = torch.zeros((), device=self.device, dtype=params[0].dtype)  # w / B of the present update
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, Batch, torch.Tensor]] = {}  # phase 1, per shape
        self.seen: set[tuple] = set()
        self.step_graph: tuple[torch.cuda.CUDAGraph, torch.Tensor] | None = None
        self.steps = 0
        if graphs:
            self.lr = capturable_lr(optimizer, self.device)
            self.pool, self.stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()

    # the phases, as they run eagerly and as the graphs record them

    def backward(self, b: Batch) -> torch.Tensor:
        """Phase 1: the share's summed NLL (returned), and its gradient × scale written into the flat buffer."""
        self.flat.buffer.zero_()
        cache = not (b.x.is_cuda and torch.cuda.is_current_stream_capturing())
        with torch.autocast(b.x.device.type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=cache):
            loss = training_loss(self.model, b)
        (loss * self.scale).backward()
        return loss.detach()

    def all_reduce(self) -> None:
        """Phase 2: the flat gradient summed across the processes (outside any graph)."""
        dist.all_reduce(self.flat.buffer)

    def step(self) -> torch.Tensor:
        """Phase 3: the gradient's norm clipped to clip_norm, one optimizer step; returns the norm before clipping."""
        norm = torch.nn.utils.clip_grad_norm_(self.flat.params, self.clip_norm)
        self.optimizer.step()
        return norm

    def __call__(self, share: Batch, weight: float, rows: int, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One update on this process's `share` (of weight `weight`) of a global minibatch of `rows` rows at
        learning rate `lr`: the share's summed NLL and the global gradient's norm before clipping."""
        self.scale.fill_(weight / rows)
        if not self.use_graphs:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            loss = self.backward(share.to(self.device))
            self.all_reduce()
            return loss, self.step()
        self.lr.fill_(lr)
        loss = self.replay_backward(padded(share))
        self.all_reduce()
        return loss, self.replay_step()

    # phase 1 and phase 3 from graphs

    def replay_backward(self, b: Batch) -> torch.Tensor:
        """Phase 1 of padded share `b`: eagerly for a new shape, recorded at its second share, then replayed."""
        key = (b.x.size(0), b.x.size(1), b.y_in.size(1))
        recorded = self.graphs.get(key)
        if recorded is None and key not in self.seen:
            self.seen.add(key)
            with side_stream(self.model, self.stream):
                return self.backward(b.to(self.device))
        if recorded is None:
            static = b.to(self.device)
            graph = torch.cuda.CUDAGraph()
            with static_encoder(self.model), torch.cuda.graph(graph, pool=self.pool):
                loss = self.backward(static)
            recorded = self.graphs[key] = (graph, static, loss)
        else:
            graph, static, _ = recorded
            for mine, new in ((static.x, b.x), (static.y_in, b.y_in), (static.y_out, b.y_out)):
                mine.copy_(new)
        recorded[0].replay()
        return recorded[2]

    def replay_step(self) -> torch.Tensor:
        """Phase 3: eagerly at the first update (the optimizer's state is made), recorded at the second, then
        replayed."""
        self.steps += 1
        if self.steps == 1:
            with side_stream(self.model, self.stream):
                return self.step()
        if self.step_graph is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                norm = self.step()
            self.step_graph = (graph, norm)
        self.step_graph[0].replay()
        return self.step_graph[1]
