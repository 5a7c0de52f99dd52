"""The equal-time experiment against JoeyNMT: the comparison table from fixtures, and the real thing on the tiny
pipeline when a Python with joeynmt 2.3.0 is named by RNNSEARCH_PEER_PYTHON (.ci/run installs one)."""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

import pytest
import yaml
from sacrebleu.metrics import BLEU, CHRF

from rnnsearch.peer.experiment import check_peer_python, run_compare
from rnnsearch.runtime import native_bf16_cpu
from rnnsearch.textio import InputError

from .conftest import REPO, dag_copy, run

REFS = ["Un chien court dans l'herbe.", "Deux enfants jouent au ballon.", "Une femme lit un livre."]


def test_every_system_is_scored_the_same_way(tmp_path):
    (tmp_path / "ref").write_text("\n".join(REFS) + "\n")
    hyps = {"a": ["Un chien court dans l'herbe.", "Deux enfants jouent.", "Une femme lit."],
            "b": ["Un chien.", "Des enfants.", "Une femme lit un livre."]}
    systems = []
    for name, lines in hyps.items():
        (tmp_path / f"{name}.hyp").write_text("\n".join(lines) + "\n")
        (tmp_path / f"{name}.json").write_text(json.dumps({"seconds": 100.0, "updates": 7, "words": 5000}
                                                          if name == "a" else
                                                          {"train_seconds": 50.0, "updates": 3, "words": 1000}))
        systems.append((name, str(tmp_path / f"{name}.hyp"), str(tmp_path / f"{name}.json")))
    result = run_compare(systems, str(tmp_path / "ref"), str(tmp_path))
    rows = {r["system"]: r for r in result["systems"]}
    for name, lines in hyps.items():
        assert rows[name]["bleu"] == round(BLEU().corpus_score(lines, [REFS]).score, 2)
        assert rows[name]["chrf"] == round(CHRF().corpus_score(lines, [REFS]).score, 2)
    assert (rows["a"]["words_per_s"], rows["b"]["words_per_s"]) == (50.0, 20.0)
    assert "tok:13a" in rows["a"]["bleu_signature"] and "| a |" in (tmp_path / "comparison.md").read_text()

    (tmp_path / "b.hyp").write_text("one line\n")
    with pytest.raises(InputError, match=r"b.hyp has 1 lines but .*ref has 3"):
        run_compare(systems, str(tmp_path / "ref"), str(tmp_path))


