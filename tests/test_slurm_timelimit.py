"""A training of two Slurm tasks through the shipped profile, killed at its Slurm time limit, that Snakemake
resubmits and that resumes, job after job, to its full update budget.

Needs a running Slurm (`workflow/slurm/local-cluster.sh` starts a one-node cluster; `.ci/run` does); skips,
saying so, where there is none.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from .conftest import dag_copy, overlay_params, processes_in
from .slurm_cluster import (SLURM, SQUEUE, job_record, slurm, slurm_logs, snakemake,  # noqa: F401 (slurm)
                            snakemake_started, submissions)

pytestmark = pytest.mark.slow


MODEL = "results/models/rnnsearch-50/replicate1"
OUT = "snakemake.out"  # what Snakemake prints, in the workspace


def _training_tasks(ws: Path) -> list[int]:
    """The process ids of the trainings running in `ws` (`rnnsearch train`, one per Slurm task; not srun or the
    shell that started them, whose command lines name it too)."""
    found = []
    for pid, command in processes_in(ws).items():
        try:
            if " train " in command and Path(f"/proc/{pid}/comm").read_text().strip() == "rnnsearch":
                found.append(pid)
        except OSError:  # ended meanwhile
            continue
    return found


def _stopped_once(ws: Path, run: subprocess.Popen) -> dict:
    """The checkpoint the first Slurm job saved when its time limit stopped it (its last run ended by SIGTERM),
    watched for while Snakemake runs. Once the job's first checkpoint is saved (update 50), its two tasks are
    paused (SIGSTOP) until the time limit, where Slurm sends the job's processes SIGCONT and SIGTERM (as to any
    job at its limit): the same stop, without the minute of training on both CPUs that the other tests share."""
    checkpoint, seen, paused, deadline = ws / MODEL / "checkpoint.pt", None, False, time.time() + 600
    while True:
        assert run.poll() is None and time.time() < deadline, (ws / OUT).read_text()[-3000:]
        stamp = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
        if stamp and stamp != seen:  # saved anew (atomically: a rename)
            seen, saved = stamp, torch.load(checkpoint, weights_only=True)
            ended_by = saved["progress"]["runs"][-1]["ended_by"]
            if ended_by == "signal 15":
                return saved
            if not paused and ended_by is None:  # saved by a running training
                tasks = _training_tasks(ws)
                assert len(tasks) == 2, tasks
                for pid in tasks:
                    os.kill(pid, signal.SIGSTOP)
                paused = True
        time.sleep(0.5)


def test_a_training_of_two_tasks_past_its_time_limit_is_resubmitted_and_resumes(tmp_path_factory, tiny_dag: Path):
    """train.processes: 2 makes the training one Slurm job of two tasks, started by srun, training data-parallel
    (gloo: the node's two CPUs). Slurm's time limit (1 minute) stops a training that needs more (a budget of a
    million updates): SIGTERM to both tasks, checkpoint, exit 75; Snakemake resubmits it (`cluster.train.attempts`)
    and the new job resumes. As soon as the first job's checkpoint is saved, the test sets the budget 50 updates
    past it (a budget may change between a training and its resumption where lr_decay is 0: training/state.py),
    long before Snakemake's next poll of sacct sees the job stopped: the resubmitted job resumes and finishes, 2
    jobs whatever the rate (a third attempt is allowed, should the second job start before the budget is set). A
    job killed just after it finished (while Snakemake wraps up) is completed by the next one without training.
    The data stages are the tiny DAG's, already built."""
    ws = dag_copy(tiny_dag, tmp_path_factory.mktemp("timelimit"), {
        "cluster": {"train": {"runtime": 1, "attempts": 3}},  # no GPU: the node's one GPU is not one per task
        "models": {"rnnsearch-50": {"max_updates": 1_000_000}},
        # lr_decay 0 (the paper's): the step sizes do not depend on the budget, which the test then changes
        "train": {"processes": 2, "checkpoint_every": 50, "log_every": 500, "validate_every": 2000, "lr_decay": 0}})
    model = f"{MODEL}/model.pt"
    planned = snakemake(ws, "-n", model).stdout
    assert "rule train:" in planned and "rule tokenize" not in planned, planned  # only the training is to run
    with open(ws / OUT, "w") as out:
        run = snakemake_started(ws, *SLURM, model, stdout=out)
    try:
        updates = _stopped_once(ws, run)["update"] + 50  # a few seconds of training at any rate seen here
        overlay_params(ws, {"models": {"rnnsearch-50": {"max_updates": updates}}})
        run.wait(timeout=900)
    finally:
        run.kill()
    assert run.returncode == 0, (ws / OUT).read_text()[-3000:]
    stats = json.loads((ws / MODEL / "train_stats.json").read_text())
    runs = stats["runs"]  # the training's own record of the jobs that worked on it
    assert stats["updates"] == updates and 2 <= len(runs) <= 3, runs
    assert runs[0]["start"] == 0 and runs[-1]["end"] == updates and runs[-1]["ended_by"] == "update budget"
    assert runs[0]["ended_by"] == "signal 15" and runs[0]["end"] < updates, runs  # stopped in training
    assert [r["processes"] for r in runs] == [2] * len(runs), runs
    for before, after in zip(runs, runs[1:]):
        # a job killed after it had finished (while Snakemake wrapped up) is completed by the next without training
        if before["end"] == updates:
            assert after["start"] == after["end"] == updates, runs
            continue
        assert before["ended_by"] == "signal 15" and after["start"] == before["end"], runs
        record = job_record(before["slurm_job"])
        assert "JobState=TIMEOUT" in record, record  # Slurm's own record: killed at its time limit
    jobs = [job for job, rule, _ in submissions(ws) if rule == "train"]
    # each run a new Slurm job submitted by Snakemake, none lost (CI once lost two: jobs killed at their time limit
    # just after finishing, whose outputs Snakemake deleted; the next attempt then started from scratch)
    assert jobs == [r["slurm_job"] for r in runs], slurm_logs(ws, jobs)
    for job in jobs:
        record = job_record(job)
        assert re.search(r"NumTasks=2\b", record), record  # Slurm's own record of the job
    history = (ws / MODEL / "train.log").read_text()  # every job's part, in order (rnnsearch.jobs.history_log)
    assert [int(j) for j in re.findall(r"==== job (\d+) on ", history)][-len(jobs):] == [int(j) for j in jobs], history
    log = (ws / "results/logs/train/rnnsearch-50/replicate1.log").read_text()  # the last job's: each writes it anew
    assert f"Slurm job {jobs[-1]} on" in log and "data-parallel training: 2 processes (srun, gloo backend)" in log, log
    assert f"resuming from results/models/rnnsearch-50/replicate1/checkpoint.pt at update {runs[-1]['start']}" in log
    final = ws / MODEL / "checkpoint.pt"  # the final state, kept (see train.py)
    assert torch.load(final, weights_only=True)["progress"]["finished"]


def test_a_plain_scancel_stops_a_training_at_a_checkpoint_and_snakemake_without_a_resubmission(tmp_path_factory,
                                                                                               tiny_dag: Path):
    """docs/cluster.md's way to stop a training: `scancel <job>`. Slurm's SIGTERM makes the training save its
    checkpoint (within KillWait) and exit; Snakemake sees the job cancelled (sacct's 'CANCELLED by <uid>', which the
    executor plugin took for a running job, so that Snakemake waited forever: rnnsearch/slurm_plugin.py), names it,
    resubmits nothing although `attempts` allows it, and exits."""
    ws = dag_copy(tiny_dag, tmp_path_factory.mktemp("scancel"), {
        "cluster": {"train": {"runtime": 30, "attempts": 3}},
        "models": {"rnnsearch-50": {"max_updates": 1_000_000}},
        "train": {"checkpoint_every": 1_000_000, "log_every": 10, "validate_every": 1_000_000}})
    model = f"{MODEL}/model.pt"
    snakemake(ws, "-n", model)
    with open(ws / OUT, "w") as log:
        run = snakemake_started(ws, *SLURM, model, stdout=log)
    try:
        job = _first_job_training(ws, run)
        subprocess.run(["scancel", job], check=True)
        cancelled = time.time()
        run.wait(timeout=300)
    finally:
        run.kill()
    out, history = (ws / OUT).read_text(), ws / MODEL / "train.log"
    assert run.returncode != 0, out[-3000:]
    assert (f"SLURM job {job} (rule train, rnnsearch-50 replicate 1) was cancelled (scancel): not resubmitted"
            in out), out[-3000:]
    error = _error_block(out)
    assert "was cancelled (scancel)" in error and "--attempt 1 " in error, error  # the attempt that ran, not the 3
    assert "resume it. For further error details" in error, error  # that stops the retries; a space between
    assert time.time() - cancelled < 150, out[-3000:]  # KillWait (30 s) and a few polls of 10 s
    assert [j for j, rule, _ in submissions(ws) if rule == "train"] == [job], out[-3000:]  # no second attempt
    saved = torch.load(ws / MODEL / "checkpoint.pt", weights_only=True)
    assert saved["progress"]["runs"][-1]["slurm_job"] == job
    assert saved["progress"]["runs"][-1]["ended_by"] == "signal 15", saved["progress"]["runs"][-1]
    assert f"==== job {job} ended: exit status 75 ====" in history.read_text()


def _error_block(out: str) -> str:
    """Snakemake's first 'Error in rule train' block: the message, then the job's input, output, log and shell
    command, to its external_jobid line."""
    start = out.index("Error in rule train")
    return out[start:out.index("external_jobid", start)]


def _first_job_training(ws: Path, run: subprocess.Popen) -> str:
    """The Slurm job of the first training job in `ws` once it has logged an update (its history, train.log)."""
    history, deadline = ws / MODEL / "train.log", time.time() + 600
    while not re.search(r"==== job (\d+) on [^\n]*\n(?:.*\n)*.*rnnsearch-50 update \d+/",
                        history.read_text() if history.exists() else ""):
        assert run.poll() is None and time.time() < deadline, (ws / OUT).read_text()[-3000:]
        time.sleep(1)
    return re.findall(r"==== job (\d+) on ", history.read_text())[-1]


def test_a_training_signalled_with_scancel_is_named_and_resubmitted_to_resume(tmp_path_factory, tiny_dag: Path):
    """`scancel --signal=TERM <job>` (a signal, not a cancellation): the training saves its checkpoint and exits 75,
    which Slurm records as FAILED; the executor plugin said "SLURM status is: 'FAILED'. Reason: Unknown". Snakemake's
    error now names the signal, the update and the next attempt, its shell command shows the attempt that ran, and
    the resubmitted job resumes (the budget set just past the stop, as in the time-limit test). While the job runs,
    docs/cluster.md's `squeue` format shows its rule and model."""
    ws = dag_copy(tiny_dag, tmp_path_factory.mktemp("sigterm"), {
        "cluster": {"train": {"runtime": 30, "attempts": 2}},
        "models": {"rnnsearch-50": {"max_updates": 1_000_000}},
        "train": {"checkpoint_every": 1_000_000, "log_every": 10, "validate_every": 1_000_000, "lr_decay": 0}})
    with open(ws / OUT, "w") as out:
        run = snakemake_started(ws, *SLURM, f"{MODEL}/model.pt", stdout=out)
    try:
        job = _first_job_training(ws, run)
        queue = subprocess.run(["squeue", "--me", "-h", "-o", SQUEUE], capture_output=True, text=True).stdout
        assert re.search(rf"^\s*{job}\s+rule_train_wildcards_rnnsearch-50_1\s+RUNNING", queue, re.M), queue
        subprocess.run(["scancel", "--signal=TERM", job], check=True)
        saved, deadline = ws / MODEL / "checkpoint.pt", time.time() + 300
        while not (saved.exists() and torch.load(saved, weights_only=True)["progress"]["runs"][-1]["ended_by"]):
            assert run.poll() is None and time.time() < deadline, (ws / OUT).read_text()[-3000:]
            time.sleep(0.5)
        update = torch.load(saved, weights_only=True)["update"]
        overlay_params(ws, {"models": {"rnnsearch-50": {"max_updates": update + 20}}})
        run.wait(timeout=900)
    finally:
        run.kill()
    said = (ws / OUT).read_text()
    assert run.returncode == 0, said[-3000:]
    assert (f"SLURM job {job} (rule train, rnnsearch-50 replicate 1) stopped by SIGTERM at update {update}: "
            "checkpoint saved; resubmitted to resume, attempt 2 of 2. For further error details") in said, said[-3000:]
    error = _error_block(said)
    assert "stopped by SIGTERM" in error and "--attempt 1 " in error, error  # the attempt that ran
    jobs = [j for j, rule, _ in submissions(ws) if rule == "train"]
    assert len(jobs) == 2 and jobs[0] == job, said[-3000:]
    runs = json.loads((ws / MODEL / "train_stats.json").read_text())["runs"]
    assert [r["ended_by"] for r in runs] == ["signal 15", "update budget"] and runs[1]["start"] == update, runs


def test_a_training_over_its_memory_request_is_named_as_such_and_not_resubmitted(tmp_path_factory, tiny_dag: Path):
    """A training asking Slurm for 100 MB (`cluster.train.mem_mb`) is killed for its memory (local-cluster.sh's
    OverMemoryKill): Snakemake's output names the job, its request and its peak, where the executor plugin said
    "SLURM status is: 'FAILED'. Reason: Unknown" and Snakemake submitted the same request `attempts` times."""
    ws = dag_copy(tiny_dag, tmp_path_factory.mktemp("memory"), {
        "cluster": {"train": {"mem_mb": 100, "attempts": 3}}, "models": {"rnnsearch-50": {"max_updates": 1_000_000}}})
    run = snakemake(ws, *SLURM, f"{MODEL}/model.pt", check=False)
    out = run.stdout + run.stderr
    jobs = [j for j, rule, _ in submissions(ws) if rule == "train"]
    assert run.returncode != 0 and len(jobs) == 1, out[-3000:]
    found = re.search(rf"SLURM job {jobs[0]} \(rule train, rnnsearch-50 replicate 1\) was killed for its memory: it "
                      r"asked for mem_mb=100 "
                      r"\(Slurm's limit 100 MB\) and reached (\d+) MB", out)
    assert found and int(found.group(1)) > 100, out[-3000:]
    assert "--attempt 1 " in _error_block(out), _error_block(out)  # the attempt that ran
