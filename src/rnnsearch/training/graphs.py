"""Training updates replayed from CUDA graphs (`train.cuda_graphs`, and `rnnsearch bench-train --graph`).

Eagerly, every operation of an update is a kernel launched from Python: about 5,000 per paper-size RNNsearch
update (the recurrences' steps, forward and backward), each costing the host several microseconds whatever the
kernel's size, so that at batch 80 the GPU waits on the launches. A CUDA graph records the launches of one update
once and replays them as one: the same kernels on the same buffers, without the host in between.

A graph holds one batch shape. Training on graphs (`UpdateGraphs`) therefore pads each minibatch's source and
target with PAD to the next multiple of `LENGTH_STEP` words (PAD has no loss, no attention and a zero annotation:
the loss and gradients are those of the unpadded minibatch) and keeps one graph per padded shape (B, Tx, Ty). The
first minibatch of a shape is trained eagerly, on a side stream as capture asks of a warm-up; the second is
recorded and replayed, and every later one copied into the graph's input tensors and replayed. Inside the
update nothing may pass between the host and the GPU: the GRU encoder runs its own recurrence (not cuDNN's
packed one, which copies the lengths) over every row for all Tx steps (`Encoder.every_row`: no length read on the
host); the optimizer keeps its step count and learning rate on the GPU (`capturable`, the rate a tensor filled
before each update); the loss and the gradient norm are read after the replay, as eager training reads them.
The graphs share one memory pool: they never run at once, and all that outlives an update (parameters,
optimizer state, the graphs' inputs) lives outside the pool.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn import functional as F

from rnnsearch.data.batching import Batch
from rnnsearch.data.vocab import PAD_ID
from rnnsearch.textio import InputError
from rnnsearch.training.scoring import training_loss

LENGTH_STEP = 4  # (Tx, Ty) in multiples of 4 words: 1/16 of the shapes of exact lengths, 1.5 words of padding a side


def update(model, optimizer, b: Batch, bf16: bool, clip_norm: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """App. B.2's update, as train.py runs it: the summed NLL of `b` (and its coverage loss, if any; the forward
    pass under bf16 autocast if `bf16`; while a graph records, without autocast's weight cache, which the graph
    cannot keep), its mean over sentences backwards, the gradient's norm clipped to `clip_norm`, one optimizer step. The gradients must be
    None or zero before (None: they are written, not added to). Returns the loss and the norm before clipping."""
    cache = not (b.x.is_cuda and torch.cuda.is_current_stream_capturing())
    with torch.autocast(b.x.device.type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=cache):
        loss = training_loss(model, b)
    (loss / b.x.size(0)).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    return loss.detach(), norm


def padded(b: Batch, step: int = LENGTH_STEP) -> Batch:
    """`b` with source and target padded with PAD to the next multiple of `step` words."""
    def pad(t: torch.Tensor) -> torch.Tensor:
        extra = -t.size(1) % step
        return F.pad(t, (0, extra), value=PAD_ID) if extra else t

    return Batch(pad(b.x), b.lengths, pad(b.y_in), pad(b.y_out), b.index)


def unavailable(model, device: torch.device) -> str | None:
    """Why an update of `model` on `device` cannot be captured in a CUDA graph, or None."""
    if model.encoder.fused is False:
        return ("the LSTM encoder runs as a packed sequence, whose copy of the sorted lengths to the GPU a CUDA "
                "graph cannot hold; a model with a GRU encoder can be graphed")
    if device.type != "cuda":
        return f"a CUDA graph needs a CUDA device, and this model is on the {device.type.upper()}"
    return None


def graphs_wanted(setting: str | bool, model, device: torch.device, processes: int) -> bool:
    """`train.cuda_graphs` resolved: auto wherever graphs can run (a CUDA device and a GRU encoder; with several
    data-parallel processes, `parallel_graphs`, which one H100 checked on 2026-11-27: docs/cluster.md), true
    likewise and an InputError where graphs cannot run; false never. `processes` does not change the answer."""
    reason = unavailable(model, device)
    if setting == "auto":
        return reason is None
    if setting and reason:
        raise InputError(f"train.cuda_graphs: true, but {reason}; set it to auto or false")
    return bool(setting)


@contextlib.contextmanager
def static_encoder(model):
    """The encoder as a graph needs it, for the update inside: its own recurrence over every row (`every_row`)."""
    encoder = model.encoder
    before = encoder.fused, encoder.every_row
    encoder.fused, encoder.every_row = True, True
    try:
        yield
    finally:
        encoder.fused, encoder.every_row = before


def side_stream_updates(model, optimizer, b: Batch, bf16: bool, clip_norm: float = 1.0, updates: int = 1,
                        stream: torch.cuda.Stream | None = None):
    """`updates` eager updates on a side stream (a capture's warm-up: the allocator, library handles and the
    optimizer's state made there) with the encoder a graph runs; returns the last one's loss and norm."""
    with side_stream(model, stream or torch.cuda.Stream()):
        for _ in range(updates):
            optimizer.zero_grad(set_to_none=True)
            out = update(model, optimizer, b, bf16, clip_norm)
    return out


@contextlib.contextmanager
def side_stream(model, stream: torch.cuda.Stream):
    """Eager work as a capture's warm-up: on `stream`, after the current stream's work, with the encoder a graph
    runs; the current stream then waits for it."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), static_encoder(model):
        yield
    torch.cuda.current_stream().wait_stream(stream)


class GraphedUpdate:
    """The update on batch `b` (on the GPU; its tensors become the graph's inputs) recorded in a CUDA graph,
    nothing run yet; `replay(batch)` copies a batch of the same shape in and runs it, returning the loss and
    norm tensors of the graph. Warm up first (`side_stream_updates`)."""

    def __init__(self, model, optimizer, b: Batch, bf16: bool, clip_norm: float = 1.0, pool=None):
        reason = unavailable(model, b.x.device)
        if reason:
            raise InputError(f"a CUDA graph of the update: {reason}")
        self.model, self.optimizer, self.b, self.bf16 = model, optimizer, b, bf16
        optimizer.zero_grad(set_to_none=True)  # the captured backward writes the gradients into its own memory
        self.graph = torch.cuda.CUDAGraph()
        with static_encoder(model), torch.cuda.graph(self.graph, pool=pool):
            self.loss, self.norm = update(model, optimizer, b, bf16, clip_norm)

    def replay(self, b: Batch | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if b is not None:
            for static, new in ((self.b.x, b.x), (self.b.y_in, b.y_in), (self.b.y_out, b.y_out)):
                static.copy_(new)
        self.graph.replay()
        return self.loss, self.norm


def capturable_lr(optimizer, device: torch.device) -> torch.Tensor:
    """Make `optimizer` capturable (its step counts on the GPU, a resumed state's too) and its learning rate a GPU
    tensor, which is returned: fill it before each replay."""
    lr = torch.zeros((), device=device)
    for group in optimizer.param_groups:
        group["capturable"], group["lr"] = True, lr
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            if "step" in state:
                state["step"] = state["step"].to(p.device, torch.float32)
    return lr


class UpdateGraphs:
    """The training's updates, from one CUDA graph per padded minibatch shape (see the module's docstring).
    The optimizer becomes capturable, its learning rate a GPU tensor set by each call."""

    def __init__(self, model, optimizer, bf16: bool, clip_norm: float):
        self.model, self.optimizer, self.bf16, self.clip_norm = model, optimizer, bf16, clip_norm
        self.device = next(model.parameters()).device
        self.lr = capturable_lr(optimizer, self.device)
        self.graphs: dict[tuple, GraphedUpdate] = {}
        self.seen: set[tuple] = set()
        self.pool, self.stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()

    def __call__(self, b: Batch, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One update on minibatch `b` at learning rate `lr`: its loss and gradient norm (tensors on the GPU)."""
        b = padded(b)
        key = (b.x.size(0), b.x.size(1), b.y_in.size(1))
        self.lr.fill_(lr)
        graph = self.graphs.get(key)
        if graph is None and key not in self.seen:  # a new shape: eagerly
            self.seen.add(key)
            return side_stream_updates(self.model, self.optimizer, b.to(self.device), self.bf16, self.clip_norm,
                                       stream=self.stream)
        if graph is None:  # recorded (not run), then replayed on this minibatch
            graph = self.graphs[key] = GraphedUpdate(self.model, self.optimizer, b.to(self.device), self.bf16,
                                                     self.clip_norm, self.pool)
            return graph.replay()
        return graph.replay(b)
