"""`rnnsearch rehearse` on the CPU: paper.yaml's DAG with paper-size models, on a small generated corpus and the
embedded corpus's text as the user's dev and test, a few updates each; so that the command a GPU session runs at
4M pairs (docs/benchmarks.md) keeps working without a GPU."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from rnnsearch import config as cfg
from rnnsearch.bench import rehearsal
from rnnsearch.data.corpus import synthetic
from rnnsearch.textio import EXIT_INTERRUPTED, InputError

from .conftest import REPO, processes_in


def test_the_generated_corpus_has_the_dev_lengths_and_the_real_words(tmp_path: Path):
    lengths = np.array([[3, 4], [5, 5]])
    vocabs = [rehearsal.vocabulary(["a b a", "c a"], types=0), rehearsal.vocabulary(["x y", "y y z"], types=0)]
    rehearsal.generate(250_001, lengths, vocabs, tmp_path / "train", ("en", "fr"), seed=1)
    en = (tmp_path / "train.en").read_text().splitlines()
    fr = (tmp_path / "train.fr").read_text().splitlines()
    assert len(en) == len(fr) == 250_001  # three chunks
    pairs = {(len(e.split()), len(f.split())) for e, f in zip(en, fr)}
    assert pairs == {(3, 4), (5, 5)}
    words = [w for line in en for w in line.split()]
    assert set(words) == {"a", "b", "c"} and words.count("a") / len(words) == pytest.approx(3 / 5, abs=0.01)
    # fillers up to 40,000 types: 1 % of the tokens, each rarer than the text's rarest word
    words, cdf = rehearsal.vocabulary(["a b a", "c a"])
    p = np.diff(cdf, prepend=0.0)
    assert len(words) == 40_000 and words[3] == "zz0" and p[3:].sum() == pytest.approx(0.01)
    assert p[:3] == pytest.approx([0.99 * 3 / 5, 0.99 / 5, 0.99 / 5]) and p[3:].max() < p[:3].min()


def test_the_rehearsal_config_is_paper_yaml_with_its_data_budgets_and_shards():
    params = rehearsal.rehearsal_params(["rnnsearch-50"], updates=300, validations=2, shards=16)
    assert list(params["models"]) == ["rnnsearch-50"] and params["models"]["rnnsearch-50"]["max_updates"] == 300
    assert params["model"] == {"m": 620, "n": 1000, "n_align": 1000, "l": 500}  # App. A's sizes
    assert params["train"]["optimizer"] == "adadelta" and params["train"]["batch_size"] == 80
    assert params["train"]["validate_every"] == 150 and params["decode"]["beam"] == 12
    assert params["data"]["source"] == "local" and params["prepare"]["shards"] == 16
    with pytest.raises(InputError, match="--models rnnsearch-80: not a model of paper.yaml"):
        rehearsal.rehearsal_params(["rnnsearch-80"], 300, 2, 16)
    assert rehearsal.targets(["rnnsearch-50"], params) == [] and rehearsal.targets(None, params) == []


def test_any_subset_of_paper_yamls_models_is_a_valid_rehearsal():
    """A subset without figures.alignment_model (RNNsearch-50) keeps it in the config, for the figures' key, and
    builds the subset's scores only: neither its config nor its targets name a model it does not train."""
    params = rehearsal.rehearsal_params(["rnnencdec-30"], updates=300, validations=2, shards=2)
    assert list(params["models"]) == ["rnnencdec-30", "rnnsearch-50"]
    assert rehearsal.targets(["rnnencdec-30"], params) == ["results/scores/rnnencdec-30/replicate1.json"]
    whole = rehearsal.rehearsal_params(None, 300, 2, 2)
    assert len(whole["models"]) == 5 and rehearsal.targets(None, whole) == []
    star = whole["models"]["rnnsearch-50-star"]  # continues RNNsearch-50: its job trains 300 after its 300
    assert star["continues"] == "rnnsearch-50" and star["max_updates"] == 600
    assert whole["train"]["precision"] == "bf16"  # paper.yaml's, unless --precision says otherwise
    assert rehearsal.rehearsal_params(None, 300, 2, 2, "fp32")["train"]["precision"] == "fp32"
    # threads: paper.yaml's (8 per training, 4 per translation), at most Snakemake's cores
    assert (whole["train"]["threads"], whole["decode"]["threads"]) == (8, 4)
    two = rehearsal.rehearsal_params(None, 300, 2, 2, cores=2)
    assert (two["train"]["threads"], two["decode"]["threads"]) == (2, 2)