def test_bf16_is_native_only_where_onednn_may_use_its_instructions(monkeypatch):
    """A CPU with AVX512-BF16 limited to AVX2 (ONEDNN_MAX_CPU_ISA, as when it stands in for one without AVX-512)
    emulates bf16: the side-by-side benchmark leaves its bf16 run out and training warns, as on that CPU."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not native_bf16_cpu()


def test_the_warm_up_leaves_two_updates_to_time_as_the_peer_script_needs(tmp_path):
    from rnnsearch.bench.peer import PeerRuns, run_bench_peer

    for updates, warmup in ((3, 2), (12, 0)):
        with pytest.raises(InputError, match=rf"--warmup {warmup} with --updates {updates}: .*1 <= --warmup <= "):
            run_bench_peer("peer_joeynmt.sh", sys.executable, "raw",
                           PeerRuns(["multi30k"], updates, warmup, 1, ["greedy"], 1, 42), str(tmp_path / "peer.json"),
                           str(tmp_path / "peer.md"), str(tmp_path / "peer.log"))
    assert list(tmp_path.iterdir()) == []


def test_the_peers_config_must_run_where_ours_run(tmp_path):
    from rnnsearch.bench.peer import check_peer_device

    script = str(tmp_path / "peer_joeynmt.sh")
    (tmp_path / "joeynmt_rnnsearch.yaml").write_text("use_cuda: False\nfp16: False\n")
    check_peer_device(script, "cpu")
    with pytest.raises(InputError, match=r"joeynmt_rnnsearch.yaml: use_cuda: False, but --device is cuda; .*"
                                         r"use_cuda: True\)"):
        check_peer_device(script, "cuda")
    (tmp_path / "joeynmt_rnnsearch.yaml").write_text("fp16: False\n")  # JoeyNMT's default: the GPU
    with pytest.raises(InputError, match="use_cuda: True, but --device is cpu"):
        check_peer_device(script, "cpu")


def test_a_python_without_joeynmt_is_named(tmp_path):
    with pytest.raises(InputError, match=rf"'peer.python': {sys.executable} cannot import joeynmt"):
        check_peer_python(sys.executable)


def peer_python_or_skip() -> str:
    """$RNNSEARCH_PEER_PYTHON when it has JoeyNMT 2.3.0 (.ci/run installs one), else the test is skipped."""
    python = os.environ.get("RNNSEARCH_PEER_PYTHON")
    if not python:
        pytest.skip("RNNSEARCH_PEER_PYTHON is not set (a Python with joeynmt 2.3.0)")
    try:
        check_peer_python(python)
    except InputError as e:
        pytest.skip(str(e))
    return python


@pytest.mark.slow
def test_joeynmt_trains_for_our_training_time_on_our_data(tiny_dag, tmp_path):
    """`snakemake peer` on the tiny DAG: JoeyNMT trains on our tokenized data for the time rnnsearch-50 trained;
    naming the peer's Python and its config (`peer.config`: the shipped one at the tiny config's sizes, 16) reruns
    nothing of ours."""
    python = peer_python_or_skip()
    config = yaml.safe_load((REPO / "workflow/resources/joeynmt_rnnsearch.yaml").read_text())
    for part in ("encoder", "decoder"):
        config["model"][part]["hidden_size"] = config["model"][part]["embeddings"]["embedding_dim"] = 16
    (tmp_path / "joeynmt_tiny.yaml").write_text(yaml.safe_dump(config))
    ws = dag_copy(tiny_dag, tmp_path, {"peer": {"python": python, "config": "joeynmt_tiny.yaml"}})
    p = run(["snakemake", "--cores", "2", "peer"], ws)
    ran = p.stdout + p.stderr
    assert "rule train:" not in ran and "rule translate:" not in ran, ran[-3000:]
    ours = json.loads((ws / "results/models/rnnsearch-50/replicate1/train_stats.json").read_text())
    peer = json.loads((ws / "results/peer/joeynmt/stats.json").read_text())
    assert peer["budget_seconds"] == ours["seconds"] and peer["updates"] >= 1
    assert peer["train_seconds"] < ours["seconds"] + 30  # stopped at the first update after the budget
    config = yaml.safe_load((ws / "results/peer/joeynmt/joeynmt.yaml").read_text())
    assert config["data"]["train"] == str(ws / "results/data/train50")  # our tokenized training set
    assert config["data"]["src"]["voc_limit"] == 150 and config["testing"]["beam_size"] == 3
    assert config["model"]["encoder"]["hidden_size"] == 16  # the config named, paths and sizes rewritten
    hyps = (ws / "results/peer/joeynmt/test.hyp").read_text().splitlines()
    assert len(hyps) == len((ws / "results/data/raw/test.fr").read_text().splitlines())
    table = json.loads((ws / "results/peer/comparison.json").read_text())
    assert [r["system"] for r in table["systems"]] == ["rnnencdec-30", "rnnsearch-30", "rnnencdec-50", "rnnsearch-50",
                                                       "JoeyNMT-2.3.0"]


def _raw_with_a_short_test_set(shared: Path, out: Path, sentences: int) -> Path:
    """The raw data the peer script prepares (prep_data.py), linked, but Multi30k's test_2016_flickr cut to its
    first `sentences`: the training set, and so both vocabularies and the models' sizes, are the real ones."""
    for folder, names in (("multi30k_enfr", ("train", "val", "test_2016_flickr")), ("europarl_v7_samples",
                                                                                      ("cs124sampleB",))):
        (out / folder).mkdir(parents=True)
        for name in names:
            for lang in ("en", "fr"):
                if name.startswith("test"):
                    lines = (shared / folder / f"{name}.{lang}").read_text(encoding="utf-8").splitlines(True)
                    (out / folder / f"{name}.{lang}").write_text("".join(lines[:sentences]), encoding="utf-8")
                else:
                    (out / folder / f"{name}.{lang}").symlink_to(shared / folder / f"{name}.{lang}")
    return out


