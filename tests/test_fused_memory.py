"""The alignment models with memory on the CPU's hand-written recurrence (model/fused.py with
model/fused_memory.py) against the plain autograd path, as tests/test_fused.py checks the paper's model: the same
log-probabilities and gradients in float32 to rounding and in float64 to 1e-10, within the plain path's distance
under bf16 autocast; and the recurrence's gradients of every input, m_0 included, against finite differences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rnnsearch.model import fused, fused_memory
from rnnsearch.model.fused import deep_output_recurrence

from .test_fused import model_and_batch, run

pytestmark = pytest.mark.usefixtures("float32_products")

MEMORY = {"location": {"attention": "location"},
          **{f"coverage-{kind}": {"coverage": kind} for kind in ("linguistic", "fertility", "neural")}}


@pytest.fixture
def memory_paths(monkeypatch):
    """The memory paths the fused recurrence creates (none: it did not run with the variant's memory)."""
    made, make = [], fused.memory_path

    def counted(*args):
        made.append(make(*args))
        return made[-1]

    monkeypatch.setattr(fused, "memory_path", counted)
    return made


@pytest.fixture(params=["hand-written", "generic"])
def path(request, monkeypatch):
    """Each built-in variant's hand-written passes, and the generic ones (autograd step by step) that serve a
    user's variant, forced here for the built-in ones."""
    if request.param == "generic":
        monkeypatch.setattr(fused_memory, "HAND_WRITTEN", {})
    return request.param


@pytest.mark.parametrize("name", list(MEMORY))
def test_memory_variants_on_the_fused_path_give_the_plain_paths_results(name, path, memory_paths):
    """float32: log-probabilities to 1e-5 and every gradient to 1e-5 of its scale, every weight learning
    something (the variant's own ones included)."""
    model, batch = model_and_batch("rnnsearch", MEMORY[name])
    assert model.decoder.fused
    logp_plain, grads_plain = run(model, batch, False)
    logp_fused, grads_fused = run(model, batch, True)
    assert len(memory_paths) == 1 and len(memory_paths[0].states) == batch.y_in.size(1)
    assert (type(memory_paths[0]) is fused_memory.MemoryPath) == (path == "generic")
    assert grads_fused.keys() == grads_plain.keys()
    real = (batch.y_out != 0).unsqueeze(2)
    assert ((logp_fused - logp_plain) * real).abs().max().item() <= 1e-5
    for k, g in grads_plain.items():
        scale = g.abs().max().item()
        assert scale > 0, k
        assert (grads_fused[k] - g).abs().max().item() <= 1e-5 * max(scale, 1.0), k


def _distances(model, batch, logp32, grads32, fused: bool) -> tuple[float, float]:
    """Under bf16 autocast: the largest distance of a real word's log-probability from float32's, and the
    distance of all gradients together, relative to float32's."""
    logp, grads = run(model, batch, fused, True)
    assert all(g.dtype == torch.float32 for g in grads.values())
    real = (batch.y_out != 0).unsqueeze(2)
    flat = torch.cat([(grads[k] - g).flatten() for k, g in grads32.items()])
    return (((logp - logp32) * real).abs().max().item(),
            (flat.norm() / torch.cat([g.flatten() for g in grads32.values()]).norm()).item())


@pytest.mark.parametrize("name", list(MEMORY))
def test_memory_variants_on_the_fused_path_under_bf16_autocast(name, path, memory_paths):
    """train.precision: bf16, over four seeds: log-probabilities within 1.5 times the plain path's distance from
    float32 (or 0.02), and the gradients' distance on average within 1.5 times the plain path's. Seed by seed
    the two paths' gradient distances scatter from 0.004 to 0.11, now one nearer, now the other (a recurrence
    that feeds α back rounds chaotically), hence the mean; a state kept in bf16 or a product in the wrong dtype
    moves the mean, not one seed."""
    fused_g, plain_g = [], []
    for seed in range(4):
        model, batch = model_and_batch("rnnsearch", MEMORY[name], seed=seed)
        logp32, grads32 = run(model, batch, False)
        (fused_l, f), (plain_l, p) = (_distances(model, batch, logp32, grads32, fused) for fused in (True, False))
        assert 0 < fused_l <= max(1.5 * plain_l, 0.02), (seed, fused_l, plain_l)
        fused_g.append(f)
        plain_g.append(p)
    assert len(memory_paths) == 4
    assert sum(fused_g) <= 1.5 * sum(plain_g), (fused_g, plain_g)


@pytest.mark.parametrize("name", list(MEMORY))
def test_memory_variants_on_the_fused_path_in_float64(name, path, memory_paths):
    """float64: the two paths' gradients agree to 1e-10 (the plain path's are the variants' finite-difference-
    checked equations, tests/test_attention.py), and the recurrence's gradients of X, s_0, h, the keys and a
    non-zero m_0 agree with finite differences (gradcheck)."""
    model, batch = model_and_batch("rnnsearch", MEMORY[name], dtype=torch.float64)
    logp_plain, grads_plain = run(model, batch, False)
    logp_fused, grads_fused = run(model, batch, True)
    assert len(memory_paths) == 1
    real = (batch.y_out != 0).unsqueeze(2)
    assert ((logp_fused - logp_plain) * real).abs().max().item() <= 1e-10
    for k, g in grads_plain.items():
        assert (grads_fused[k] - g).abs().max().item() <= 1e-10 * max(g.abs().max().item(), 1.0), k

    with torch.no_grad():
        memory = model.encode(batch.x[:2], batch.lengths[:2])
        X = model.decoder.cell.W(model.E(batch.y_in[:2, :4]))
    cell, att, n = model.decoder.cell, model.decoder.attention, model.cfg["n"]
    g = torch.Generator().manual_seed(3)
    m0 = torch.rand(*memory.mask.shape, att.state_size, generator=g, dtype=torch.float64) * memory.mask.unsqueeze(2)
    leaves = [t.clone().requires_grad_() for t in (X, memory.s0[:, :n], memory.h, memory.keys, m0)]

    def f(X, s0, h, keys, m0):
        return deep_output_recurrence(X, s0, cell, att, h, keys, memory.mask, m0)

    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-6, rtol=1e-5, fast_mode=True)


