"""The closed-form FLOP count equals what torch's FLOP counter sees the model execute, for every preset and
ablation, so utilisation figures rest on a count that can fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from rnnsearch.bench.flops import forward_flops, train_flops
from rnnsearch.model import build_model
from rnnsearch.textio import InputError

SIZES = {"m": 12, "n": 10, "n_align": 14, "l": 6}
VARIANTS = [
    {"arch": "rnnsearch"},
    {"arch": "rnnencdec"},
    {"arch": "luong"},
    {"arch": "rnnsearch", "cell": "lstm"},
    {"arch": "rnnsearch", "attention": "multiplicative"},
    {"arch": "rnnsearch", "bidirectional": False, "attention": "dot"},
    {"arch": "luong", "input_feeding": False, "cell": "gru"},
    {"arch": "luong", "attention": "additive"},
    {"arch": "rnnsearch", "attention": "location", "location_filters": 3, "location_width": 3},
    {"arch": "rnnsearch", "coverage": "linguistic"},
    {"arch": "rnnsearch", "coverage": "fertility"},
    {"arch": "rnnsearch", "coverage": "neural", "coverage_size": 4},
    {"arch": "luong", "attention": "additive", "coverage": "neural"},
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={v[k]}" for k in v))
@pytest.mark.parametrize("S,T", [(7, 5), (3, 11)])
def test_closed_form_equals_torch_flop_counter(variant, S, T):
    K, B = 23, 4
    model = build_model({**SIZES, **variant}, 19, K).eval()
    torch.manual_seed(0)
    x = torch.randint(3, 19, (B, S))
    y_in = torch.randint(3, K, (B, T))
    # oneDNN's fused LSTM kernel hides its matrix products from the counter: run the generic kernel here
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x, torch.full((B,), S), y_in)
    assert counter.get_total_flops() == B * forward_flops(model.cfg, K, S, T)


def test_paper_size_rnnsearch_per_target_word():
    """At the paper's sizes (K = 30,003), 30-word sentences: the output layer and the GRU dominate."""
    cfg = {"m": 620, "n": 1000, "n_align": 1000, "l": 500, "cell": "gru", "bidirectional": True,
           "attention": "additive", "combined_output": False, "input_feeding": False}
    per_word = train_flops(cfg, 30003, 31, 31) / 31
    assert 200e6 < per_word < 400e6  # W_o alone is 3 × 2 · 500 · 30003 = 90 MFLOP per word


def test_training_benchmark_reports_flops_and_utilisation_against_a_gemm_measured_in_the_same_run(tmp_path,
                                                                                                  short_gemm):
    from rnnsearch.bench.speed import Setup, run_bench_train

    r = run_bench_train(Setup("rnnsearch", "bench", 4, 1, "cpu", 1), 6, 1, str(tmp_path / "t.json"))
    assert r["gemm_peak_gflops"] > 0 and 0 < r["utilisation"] < 1.5
    assert abs(r["gflops_per_s"] - r["train_gflop_per_update"] / r["seconds_per_update"]) < 0.05 * r["gflops_per_s"]
    assert abs(r["utilisation"] - r["gflops_per_s"] / r["gemm_peak_gflops"]) < 1e-3
    cfg = {"m": 256, "n": 512, "n_align": 512, "l": 256, "cell": "gru", "bidirectional": True,
           "attention": "additive", "combined_output": False, "input_feeding": False}
    assert r["train_gflop_per_update"] == round(4 * train_flops(cfg, 8003, 7, 7) / 1e9, 3)


