"""One training update captured in a CUDA graph and replayed (`rnnsearch bench-train --graph`), against the
same update run eagerly. The graph itself is the training's (`training.graphs`, which says what a replay needs).
"""

from __future__ import annotations

import copy

import torch

from rnnsearch.training.graphs import GraphedUpdate, side_stream_updates, static_encoder, update


def graphed_update(model, optimizer, b, bf16: bool, warmup: int = 3) -> GraphedUpdate:
    """`warmup` eager updates on batch `b`, then the update recorded on it (not run)."""
    side_stream_updates(model, optimizer, b, bf16, updates=warmup)
    return GraphedUpdate(model, optimizer, b, bf16)


def _eager_twin(graphed: GraphedUpdate):
    """A copy of the model and its optimizer in their present state, updated eagerly on the recorded batch."""
    model, optimizer = graphed.model, graphed.optimizer
    twin = copy.deepcopy(model)
    twin_optimizer = type(optimizer)(twin.parameters(), **optimizer.defaults)
    twin_optimizer.load_state_dict(optimizer.state_dict())
    twin_optimizer.zero_grad(set_to_none=True)
    with static_encoder(twin):
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