def test_the_projection_counts_a_continued_models_own_updates_after_its_parent():
    paper = cfg.load_params([REPO / "params.yaml", REPO / "workflow" / "configs" / "paper.yaml"])
    measured = {"updates_per_s": 40.0, "validation_seconds": [5.0, 7.0]}
    result = rehearsal.projection({"rnnsearch-50": measured, "rnnsearch-50-star": measured},
                                  {"rnnsearch-50": {"seconds": 20.0}}, paper)
    star = result["models"]["rnnsearch-50-star"]
    assert (star["budget"], star["trains"], star["validations"]) == (1_000_000, 712_000, 71)
    assert star["hours"] == round((712_000 / 40 + 71 * 6.0) / 3600, 2)
    parent = result["models"]["rnnsearch-50"]["hours"]
    assert parent == round((288_000 / 40 + 28 * 6.0 + 20) / 3600, 2)
    assert result["one_model_per_device_hours"] == round(parent + star["hours"], 2)  # the star waits for its parent
    # Table 2's 6.67 × 10⁵ updates of RNNsearch-50*: 379,000 after its parent's, beside the budget's figures
    assert (star["table2_updates"], star["table2_trains"]) == (667_000, 379_000)
    assert star["table2_hours"] == round((379_000 / 40 + 37 * 6.0) / 3600, 2) < star["hours"]
    assert "table2_hours" not in result["models"]["rnnsearch-50"]  # its budget is Table 2's
    assert result["table2_one_device_hours"] == round(parent + star["table2_hours"], 2)
    assert result["table2_one_model_per_device_hours"] == result["table2_one_device_hours"]
    fixed = rehearsal.projection({"rnnsearch-50": measured}, {}, paper, {"rnnsearch": 0.016})["models"]["rnnsearch-50"]
    assert fixed["updates_per_s"] == 62.5 and fixed["hours"] == round((288_000 * 0.016 + 28 * 6.0) / 3600, 2)


def test_a_missing_dev_or_test_file_stops_before_the_workspace_is_made(tmp_path: Path):
    synthetic.write_corpus(synthetic.generate(5, 50, 20, 8, 60, 20, 20, 20, 20), tmp_path)
    out = tmp_path / "rehearsal"
    with pytest.raises(InputError, match=f"{tmp_path / 'none.en'}: no such file"):
        rehearsal.run_rehearse([str(tmp_path / "dev")], str(tmp_path / "none"), str(out),
                                 rehearsal.Rehearsal(0.002, 2, 2, 2, 2, None, 1))
    assert not out.exists()


@pytest.mark.slow
def test_the_rehearsal_runs_the_papers_dag_with_paper_size_models_on_the_cpu(tmp_path: Path):
    """The user's text of at most 10 words a sentence, so the generated pairs too (at 20, the two paper-size
    trainings' 4 updates took 72 of the test's 136 s alone on 2 cores)."""
    synthetic.write_corpus(synthetic.generate(5, 50, 20, 8, 60, 20, 20, 20, 10), tmp_path)
    out = tmp_path / "rehearsal"
    plan = rehearsal.Rehearsal(millions=0.002, updates=2, validations=2, cores=2, shards=2,
                               models=["rnnencdec-30", "rnnsearch-50"], seed=1, precision="fp32")
    result = rehearsal.run_rehearse([str(tmp_path / "dev")], str(tmp_path / "test"), str(out), plan)
    assert json.loads((out / "rehearsal.json").read_text()) == result
    assert result["pipeline"]["exit_status"] == 0 and result["pairs"] == 2000 and result["test_sentences"] == 8
    stages = {j["stage"] for j in result["jobs"]}
    assert {"corpus", "tokenize", "vocab", "binarize", "train", "translate", "score", "tables", "figures",
            "explorer", "report"} <= stages and all(j["exit_status"] == 0 and j["peak_rss_mb"] > 0
                                                    for j in result["jobs"])
    params = yaml.safe_load((out / "params.yaml").read_text())
    assert params["train"]["precision"] == "fp32"  # bf16 (paper.yaml's) is emulated on a CPU without bf16 products
    assert params["train"]["threads"] == params["decode"]["threads"] == 2  # the cores, not paper.yaml's 8 and 4
    assert params["model"]["n"] == 1000 and params["decode"]["beam"] == 12 and params["train"]["batch_size"] == 80
    for m in ("rnnencdec-30", "rnnsearch-50"):
        t = result["trainings"][m]
        assert t["updates"] == 2 and len(t["validation_seconds"]) == 2 and t["updates_per_s"] > 0
        assert t["parameters"] > 10_000_000  # paper-size, on the generated corpus's shortlists
        d = result["decoding"][m]
        assert d["beam"] == 12 and d["sentences"] == 8 and d["seconds"] > 0
        p = result["projection"]["models"][m]
        assert p["budget"] == {"rnnencdec-30": 846_000, "rnnsearch-50": 288_000}[m] and p["hours"] > 0
    projected = result["projection"]
    hours = [p["hours"] for p in projected["models"].values()]
    assert projected["one_device_hours"] == pytest.approx(sum(hours), abs=0.02)
    assert projected["one_model_per_device_hours"] == max(hours) and projected["devices"] == 2
    assert (out / "results" / "explorer.html").exists() and (out / "results" / "report.md").exists()
    with pytest.raises(InputError, match="results exists: give the rehearsal a new --out-dir"):
        rehearsal.run_rehearse([str(tmp_path / "dev")], str(tmp_path / "test"), str(out),
                                 rehearsal.Rehearsal(0.002, 2, 2, 2, 2, None, 1))


