"""Checkpoints that survive being killed: SIGTERM saves and exits 75, SIGKILL loses at most the updates since
the last checkpoint, and a rerun ends with exactly the parameters of an uninterrupted run (CPU, fixed seed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from rnnsearch.settings import VocabConfig
from rnnsearch import config as cfg
from rnnsearch.checkpoint import save_checkpoint
from rnnsearch.data.binarized import run_binarize
from rnnsearch.data.corpus import synthetic
from rnnsearch.data.text import run_tokenize
from rnnsearch.data.vocab import run_vocab
from rnnsearch.model import build_model
from rnnsearch.textio import EXIT_INTERRUPTED, InputError, atomic_path
from rnnsearch.training.state import RESUME_KEYS, resume_mismatch
from rnnsearch.settings import learning_rate
from rnnsearch.training.optimizers import make_optimizer
from rnnsearch.training.train import TrainFiles, train as train_model

from .conftest import REPO, built_once
from .forks import rnnsearch

UPDATES = 100


@pytest.fixture(scope="session")  # shared with test_failures, test_flags and test_user_text
def data(tmp_path_factory) -> Path:
    """A tokenized synthetic corpus, its vocabularies and binarized training set, and params.yaml for a training
    of UPDATES updates; made once per test run (conftest.built_once)."""
    return built_once(tmp_path_factory, "resume", _make_data)


def _make_data(d: Path, seed: int = 3) -> None:
    synthetic.write_corpus(synthetic.generate(seed, 1200, 30, 10, 60, 20, 20, 20, 25), d / "raw")
    for split in ("train", "dev"):
        for lang in ("en", "fr"):
            run_tokenize(d / f"raw/{split}.{lang}", d / f"{split}.{lang}", lang, False)
    run_vocab([d / "train.en"], [d / "train.fr"], d / "vocab.en.tsv", d / "vocab.fr.tsv", VocabConfig("shortlist", 150, 150))
    run_binarize(d / "train.en", d / "train.fr", d / "vocab.en.tsv", d / "vocab.fr.tsv", str(d / "train"))
    params = cfg.load_params([REPO / "params.yaml", REPO / "tests" / "configs" / "tiny.yaml"])
    params["train"].update(max_updates=UPDATES, checkpoint_every=10, log_every=10, validate_every=25, keep_checkpoints=2)
    params["models"]["rnnsearch-50"]["max_updates"] = UPDATES
    (d / "params.yaml").write_text(yaml.safe_dump(params))


def train_cmd(d: Path, out: Path, params: Path | None = None) -> list[str]:
    params = params or d / "params.yaml"
    return [sys.executable, "-m", "rnnsearch.cli", "train", "--params", str(params), "--model", "rnnsearch-50",
            "--src-train", str(d / "train.en"), "--tgt-train", str(d / "train.fr"), "--src-dev", str(d / "dev.en"),
            "--tgt-dev", str(d / "dev.fr"), "--src-vocab", str(d / "vocab.en.tsv"),
            "--tgt-vocab", str(d / "vocab.fr.tsv"), "--binarized", str(d / "train"), "--out-dir", str(out),
            "--log", str(out / "train.log")]  # the pipeline's way: the binarize stage's files, memory-mapped


def train(d: Path, out: Path, params: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """`rnnsearch train` as train_cmd gives it, run by the command line's fork server (tests/forks.py); a failure
    raises, naming the end of its stderr, unless `check` is False."""
    proc = rnnsearch(*train_cmd(d, out, params)[3:])
    assert not check or proc.returncode == 0, proc.stderr[-3000:]
    return proc


def weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)["model"]


@pytest.fixture(scope="session")
def reference(data: Path, tmp_path_factory) -> Path:
    """The uninterrupted training of `data`, once per test run."""
    out = built_once(tmp_path_factory, "resume_reference",
                     lambda out: subprocess.run(train_cmd(data, out), check=True, capture_output=True))
    return out / "model.pt"


def interrupt(data: Path, out: Path, sig: int, params: Path | None = None) -> int:
    """Start a training, wait for its first checkpoint, send `sig`, return the exit status."""
    proc = subprocess.Popen(train_cmd(data, out, params), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (out / "checkpoint.pt").exists():
        assert proc.poll() is None and time.time() < deadline, "training ended before its first checkpoint"
        time.sleep(0.05)
    os.kill(proc.pid, sig)
    return proc.wait(timeout=120)


@pytest.mark.slow
def test_a_job_signalled_again_and_again_still_ends_its_log_with_its_exit_lines(data: Path, tmp_path: Path):
    """Slurm's time limit: SIGTERM, and more of them while the job saves and exits (to the batch shell and the job
    step alike). train.log, the history of every job, must still end with this job's exit lines, which the retry
    policy reads (a job that ends without them counts as killed without a word)."""
    out = tmp_path / "signalled"
    proc = subprocess.Popen(train_cmd(data, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (out / "checkpoint.pt").exists():
        assert proc.poll() is None and time.time() < deadline, "training ended before its first checkpoint"
        time.sleep(0.05)
    while proc.poll() is None:  # a signal every 2 ms until it exits
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.002)
    assert proc.returncode == EXIT_INTERRUPTED
    lines = (out / "train.log").read_text().splitlines()
    assert re.search(r"rnnsearch train: exit status 75 after [\d.]+ s; peak RSS", lines[-2]), lines[-3:]
    assert lines[-1].endswith("ended: exit status 75 ===="), lines[-3:]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_interrupted_training_resumes_to_the_same_parameters(data: Path, reference: Path, sig):
    out = data / f"killed-{sig}"
    status = interrupt(data, out, sig)
    if sig == signal.SIGTERM:
        assert status == EXIT_INTERRUPTED
        assert "checkpoint saved" in (out / "train.log").read_text()
    else:
        assert status == -signal.SIGKILL
    stopped_at = torch.load(out / "checkpoint.pt", weights_only=True)["update"]
    assert 10 <= stopped_at < UPDATES and not (out / "model.pt").exists()
    train(data, out)
    assert f"resuming from {out / 'checkpoint.pt'} at update {stopped_at}" in (out / "train.log").read_text()
    final, ref = weights(out / "model.pt"), weights(reference)
    assert json.loads((out / "train_stats.json").read_text())["updates"] == UPDATES
    assert all(torch.equal(final[k], ref[k]) for k in ref), "resumed run differs from the uninterrupted one"
    assert (out / "validation.tsv").read_text() == (reference.parent / "validation.tsv").read_text()  # same selection
    assert sorted(p.name for p in out.glob("*.pt")) == sorted(p.name for p in reference.parent.glob("*.pt"))


@pytest.mark.slow
def test_a_training_on_the_text_ends_with_the_parameters_of_one_on_its_binarized_files(data: Path, reference: Path,
                                                                                      tmp_path: Path):
    """Without --binarized the text is read and encoded in memory: the same minibatches, the same model."""
    _train_in_process(data, tmp_path)
    final, ref = weights(tmp_path / "model.pt"), weights(reference)
    assert all(torch.equal(final[k], ref[k]) for k in ref)
    assert (tmp_path / "validation.tsv").read_text() == (reference.parent / "validation.tsv").read_text()


@pytest.mark.cuda
@pytest.mark.parametrize("graphs", ["auto", False])
def test_a_training_interrupted_on_cuda_resumes_to_the_uninterrupted_parameters(data: Path, tmp_path: Path, graphs):
    """SIGTERM on the GPU and a resumed run there against an uninterrupted GPU run, from CUDA graphs (the default
    there: the resumed run trains each shape's first minibatch eagerly where the other replays) and eagerly: the
    same parameters, bit for bit, where every operation of the update is deterministic on CUDA; the message
    gives the largest difference otherwise."""
    params = yaml.safe_load((data / "params.yaml").read_text())
    params["train"].update(device="cuda", cuda_graphs=graphs)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    ref, out = tmp_path / "uninterrupted", tmp_path / "killed"
    subprocess.run(train_cmd(data, ref, tmp_path / "params.yaml"), check=True, capture_output=True)
    graphed = re.search(r"updates replayed from (\d+) CUDA graphs", (ref / "train.log").read_text())
    assert bool(graphed and int(graphed[1]) > 0) == (graphs == "auto")  # auto: graphs on a GPU
    assert interrupt(data, out, signal.SIGTERM, tmp_path / "params.yaml") == EXIT_INTERRUPTED
    stopped_at = torch.load(out / "checkpoint.pt", weights_only=True)["update"]
    subprocess.run(train_cmd(data, out, tmp_path / "params.yaml"), check=True, capture_output=True)
    assert f"resuming from {out / 'checkpoint.pt'} at update {stopped_at}" in (out / "train.log").read_text()
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["updates"] == UPDATES and stats["device"] == torch.cuda.get_device_name()
    final, want = weights(out / "model.pt"), weights(ref / "model.pt")
    differences = {k: (final[k].float() - want[k].float()).abs().max().item() for k in want}
    assert max(differences.values()) == 0, f"resumed run differs from the uninterrupted one: {differences}"


def _train_in_process(params_dir: Path, out: Path, data: Path | None = None):
    """train on the fixture's corpus with the params.yaml in `params_dir`."""
    data = data or params_dir
    params = yaml.safe_load((params_dir / "params.yaml").read_text())
    files = TrainFiles(*(str(data / f) for f in ("train.en", "train.fr", "dev.en", "dev.fr", "vocab.en.tsv",
                                                 "vocab.fr.tsv")))
    return train_model("rnnsearch-50", cfg.model_config(params, "rnnsearch-50"),
                       cfg.train_config(params, "rnnsearch-50"), params["seed"], files, out)


def test_checkpoint_of_another_config_is_refused_with_the_difference(data: Path, tmp_path: Path):
    params = yaml.safe_load((data / "params.yaml").read_text())
    other = {**cfg.model_config(params, "rnnsearch-50"), "n": 8}
    model = build_model(other, 153, 153)
    config = {"name": "rnnsearch-50", "model": other, "train": params["train"], "seed": params["seed"],
              "src_vocab": 153, "tgt_vocab": 153}
    optimizer = make_optimizer(model.parameters(), params["train"]["optimizer"], params["train"]["lr"])
    save_checkpoint(tmp_path / "checkpoint.pt", model, optimizer, 3, {"epoch": 0, "offset": 0, "in_block": 3}, config)
    with pytest.raises(InputError, match=r"checkpoint.pt: written for another configuration \(model.n: 8 in the "
                                         r"checkpoint, 16 now\); delete it"):
        _train_in_process(data, tmp_path)


def test_cuda_graphs_true_on_the_cpu_stops_the_training_before_it_starts(data: Path, tmp_path: Path):
    """train.cuda_graphs: true where graphs cannot run is an error naming the key, not an eager training."""
    params = yaml.safe_load((data / "params.yaml").read_text())
    params["train"].update(device="cpu", cuda_graphs=True)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(InputError, match=r"train.cuda_graphs: true, but a CUDA graph needs a CUDA device, and this "
                                         r"model is on the CPU; set it to auto or false"):
        _train_in_process(tmp_path, tmp_path / "out", data)
    assert not (tmp_path / "out" / "checkpoint.pt").exists()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_checkpoint_is_a_clear_error(data: Path, reference: Path, tmp_path: Path, damage: str):
    good = reference.read_bytes()
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint" if damage == "garbage" else good[: len(good) // 2])
    proc = train(data, tmp_path, check=False)
    assert proc.returncode == 2
    what = "not an rnnsearch checkpoint (not a file written by torch.save)" if damage == "garbage" else \
        "a damaged or truncated checkpoint (its zip archive has no end)"
    assert f"{tmp_path / 'checkpoint.pt'}: {what}; expected model.pt or checkpoint.pt of `rnnsearch train`" in \
        proc.stderr
    assert "Traceback" not in proc.stderr and "weights_only" not in proc.stderr


def test_an_interrupted_save_leaves_no_file(tmp_path: Path):
    target = tmp_path / "checkpoint.pt"
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half a checkpoint")
            raise KeyboardInterrupt  # e.g. SIGINT in the middle of torch.save
    assert list(tmp_path.iterdir()) == []


def test_the_shipped_model_records_the_runs_train_stats_records(data: Path, reference: Path):
    """model.pt is the best validated state, saved mid-run: its run records are rewritten at the end to the whole
    training's (they ended at the save, `ended_by: None`), the selected update and weights kept."""
    saved = torch.load(reference, weights_only=True)
    stats = json.loads((reference.parent / "train_stats.json").read_text())
    assert saved["progress"]["runs"] == stats["runs"] and stats["runs"][-1]["ended_by"] == "update budget"
    assert saved["update"] == stats["selected_update"] and stats["runs"][-1]["end"] == UPDATES


def test_training_validates_keeps_the_best_and_the_last_checkpoints(data: Path, reference: Path):
    out = reference.parent
    stats = json.loads((out / "train_stats.json").read_text())
    rows = [line.split("\t") for line in (out / "validation.tsv").read_text().splitlines()]
    assert rows[0] == ["update", "epoch", "dev_nll", "dev_nll_per_word", "dev_bleu"]
    assert [int(r[0]) for r in rows[1:]] == [25, 50, 75, 100]  # every 25 updates and at the end
    best = max(rows[1:], key=lambda r: (float(r[4]), -float(r[2])))  # dev BLEU, then dev NLL
    assert stats["selected_update"] == int(best[0]) and stats["dev_bleu"] == float(best[4])
    assert torch.load(out / "model.pt", weights_only=True)["update"] == stats["selected_update"]
    best = f"best-{stats['selected_update']:09d}.pt"  # model.pt is a hard link to it
    assert sorted(p.name for p in out.glob("*.pt")) == sorted(["checkpoint-000000080.pt", "checkpoint-000000090.pt",
                                                               "checkpoint.pt", best, "model.pt"])
    assert (out / best).stat().st_ino == (out / "model.pt").stat().st_ino
    final = torch.load(out / "checkpoint.pt", weights_only=True)
    assert final["update"] == UPDATES and final["progress"]["finished"]  # the final state, kept
    log = (out / "train.log").read_text()
    assert "rnnsearch-50 sample 3" in log and "    reference: " in log and "dev NLL/sent" in log
    assert "parameters" in log and "git " in log


@pytest.mark.slow
def test_a_finished_training_whose_outputs_were_deleted_completes_without_training(data: Path, reference: Path,
                                                                                 tmp_path: Path):
    """Snakemake deletes the outputs of a job Slurm killed at its time limit after the training had finished: the
    next attempt must rewrite them from the kept final state, not train again; other settings start afresh."""
    out = tmp_path / "out"
    shutil.copytree(reference.parent, out)
    for f in ("model.pt", "train_stats.json", "learning_curve.tsv", "validation.tsv"):
        (out / f).unlink()
    train(data, out)
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["updates"] == UPDATES and stats["runs"][-1]["start"] == stats["runs"][-1]["end"] == UPDATES
    completed, ref = (torch.load(f, weights_only=True) for f in (out / "model.pt", reference))
    assert all(torch.equal(completed["model"][k], ref["model"][k]) for k in ref["model"])  # the same selected state
    assert completed["progress"]["runs"] == stats["runs"]  # with this second run's record
    assert (out / "validation.tsv").read_text() == (reference.parent / "validation.tsv").read_text()

    params = yaml.safe_load((data / "params.yaml").read_text())
    params["train"]["lr"] = 0.01  # another trajectory: the finished checkpoint is not resumed, nor refused
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    train(data, out, tmp_path / "params.yaml")
    stats = json.loads((out / "train_stats.json").read_text())
    assert [(r["start"], r["end"]) for r in stats["runs"]] == [(0, UPDATES)]
    assert "holds a finished training of another configuration (train.lr: 0.004 in the checkpoint, 0.01 now)" in (
        out / "train.log").read_text()


@pytest.mark.slow
def test_a_finished_training_on_other_text_is_moved_aside_and_trained_again(data: Path, reference: Path,
                                                                             tmp_path: Path):
    """Another text in a checkout with finished models (data.source switched, say): the same settings and
    shortlist sizes, other vocabularies. As for any finished training of other settings (docs/training.md), it is
    moved to replaced-<time>/ with a warning naming the difference, and the model is trained afresh on the new
    text (on 73035bc the training stopped: "not the src vocabulary … was trained with")."""
    other = tmp_path / "other"
    other.mkdir()
    _make_data(other, seed=4)
    assert (other / "vocab.en.tsv").read_text() != (data / "vocab.en.tsv").read_text()
    out = tmp_path / "out"
    shutil.copytree(reference.parent, out)
    proc = train(other, out)
    assert "holds a finished training of another configuration (" in proc.stderr
    assert f"vocab.en.tsv: not the src vocabulary {out / 'checkpoint.pt'} was trained with" in proc.stderr
    (aside,) = out.glob("replaced-*")
    assert (aside / "model.pt").read_bytes() == reference.read_bytes()
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["updates"] == UPDATES and [(r["start"], r["end"]) for r in stats["runs"]] == [(0, UPDATES)]
    assert weights(out / "model.pt").keys() == weights(reference).keys()


def test_a_lowered_max_updates_trains_again_to_the_new_budget(data: Path, reference: Path, tmp_path: Path, caplog):
    """An ablation that lowers max_updates below a finished training's (`dvc exp run -S
    models.<m>.max_updates=20`, its folder kept by DVC) gets a model of 20 updates, not the old one; the finished
    training is moved aside, not deleted."""
    out = tmp_path / "out"
    shutil.copytree(reference.parent, out)
    params = yaml.safe_load((data / "params.yaml").read_text())
    params["models"]["rnnsearch-50"]["max_updates"] = 20
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    with caplog.at_level("WARNING", logger="rnnsearch.train"):
        stats = _train_in_process(tmp_path, out, data=data)
    assert stats["updates"] == 20 and [(r["start"], r["end"]) for r in stats["runs"]] == [(0, 20)]
    assert f"train.max_updates: 20 now, the checkpoint is at update {UPDATES}" in caplog.text
    (aside,) = out.glob("replaced-*")
    assert (aside / "model.pt").read_bytes() == reference.read_bytes()


def test_docs_max_updates_rules_raising_a_finished_training_and_lowering_an_unfinished_one(data: Path,
                                                                                        reference: Path,
                                                                                        tmp_path: Path):
    """docs/training.md, "Changing max_updates", with the default lr_decay 0.5. Raised over a finished training
    (UPDATES → 150): moved aside and trained from scratch, since the old schedule fell from update 51. Lowered
    under an unfinished one (a checkpoint at update 90, budget 60): exit 2 naming both, the folder untouched."""
    params = yaml.safe_load((data / "params.yaml").read_text())
    assert params["train"]["lr_decay"] == 0.5
    raised = tmp_path / "raised"
    shutil.copytree(reference.parent, raised)
    params["models"]["rnnsearch-50"]["max_updates"] = 150
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    train(data, raised, tmp_path / "params.yaml")
    stats = json.loads((raised / "train_stats.json").read_text())
    assert stats["updates"] == 150 and [(r["start"], r["end"]) for r in stats["runs"]] == [(0, 150)]
    (aside,) = raised.glob("replaced-*")
    assert (aside / "model.pt").read_bytes() == reference.read_bytes()
    assert f"train.max_updates: {UPDATES} in the checkpoint, 150 now" in (raised / "train.log").read_text()

    lowered = tmp_path / "lowered"
    lowered.mkdir()
    shutil.copy(reference.parent / "checkpoint-000000090.pt", lowered / "checkpoint.pt")  # a run stopped at update 90
    params["models"]["rnnsearch-50"]["max_updates"] = 60
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    proc = train(data, lowered, tmp_path / "params.yaml", check=False)
    assert proc.returncode == 2 and "train.max_updates: 60 now, the checkpoint is at update 90" in proc.stderr
    assert sorted(p.name for p in lowered.iterdir()) == ["checkpoint.pt", "train.log"]
    assert (lowered / "checkpoint.pt").read_bytes() == (reference.parent / "checkpoint-000000090.pt").read_bytes()


def test_max_updates_forbids_resuming_only_where_the_step_sizes_depend_on_it():
    """With lr_decay, max_updates sets the step size of every update past the start of the fall: a checkpoint
    resumes under another max_updates only while both schedules still hold the full lr."""
    def config(max_updates: int, lr_decay: float) -> dict:
        train = {k: 1 for k in RESUME_KEYS} | {"max_updates": max_updates, "lr_decay": lr_decay}
        return {"seed": 1, "src_vocab": 9, "tgt_vocab": 9, "model": {"n": 4}, "train": train}

    assert resume_mismatch(config(100, 0.5), config(200, 0.5), 50) == []  # full lr up to update 50 in both
    assert resume_mismatch(config(100, 0.5), config(200, 0.5), 51) == [
        "train.max_updates: 100 in the checkpoint, 200 now, and the step sizes of its 51 updates depend on it "
        "(train.lr_decay)"]
    assert resume_mismatch(config(200, 0.5), config(100, 0.5), 60) != []  # the new schedule falls from 51
    assert resume_mismatch(config(100, 0.0), config(300, 0.0), 100) == []  # the paper: extend a training
    assert resume_mismatch(config(300, 0.0), config(100, 0.0), 150) == [
        "train.max_updates: 100 now, the checkpoint is at update 150"]


def test_a_checkpoint_of_another_coverage_loss_is_not_resumed():
    """train.coverage_loss changes what every update minimises: a checkpoint of another λ is not resumed (one
    written before the key existed is λ = 0, the paper's loss)."""
    def config(**train) -> dict:
        return {"seed": 1, "src_vocab": 9, "tgt_vocab": 9, "model": {"n": 4},
                "train": {k: 1 for k in RESUME_KEYS} | {"max_updates": 9, "lr_decay": 0.0} | train}

    assert resume_mismatch(config(coverage_loss=0.0), config(coverage_loss=1.0), 5) == [
        "train.coverage_loss: 0.0 in the checkpoint, 1.0 now"]
    older = config()
    del older["train"]["coverage_loss"]
    assert resume_mismatch(older, config(coverage_loss=0.0), 5) == []
    assert resume_mismatch(older, config(coverage_loss=0.5), 5) != []


def test_patience_stops_training_early(data: Path, tmp_path: Path):
    params = yaml.safe_load((data / "params.yaml").read_text())
    params["models"]["rnnsearch-50"].update(patience=1, max_updates=10_000)
    params["train"].update(validate_every=5, lr=0.0)  # weights that never change cannot improve dev BLEU
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    stats = _train_in_process(tmp_path, tmp_path / "out", data=data)
    assert stats["early_stopped"] and stats["updates"] == 10 and stats["selected_update"] == 5


def test_the_second_seed_preset_trains_resumes_and_translates(data: Path, tmp_path: Path):
    from rnnsearch.checkpoint import load_model
    from rnnsearch.decoding.search import translate_ids

    params = yaml.safe_load((data / "params.yaml").read_text())
    params["models"]["rnnsearch-50"].update(arch="luong", max_updates=20)
    params["train"].update(validate_every=10, checkpoint_every=10)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    stats = _train_in_process(tmp_path, tmp_path / "out", data=data)
    assert stats["arch"] == "luong" and stats["updates"] == 20
    model, config = load_model(tmp_path / "out" / "model.pt")
    assert config["model"]["cell"] == "lstm" and config["model"]["input_feeding"] is True
    hyps = translate_ids(model, [[5, 6, 7, 1], [8, 1]], beam=3, batch_size=2, max_len_a=1.5, max_len_b=3)
    assert all(h.tokens and h.alpha is not None for h in hyps)
    # a checkpoint of the GRU preset is not resumed as the LSTM one: the difference is named
    save_checkpoint(tmp_path / "out" / "checkpoint.pt", *_gru_state(params))
    with pytest.raises(InputError, match=r"model.arch: 'rnnsearch' in the checkpoint, 'luong' now; .*model.cell: 'gru' in "
                                         r"the checkpoint, 'lstm' now"):
        _train_in_process(tmp_path, tmp_path / "out", data=data)


def _gru_state(params: dict):
    gru = cfg.model_config({**params, "models": {"m": {"arch": "rnnsearch", "train_max_len": 50}}}, "m")
    model = build_model(gru, 153, 153)
    config = {"name": "rnnsearch-50", "model": gru, "train": params["train"], "seed": params["seed"],
              "src_vocab": 153, "tgt_vocab": 153}
    optimizer = make_optimizer(model.parameters(), params["train"]["optimizer"], params["train"]["lr"])
    return model, optimizer, 3, {"epoch": 0, "offset": 0, "in_block": 3}, config


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["rnnsearch", "luong"])
def test_bf16_autocast_trains_on_the_cpu_as_fp32_does(data: Path, tmp_path: Path, arch: str, caplog):
    """train.precision: bf16 on the CPU (the fused GRU recurrences and the plain LSTM path): the run says so, keeps
    float32 weights, and its training and dev NLL after 100 updates (the training NLL falls by about a tenth, 135
    to 117-120; a bf16 run that did not learn would be 13 % off) stay within 2 % of the fp32 run's."""
    from rnnsearch.checkpoint import load_model

    stats, logs = {}, {}
    for precision in ("fp32", "bf16"):
        params = yaml.safe_load((data / "params.yaml").read_text())
        params["models"]["rnnsearch-50"].update(arch=arch, max_updates=100)
        params["train"].update(precision=precision, validate_every=100, checkpoint_every=100)
        (tmp_path / precision).mkdir()
        (tmp_path / precision / "params.yaml").write_text(yaml.safe_dump(params))
        caplog.clear()
        with caplog.at_level("INFO", logger="rnnsearch"):
            stats[precision] = _train_in_process(tmp_path / precision, tmp_path / precision / "out", data=data)
        logs[precision] = caplog.text
    assert "(bf16 autocast)" in logs["bf16"] and "(bf16 autocast)" not in logs["fp32"]
    model, _ = load_model(tmp_path / "bf16" / "out" / "model.pt")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    for key in ("train_nll", "dev_nll"):
        assert stats["bf16"][key] == pytest.approx(stats["fp32"][key], rel=0.02), key
    assert stats["bf16"]["train_nll"] != stats["fp32"]["train_nll"]  # the products did run in bf16


def test_learning_rate_holds_then_falls_linearly_over_the_last_fraction_of_the_updates():
    base = cfg.train_config(cfg.load_params([cfg.REPO / "params.yaml"]), "rnnsearch-50")
    decaying = base.__class__(**{**base.__dict__, "lr": 0.004, "lr_decay": 0.5, "max_updates": 10})
    assert [learning_rate(decaying, u) for u in range(1, 11)] == pytest.approx(
        [0.004] * 5 + [0.004 * k / 6 for k in (5, 4, 3, 2, 1)])
    constant = base.__class__(**{**decaying.__dict__, "lr_decay": 0.0})
    assert {learning_rate(constant, u) for u in range(1, 11)} == {0.004}

