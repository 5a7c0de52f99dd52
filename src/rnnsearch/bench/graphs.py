"""One training update captured in a CUDA graph and replayed (`rnnsearch bench-train --graph`).

Eagerly, every operation of an update is a kernel launched from Python: about 5,000 per paper-size RNNsearch
update (the recurrences' steps, forward and backward), each costing the host several microseconds whatever the
kernel's size, so that at batch 80 the GPU waits on the launches. A CUDA graph records the launches of one update
once and replays them as one: the same kernels on the same buffers, without the host in between.

What a replay needs: fixed shapes (one graph per batch shape: B, Tx, Ty and the source lengths), nothing that
copies between the host and the GPU inside the update (the GRU encoder's own recurrence, which takes its steps
from the CPU lengths, see `fused.encoder_gru`; cuDNN's packed one copies them), an optimizer whose step count stays
on the GPU (`capturable`), and a constant learning rate. Another batch of the same shape and lengths would be
copied into the graph's input tensors before a replay; the benchmark replays the recorded one.
"""

from __future__ import annotations

import copy

import torch

from rnnsearch.data.batching import Batch
from rnnsearch.textio import InputError


def update(model, optimizer, b: Batch, bf16: bool, clip_norm: float = 1.0) -> torch.Tensor:
    """App. B.2's update, as train.py runs it: the summed NLL of `b` (the forward pass under bf16 autocast if
    `bf16`; while a graph records, without autocast's weight cache, which the graph cannot keep), its mean over
    sentences backwards, clipping, one optimizer step. The gradients must be None or zero before (None: they are
    written, not added to)."""
    from rnnsearch.training.train import batch_nll

    cache = not (b.x.is_cuda and torch.cuda.is_current_stream_capturing())
    with torch.autocast(b.x.device.type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=cache):
        loss = batch_nll(model, b)
    (loss / b.x.size(0)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    return loss.detach()


class GraphedUpdate:
    """The update on batch `b` recorded once in a CUDA graph; `replay()` runs it again and returns the
    loss, a tensor of the graph."""

    def __init__(self, model, optimizer, b: Batch, bf16: bool, warmup: int = 3):
        if model.encoder.fused is False:
            raise InputError("--graph: the LSTM encoder runs as a packed sequence, whose copy of the sorted lengths "
                             "to the GPU a CUDA graph cannot hold; graph a model with a GRU encoder")
        if b.x.device.type != "cuda":
            raise InputError("--graph: a CUDA graph needs the model on a CUDA device (--device cuda)")
        # the GRU encoder's own recurrence, not cuDNN's packed one (its default on a GPU): it takes its steps from
        # the CPU lengths before recording, where pack_padded_sequence copies them to the GPU inside the update
        model.encoder.fused = True
        self.model, self.optimizer, self.bf16 = model, optimizer, bf16
        self.b = b  # the graph's inputs: the replays read these tensors
        side = torch.cuda.Stream()  # warm-up on a side stream, as torch.cuda.graph asks: allocator, handles, state
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                optimizer.zero_grad(set_to_none=True)
                update(model, optimizer, self.b, bf16)
        torch.cuda.current_stream().wait_stream(side)
        optimizer.zero_grad(set_to_none=True)  # the captured backward writes the gradients into its own memory
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.loss = update(model, optimizer, self.b, bf16)

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.loss


def _eager_twin(graphed: GraphedUpdate):
    """A copy of the model and its optimizer in their present state, updated eagerly on the recorded batch."""
    model, optimizer = graphed.model, graphed.optimizer
    twin = copy.deepcopy(model)
    twin_optimizer = type(optimizer)(twin.parameters(), **optimizer.defaults)
    twin_optimizer.load_state_dict(optimizer.state_dict())
    twin_optimizer.zero_grad(set_to_none=True)
    update(twin, twin_optimizer, graphed.b, graphed.bf16)
    return twin


def difference_from_eager(graphed: GraphedUpdate) -> dict:
    """One replay against the same update run eagerly, twice, from the same state (model and optimizer copied
    first): the largest absolute difference of the parameters after it, and the difference of the updates
    ‖Δθ − Δθ_eager‖ / ‖Δθ_eager‖, for the replay and for a second eager run (the GPU's own spread: its matrix
    products need not add in the same order on another stream). A replay on stale inputs or without one of the
    update's kernels would differ by about the update itself (a relative difference near 1)."""
    before = [p.detach().clone() for p in graphed.model.parameters()]
    first, second = _eager_twin(graphed), _eager_twin(graphed)
    graphed.replay()
    torch.cuda.synchronize()

    def compare(params) -> tuple[float, float]:
        pairs = list(zip(params, first.parameters()))
        largest = max(float((p - q).abs().max()) for p, q in pairs)
        diff = torch.stack([torch.linalg.vector_norm((p - q).float()) for p, q in pairs]).norm()
        step = torch.stack([torch.linalg.vector_norm((q - b).float()) for (_, q), b in zip(pairs, before)]).norm()
        return largest, float(diff / step)

    graph_abs, graph_rel = compare(list(graphed.model.parameters()))
    eager_abs, eager_rel = compare(list(second.parameters()))
    return {"graph_max_abs_difference_from_eager": graph_abs, "graph_relative_update_difference": graph_rel,
            "eager_max_abs_difference_between_runs": eager_abs, "eager_relative_update_difference": eager_rel}