@pytest.mark.slow
def test_side_by_side_benchmark_measures_both_in_one_run(tmp_path):
    """bench-peer at its smallest: one round on Multi30k (its first 200 test sentences), 3 updates (2 timed), greedy
    fixed-length decoding, one thread each (the other pytest worker has the other core: two threads would wait on
    each other's spin)."""
    from rnnsearch.bench.peer import PeerRuns, run_bench_peer

    python = peer_python_or_skip()
    shared = REPO.parent / "shared"
    if not (shared / "bench" / "peer_joeynmt.sh").exists() or not (shared / "data" / "PROVENANCE.md").exists():
        pytest.skip(f"the peer benchmark or its data not found in {shared}")
    raw = _raw_with_a_short_test_set(shared / "data", tmp_path / "raw", 200)
    r = run_bench_peer(str(shared / "bench" / "peer_joeynmt.sh"), python, str(raw),
                       PeerRuns(["multi30k"], 3, 1, 1, ["greedy"], 1, 42), str(tmp_path / "peer.json"),
                       str(tmp_path / "peer.md"), str(tmp_path / "peer.log"))
    ds = r["datasets"]["multi30k"]
    test = runpy.run_path(str(shared / "bench" / "prep_data.py"))["pairs"](raw / "multi30k_enfr", "test_2016_flickr",
                                                                          1, 10**6)  # as the peer prepares them
    assert ds["fixed_length"] == int(sum(len(fr.split()) + 1 for _, fr in test) / len(test) + 0.5)  # </s> counted
    peer = ds["peer"][0]
    assert not peer["data_checksums_match"]  # a test set cut short: the peer says its data are not the recorded ones
    assert peer["train"]["timed_updates"] == 2  # after our warm-up of 1:
    assert peer["train"]["warmup_updates_excluded"] == 1 and peer["train"]["updates_total"] == 3
    assert peer["decode_greedy_fixed"]["mean_out_len"] == ds["fixed_length"]
    bf16_runs = [("closest", "sorted", "bf16", 2)] if native_bf16_cpu() else []  # never emulated bf16
    assert [(o["model"], o["batching"], o["precision"], o["timed_updates"]) for o in ds["ours_train"]] == [
        ("closest", "sorted", "fp32", 2), ("closest", "random", "fp32", 2), ("rnnsearch", "sorted", "fp32", 2),
        *bf16_runs]
    s = ds["summary"]
    # the closest model is the peer's size: the same FLOPs per target token to within 1 % (8,003 vs 8,004 words)
    assert abs(s["closest_random"]["gflop_per_target_token"] / s["peer"]["gflop_per_target_token"] - 1) < 0.01
    assert s["closest_sorted"]["target_padding_efficiency"] > s["closest_random"]["target_padding_efficiency"]
    assert 0 < s["closest_sorted"]["utilisation"] < 1 and 0 < s["peer"]["utilisation"] < 1
    ratio = s["ratios_ours_over_peer"]["train_target_tokens_per_s (closest, our batching)"]
    assert ratio == round(s["closest_sorted"]["target_tokens_per_s"] / s["peer"]["target_tokens_per_s"], 2)
    assert all(o["fixed_length"] == ds["fixed_length"] and o["sentences"] == 200 for o in ds["ours_decode"])
    md = (tmp_path / "peer.md").read_text()
    assert "| ours, closest, peer's random batches |" in md and "greedy_fixed_sentences_per_s (closest)" in md
    if bf16_runs:  # bf16 is reported beside the fp32 pair, without a utilisation against the fp32 GEMM peak
        assert "utilisation" not in s["closest_sorted_bf16"] and "| ours, closest, our batching, bf16 autocast |" in md
        bf16 = s["ratios_ours_over_peer"]["train_target_tokens_per_s (closest, our batching, bf16 autocast)"]
        assert bf16 == round(s["closest_sorted_bf16"]["target_tokens_per_s"] / s["peer"]["target_tokens_per_s"], 2)
    else:
        assert "closest_sorted_bf16" not in s and "bf16 autocast: not measured: the CPU has neither" in md
    # utilisation's denominator: the best GEMM our training processes timed (before and after their updates)
    assert r["gemm_peak_gflops"] == max(g for o in ds["ours_train"] for g in o["gemm_peak_gflops"]) > 0
    assert json.loads((tmp_path / "peer.json").read_text())["gemm_peak_gflops"] == r["gemm_peak_gflops"]
    assert "PHASES='train'" in (tmp_path / "peer.log").read_text()  # not the peer's gemm phase: the same product
