"""A training job that stops and runs again under Snakemake: its log keeps every job's part (Snakemake deletes a
job's `log:` before it runs it), and a failure that running again repeats is not retried. The Slurm side of both is
in test_slurm_timelimit.py (time limits: resubmitted, resumed) and test_slurm.py (a repeated failure: not run
again)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from .conftest import dag_copy
from .conftest import run as sh

BIN = Path(sys.executable).parent
MODEL = "results/models/rnnsearch-50/replicate1"
pytestmark = pytest.mark.slow


def _checkpoint_update(ws: Path) -> int:
    try:
        return torch.load(ws / MODEL / "checkpoint.pt", weights_only=True)["update"]
    except (FileNotFoundError, RuntimeError, EOFError):  # not there yet, or being replaced
        return -1


def _interrupt_after_a_checkpoint(ws: Path, past: int) -> int:
    """`snakemake` of the model, Ctrl-C (SIGINT to its process group) once the training has saved a checkpoint past update `past`;
    that checkpoint's update."""
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(ws)}  # as conftest.run
    proc = subprocess.Popen([str(BIN / "snakemake"), "--cores", "1", f"{MODEL}/model.pt"], cwd=ws, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while _checkpoint_update(ws) <= past:
        assert proc.poll() is None and time.time() < deadline, "the training ended before a checkpoint"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C on a terminal: to Snakemake and its job, one process group
    assert proc.wait(timeout=120) != 0
    return _checkpoint_update(ws)


BUDGET = 120  # updates: each Ctrl-C follows a checkpoint (every 20), the first past the tiny DAG's 12


def test_a_training_interrupted_twice_keeps_its_whole_log(tiny_dag: Path, tmp_path: Path):
    """A larger budget than the finished training's (lr_decay: the finished run is moved aside, the training starts
    again), stopped twice by Ctrl-C, then finished: `train.log` beside the model holds all three jobs, the warning
    about the run moved aside included; Snakemake's `log:` holds the last job's part."""
    ws = dag_copy(tiny_dag, tmp_path / "ws", {"models": {"rnnsearch-50": {"max_updates": BUDGET}},
                                              "train": {"checkpoint_every": 20, "log_every": 20}})
    first = _interrupt_after_a_checkpoint(ws, _checkpoint_update(ws))  # past the finished run's
    second = _interrupt_after_a_checkpoint(ws, first)
    sh(["snakemake", "--cores", "1", f"{MODEL}/model.pt"], ws)
    history = (ws / MODEL / "train.log").read_text()
    parts = history.split("==== job ")[1:]  # each job's first line and what it logged, then its last line
    jobs, ends = parts[0::2], [p.split("\n")[0] for p in parts[1::2]]
    assert len(jobs) == len(ends) == 4, history  # the tiny DAG's training, then this test's three jobs
    assert [e.endswith(f"ended: exit status {s} ====") for e, s in zip(ends, (0, 75, 75, 0))] == [True] * 4, ends
    assert "replaced-" in jobs[1], jobs[1]  # the finished run of 12 updates, moved aside
    for job, update in zip(jobs[1:3], (first, second)):
        assert f"signal 2 at update {update}: checkpoint saved" in job, job
    assert f"resuming from {MODEL}/checkpoint.pt at update {first}" in jobs[2]
    assert f"resuming from {MODEL}/checkpoint.pt at update {second}" in jobs[3]
    assert f"update {BUDGET}/{BUDGET}" in jobs[3]
    last = (ws / "results/logs/train/rnnsearch-50/replicate1.log").read_text()  # Snakemake's: the last job only
    assert f"at update {second}" in last and "checkpoint saved" not in last


def test_a_failure_that_repeats_itself_runs_once(tiny_dag: Path, tmp_path: Path):
    """A setting that cannot take effect (CUDA graphs on the CPU) stops the training with exit status 2; with
    `cluster.train.attempts: 3`, Snakemake runs it once (no time limit here to chain through), and a retry of it
    (Slurm's next attempt) stops at once, saying why."""
    ws = dag_copy(tiny_dag, tmp_path / "ws", {"train": {"cuda_graphs": True}, "cluster": {"train": {"attempts": 3}}})
    failed = sh(["snakemake", "--cores", "1", f"{MODEL}/model.pt"], ws, check=False)
    assert failed.returncode != 0
    assert "Trying to restart job" not in failed.stdout + failed.stderr
    history = (ws / MODEL / "train.log").read_text()
    assert history.count("==== job ") == 4 and history.rstrip().endswith("ended: exit status 2 ====")  # tiny DAG's, this
    assert history.count("train.cuda_graphs: true, but") == 1
    # its next attempt (as under Slurm, `--attempt 2` of the same command) stops at once, saying why
    planned = sh(["snakemake", "-n", "-p", "--forcerun", "train", f"{MODEL}/model.pt"], ws).stdout
    command = re.search(r"rnnsearch train --model rnnsearch-50 --replicate 1 .*", planned).group(0)
    assert " --attempt 1 " in command, command
    retry = sh(command.replace(" --attempt 1 ", " --attempt 2 ").split(), ws, check=False)
    assert retry.returncode == 2
    history = (ws / MODEL / "train.log").read_text()
    assert "attempt 2 of this training not run: the last attempt failed with exit status 2" in history
    assert history.count("train.cuda_graphs: true, but") == 1, history  # not run again