def test_the_memory_benchmark_times_every_variant_against_the_paper_model_in_one_run(tmp_path):
    """`rnnsearch bench-memory` at the embedded corpus's sizes (short sentences, one timed round): every variant
    on the hand-written recurrence, its median update against the paper model's from the same rounds."""
    from rnnsearch.bench.memory import VARIANTS, run_bench_memory
    from rnnsearch.runtime import git_commit

    out = tmp_path / "memory.json"
    run_bench_memory(["embedded"], length=6, steps=1, threads=1, seed=3, out=str(out))
    result = json.loads(out.read_text())
    (run,) = result["runs"]
    assert run["size"] == "embedded" and run["batch"] == 40 and result["timed_rounds"] == 1
    assert list(run["models"]) == list(VARIANTS)
    base = run["models"]["rnnsearch"]["seconds_per_update"]
    for name, m in run["models"].items():
        assert m["fused_recurrence"] and m["seconds_per_update"] > 0 and len(m["seconds_each"]) == 1, name
        assert abs(m["ratio"] - m["seconds_per_update"] / base) <= 0.01 * m["ratio"] + 1e-3, name
        assert m["within_goal"] == (m["seconds_per_update"] / base <= result["goal_ratio"]), name
    assert result["machine"]["processor"] and result["git"] == git_commit()  # the commit that was measured


def test_the_benchmarks_embedded_sizes_are_params_yamls():
    """TRAIN_SIZES["embedded"] is the default run's model and shortlists (params.yaml), which it stands for."""
    import yaml

    from rnnsearch.bench.speed import TRAIN_SIZES

    params = yaml.safe_load((Path(__file__).parents[1] / "params.yaml").read_text())
    sizes = TRAIN_SIZES["embedded"]
    assert {k: sizes[k] for k in ("m", "n", "n_align", "l")} == params["model"]
    assert sizes["vocab"] == params["vocab"]["src_size"] == params["vocab"]["tgt_size"]