def test_training_benchmark_in_bf16_runs_its_products_and_its_gemm_in_bf16(tmp_path, monkeypatch):
    from rnnsearch.bench import speed

    dtypes = []
    real = speed.gemm_peak_gflops
    # the GEMM rate on 256² operands: bf16 products of 2048² ones take minutes where the CPU emulates them (882 s
    # on an AMD EPYC without AVX512-BF16); what is checked here is that the products and the GEMM are bf16
    monkeypatch.setattr(speed, "gemm_peak_gflops", lambda *a, **k: dtypes.append(k["precision"]) or real(
        *a, **{**k, "seconds": 0.2, "size": 256}))
    r = speed.run_bench_train(speed.Setup("rnnencdec", "bench", 2, 1, "cpu", 1, "bf16"), 4, 1, str(tmp_path / "b.json"))
    assert r["precision"] == "bf16" and dtypes == ["bf16", "bf16"] and 0 < r["utilisation"]
    with pytest.raises(InputError, match="tf32 is a CUDA setting"):
        speed.run_bench_train(speed.Setup("rnnencdec", "bench", 2, 1, "cpu", 1, "tf32"), 4, 1, str(tmp_path / "t.json"))
    with pytest.raises(InputError, match="--graph: a CUDA graph needs a CUDA device"):
        speed.run_bench_train(speed.Setup("rnnencdec", "bench", 2, 1, "cpu", 1), 4, 1, str(tmp_path / "g.json"), graph=True)
    with pytest.raises(InputError, match="--graph: the LSTM encoder runs as a packed sequence"):
        speed.bench_update_setup("luong", "bench", 2, 4, 1, "cpu", 1, "fp32", capturable=True)


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_training_benchmark_on_cuda_measures_the_gpus_gemm_rate(tmp_path, precision):
    from rnnsearch.bench.speed import Setup, run_bench_train

    r = run_bench_train(Setup("rnnsearch", "bench", 8, 1, "cuda", 1, precision), 10, 2, str(tmp_path / "g.json"))
    assert r["device"].startswith("cuda") and r["peak_cuda_mb"] > 0 and r["gpu"]
    assert r["gemm_peak_gflops"] > 1000 and 0 < r["utilisation"] < 1.5  # a GPU's GEMM: well past a TFLOP/s


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_an_update_replayed_from_a_cuda_graph_gives_the_eager_updates_parameters(tmp_path, precision):
    """The graph replays the update on the batch it recorded: one replay moves the parameters as the same update
    run eagerly from the same state does, to the rounding of products summed in another order (a replay on stale
    inputs or without one of the update's kernels would be off by about the update itself)."""
    from rnnsearch.bench.speed import Setup, run_bench_train

    r = run_bench_train(Setup("rnnsearch", "bench", 8, 1, "cuda", 1, precision), 10, 2, str(tmp_path / "g.json"),
                        gemm=False, graph=True)
    assert r["cuda_graph"] and r["seconds_per_update"] > 0
    assert r["graph_relative_update_difference"] < 1e-2, r


@pytest.mark.slow
def test_the_length_scaling_benchmark_and_the_summary_table_that_reads_every_benchmark_of_the_run(tmp_path):
    """bench-scaling writes its points, fit and figure; bench-summary reads them with bench-train's JSON."""
    from rnnsearch.bench.speed import (
        Setup,
        run_bench_scaling,
        run_bench_summary,
        run_bench_train,
    )

    train = []
    for arch in ("rnnsearch", "rnnencdec"):
        train.append(str(tmp_path / f"{arch}.json"))
        run_bench_train(Setup(arch, "bench", 2, 1, "cpu", 1), 4, 1, train[-1], gemm=False)
    # utilisation needs a GEMM rate: give the files one, as a run with gemm=True writes it
    for p in train:
        r = json.loads(Path(p).read_text())
        r.update(gemm_peak_gflops=100.0, utilisation=r["gflops_per_s"] / 100.0)
        Path(p).write_text(json.dumps(r))
    # three points of one model (each a fresh process): what a fit needs; the models are a loop around it
    r = run_bench_scaling(Setup(size="bench", batch=2, threads=1, device="cpu", seed=1), ["rnnencdec"], [4, 8, 12], 1,
                          str(tmp_path / "s.json"), str(tmp_path / "s.png"))
    assert [(p["arch"], p["length"]) for p in r["runs"]] == [("rnnencdec", n) for n in (4, 8, 12)]
    assert all(p["seconds_per_update"] > 0 and p["peak_rss_mb"] > 0 for p in r["runs"])
    assert set(r["quadratic_fit"]) == {"rnnencdec"} and (tmp_path / "s.png").stat().st_size > 1000
    (tmp_path / "peer.md").write_text("# Side by side with JoeyNMT\n\n| a | b |\n")
    text = run_bench_summary(train, str(tmp_path / "s.json"), str(tmp_path / "peer.md"), str(tmp_path / "summary.md"))
    assert text == (tmp_path / "summary.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith(("| rnnsearch | bench", "| rnnencdec | bench"))]
    assert len(rows) == 2 and "| 2 × 4 |" in rows[0]
    assert [line.split(" |")[0] for line in text.splitlines() if line.startswith(("| 4 ", "| 8 ", "| 12 "))] == \
        ["| 4", "| 8", "| 12"]
    assert "## Side by side with JoeyNMT" in text and "rnnencdec: t(L) ≈" in text
