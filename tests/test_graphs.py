"""The training's CUDA graphs (training/graphs.py): what the CPU can check (the padded minibatch and the
every-row encoder a graph runs give the unpadded update's loss and gradients; `train.cuda_graphs` refuses what
cannot run) and, marked `cuda`, the graphs themselves against eager updates."""

from __future__ import annotations

import copy

import pytest
import torch

from rnnsearch.textio import InputError
from rnnsearch.training.graphs import UpdateGraphs, graphs_wanted, padded, side_stream_updates, static_encoder
from rnnsearch.training.optimizers import make_optimizer
from rnnsearch.training.scoring import training_loss

from .test_fused import FUSED, model_and_batch
from .test_fused_memory import MEMORY

MODELS = {**FUSED, **{name: ("rnnsearch", overrides) for name, overrides in MEMORY.items()},
          "coverage-loss": ("rnnsearch", {})}  # the paper's model with train.coverage_loss (COVERAGE_LOSS)
COVERAGE_LOSS = {"coverage-loss": 1.0}


def loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    loss = training_loss(model, batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("name", list(MODELS))
def test_a_padded_minibatch_through_the_every_row_encoder_gives_the_same_loss_and_gradients(name):
    """Source and target padded to multiples of 4 (and of 8) words, every row run for all Tx steps: the loss
    and every gradient of the unpadded minibatch, to float32 rounding (the alignment models with memory too:
    their state on padded source words never reaches a real word's energy)."""
    arch, overrides = MODELS[name]
    model, batch = model_and_batch(arch, overrides, seed=3)
    model.coverage_loss = COVERAGE_LOSS.get(name, 0.0)
    want_loss, want = loss_and_grads(model, batch)
    for step in (4, 8):
        b = padded(batch, step)
        assert b.x.size(1) % step == 0 and b.y_in.size(1) % step == 0 and b.x.size(1) > batch.x.size(1)
        assert b.target_words == batch.target_words and b.source_words == batch.source_words
        with static_encoder(model):
            assert model.encoder.every_row
            loss, grads = loss_and_grads(model, b)
        assert not model.encoder.every_row  # restored
        assert abs(loss.item() - want_loss.item()) <= 1e-5 * abs(want_loss.item())
        for g, w in zip(grads, want):
            assert torch.allclose(g, w, rtol=1e-4, atol=1e-6), (step, (g - w).abs().max().item())


def test_cuda_graphs_run_where_they_can_and_true_is_an_error_elsewhere():
    gru, _ = model_and_batch("rnnsearch", {})
    lstm, _ = model_and_batch("luong", {})
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert graphs_wanted("auto", gru, cuda, 1) and graphs_wanted(True, gru, cuda, 1)
    assert not any(graphs_wanted(s, m, d, p) for s, m, d, p in [
        ("auto", gru, cpu, 1), ("auto", lstm, cuda, 1), ("auto", lstm, cuda, 2), (False, gru, cuda, 1)])
    with pytest.raises(InputError, match=r"train.cuda_graphs: true, but a CUDA graph needs a CUDA device, and this "
                                         r"model is on the CPU; set it to auto or false"):
        graphs_wanted(True, gru, cpu, 1)
    with pytest.raises(InputError, match="true, but the LSTM encoder runs as a packed sequence"):
        graphs_wanted(True, lstm, cuda, 1)


def _relative_difference(model, twin, before) -> float:
    diff = torch.stack([(p - q).float().norm() for p, q in zip(model.parameters(), twin.parameters())]).norm()
    step = torch.stack([(q - b).float().norm() for q, b in zip(twin.parameters(), before)]).norm()
    return float(diff / step)


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("optimizer", ["adadelta", "adam"])
@pytest.mark.parametrize("variant", ["additive", *MEMORY, *COVERAGE_LOSS])
def test_updates_from_cuda_graphs_follow_the_eager_updates(precision, optimizer, variant):
    """Four minibatches of one padded shape and one of another through UpdateGraphs (eager, recorded and
    replayed, replayed with new data, a new shape eagerly) against the same five updates run eagerly on a copy:
    the parameters' change agrees to 1 % (two eager runs on a GPU differ by about 0.3 %: docs/benchmarks.md),
    where a replay on stale inputs or at a stale learning rate would differ by about the update itself. The
    alignment models with memory run through autograd on CUDA, in the same graphs, as the coverage loss does."""
    model, _ = model_and_batch("rnnsearch", MEMORY.get(variant, {}), seed=5, device="cuda")
    model.coverage_loss = COVERAGE_LOSS.get(variant, 0.0)
    assert (model.decoder.attention.state_size > 0) == (variant in MEMORY)
    batches = [model_and_batch("rnnsearch", {}, seed=s)[1] for s in (6, 7, 8, 9)]  # the same lengths
    batches.append(model_and_batch("rnnencdec", {}, seed=10)[1])
    batches[-1].y_in, batches[-1].y_out = batches[-1].y_in[:, :5], batches[-1].y_out[:, :5]  # another shape
    bf16, scale = precision == "bf16", 1.0 if optimizer == "adadelta" else 0.01
    rates = [scale * r for r in (0.5, 0.4, 0.3, 0.2, 0.1)]
    opt = make_optimizer(model.parameters(), optimizer, 1.0, capturable=True)
    twin = copy.deepcopy(model)
    twin_opt = make_optimizer(twin.parameters(), optimizer, 1.0, capturable=True)
    before = [p.detach().clone() for p in model.parameters()]
    graphs = UpdateGraphs(model, opt, bf16, 1.0)
    losses = [graphs(b, lr)[0].item() for b, lr in zip(batches, rates)]
    assert len(graphs.graphs) == 1 and len(graphs.seen) == 2
    for b, lr in zip(batches, rates):
        for group in twin_opt.param_groups:
            group["lr"] = lr
        side_stream_updates(twin, twin_opt, padded(b).to("cuda"), bf16)
    torch.cuda.synchronize()
    assert _relative_difference(model, twin, before) < 0.01
    assert losses[1] != losses[2]  # the replay read the new minibatch