def test_a_stages_log_ends_with_its_own_peak_memory_not_its_parents(tmp_path: Path):
    """The last line of a stage's log (what the rehearsal reads): a job forked from a large process (Snakemake
    holds 100+ MB) reports its own peak; getrusage's ru_maxrss carried the parent's size across exec."""
    import subprocess
    import sys

    ballast = bytearray(400 * 2**20)  # this process: 400 MB more than the stage will ever hold
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])  # touched, so resident
    (tmp_path / "a.en").write_text("Hello, world.\n")
    log = tmp_path / "tokenize.log"
    subprocess.run([Path(sys.executable).with_name("rnnsearch"), "tokenize", "--lang", "en", "--input",
                    tmp_path / "a.en", "--output", tmp_path / "a.tok", "--log", log], cwd=REPO, check=True)
    (end,) = rehearsal.END.findall(log.read_text())
    assert end[0] == "tokenize" and end[1] == "0" and 0 < int(end[3]) < 300, end
    del ballast


def test_the_peak_line_names_gpu_memory_only_where_the_stage_held_some(monkeypatch):
    """On the GPU, rehearse itself asks CUDA for the device's name and holds no GPU memory: its line said
    "peak GPU memory 0 MB allocated, 0 MB reserved"; a training's line gives its peaks."""
    import torch

    from rnnsearch.jobs import peak_memory

    held = {"allocated": 0, "reserved": 0}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: held["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: held["reserved"])
    assert "GPU" not in peak_memory()
    held.update(allocated=3618 * 2**20, reserved=22804 * 2**20)
    (end,) = rehearsal.END.findall("rnnsearch train: exit status 0 after 33.8 s; " + peak_memory())
    assert end[4:] == ("3618", "22804")


def test_the_rehearsal_reads_the_gpu_memory_and_graphs_of_each_progress_line(tmp_path: Path, monkeypatch):
    """A training's progress lines on CUDA end with its GPU memory and the graphs recorded so far (the trainer's
    own formatter, the GPU's figures faked); rehearsal.json lists them by update, and nothing on the CPU."""
    from types import SimpleNamespace

    import torch

    from rnnsearch.training.train import Training

    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 1.3 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: 5.2 * 2**30)
    cuda = SimpleNamespace(device=torch.device("cuda"), graphs=SimpleNamespace(graphs=dict.fromkeys(range(28))))
    assert Training.gpu_memory(SimpleNamespace(device=torch.device("cpu"))) == ""
    head = "2026-11-27 00:51:40 rnnsearch.train INFO rnnsearch-50 update {}/3000  epoch 0.03  train NLL/sent 193.19  " \
           "22952 words/s  6.17 updates/s  ETA 0:07:42"
    (tmp_path / "train.log").write_text(head.format(150) + Training.gpu_memory(cuda) + "\n" + head.format(300) + "\n")
    (tmp_path / "train_stats.json").write_text(json.dumps({"updates": 300, "seconds": 9.0, "device": "NVIDIA H200",
                                                           "parameters": 80453223}))
    (tmp_path / "learning_curve.tsv").write_text("update\tepoch\ttrain_nll\twords_per_s\tseconds\n"
                                                 "150\t0.03\t193.2\t22952.0\t4.0\n300\t0.07\t172.6\t123396.0\t8.5\n")
    assert rehearsal.training(tmp_path)["gpu_memory_by_update"] == [
        {"update": 150, "allocated_gb": 1.3, "reserved_gb": 5.2, "cuda_graphs": 28}]


@pytest.mark.slow
def test_sigterm_stops_the_rehearsal_and_everything_it_started(tmp_path: Path):
    """SIGTERM while a paper-size training runs: the rehearsal exits 75, and a few seconds later no process it
    started (Snakemake, the training) is left in its workspace, nor Snakemake's lock. The user's text is of a few
    words a sentence, so the generated pairs too: the training stops at the end of its update (at 20 words, its
    first took 30 s of the test's 62)."""
    synthetic.write_corpus(synthetic.generate(5, 50, 20, 8, 60, 20, 20, 20, 4), tmp_path)
    out = tmp_path / "rehearsal"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rnnsearch"), "rehearse", "--dev", str(tmp_path / "dev"),
                             "--test", str(tmp_path / "test"), "--out-dir", str(out), "--millions", "0.002",
                             "--updates", "400", "--cores", "1", "--shards", "1", "--models", "rnnencdec-30",
                             "--precision", "fp32"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not list((out / "results" / "logs").glob("train/*/*.log")) if out.exists() else True:
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    time.sleep(2)  # the training is under way
    assert any("rnnsearch train" in c for c in processes_in(out).values())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == EXIT_INTERRUPTED, proc.stderr.read()[-2000:]
    time.sleep(3)
    assert processes_in(out) == {}
    assert not list((out / ".snakemake" / "locks").glob("*"))
    assert "Snakemake and its jobs stopped" in proc.stderr.read()
