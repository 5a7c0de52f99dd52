"""`snakemake --profile slurm` against a real Slurm: the tiny pipeline (two of its models) through the shipped
profile, with every job submitted to Slurm, training jobs holding a GPU, and the results of a local run (the
tiny_dag fixture); and a training of two Slurm tasks, killed at its Slurm time limit, that is resubmitted and
resumes, job after job, to its full update budget.

Needs a running Slurm (`workflow/slurm/local-cluster.sh` starts a one-node cluster; `.ci/run` does); skips,
saying so, where there is none.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from .conftest import dag_copy, repo_copy

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow
# The shipped profile installed as docs/cluster.md says (as `slurm`, in $HOME/.config/snakemake), plus what a cluster without
# accounting needs (squeue, not sacct) and quick polling.
SLURM = ["--profile", "slurm", "--slurm-status-command", "squeue",
         "--slurm-init-seconds-before-status-checks", "2", "--jobs", "4"]
GPU = {"cluster": {"train": {"gpu": 1}, "decode": {"gpu": 1}}}
MODELS = ("rnnencdec-30", "rnnsearch-50")  # Table 1's baseline and the alignment model: every rule, half the jobs


@pytest.fixture(scope="session", autouse=True)  # session: before the session's tiny_dag, which a skip never needs
def slurm():
    try:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        state = ""
    if not re.search(r"idle|mixed|allocated", state):
        pytest.skip("no running Slurm here (workflow/slurm/local-cluster.sh starts one; .ci/run does)")


def tiny_updates_per_second() -> float:
    """Updates per second of one process training the tiny RNNsearch-50 on half a tiny batch (one task's share of
    two), on this machine now: a training budget sized by it needs more than one Slurm job on a fast machine
    without taking many on a slow one."""
    from rnnsearch import config as cfg
    from rnnsearch.data.batching import make_batch
    from rnnsearch.model import build_model
    from rnnsearch.training.train import batch_nll, make_optimizer

    from .conftest import REPO

    params = cfg.load_params([REPO / "params.yaml", REPO / "tests" / "configs" / "tiny.yaml"])
    torch.manual_seed(0)
    model = build_model(cfg.model_config(params, "rnnsearch-50"), 153, 153).train()
    optimizer = make_optimizer(model.parameters(), "adadelta", 1.0)
    g = torch.Generator().manual_seed(0)
    sents = [torch.randint(3, 153, (15,), generator=g).tolist() + [1] for _ in range(40)]
    b = make_batch(sents[:20], sents[20:], list(range(20)))

    def update():
        optimizer.zero_grad(set_to_none=True)
        (batch_nll(model, b) / 20).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for _ in range(10):
        update()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 1.5:
        update()
        n += 1
    return n / (time.perf_counter() - start)


def snakemake(ws: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """snakemake in `ws`, with $HOME=ws and the profile installed there by README's one line."""
    profiles = ws / ".config" / "snakemake"
    if not (profiles / "slurm").exists():
        profiles.mkdir(parents=True, exist_ok=True)
        (profiles / "slurm").symlink_to(ws / "workflow" / "profiles" / "slurm")
    env = {"PATH": f"{BIN}:/usr/bin:/bin:/usr/sbin", "HOME": str(ws), "PYTHONUNBUFFERED": "1"}
    p = subprocess.run([str(BIN / "snakemake"), *args], cwd=ws, capture_output=True, text=True, env=env,
                       timeout=timeout)
    assert p.returncode == 0, f"snakemake {' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def submissions(ws: Path) -> list[tuple[str, str, str]]:
    """(Slurm job id, rule, wildcards) of every job Snakemake submitted, from its own logs."""
    text = "".join(p.read_text() for p in sorted((ws / ".snakemake" / "log").glob("*.snakemake.log")))
    return re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/rule_(\w+)/(?:([^/\s]+)/)?\d+\.log", text)


def finished_rules(ws: Path) -> set[str]:
    text = "".join(p.read_text() for p in (ws / ".snakemake" / "log").glob("*.snakemake.log"))
    return set(re.findall(r"Finished jobid: \d+ \(Rule: (\w+)\)", text))


def slurm_logs(ws: Path, jobs: list[str]) -> str:
    """The last lines of the Slurm logs of `jobs` (kept by the executor for failed jobs)."""
    out = []
    for job in jobs:
        for log in (ws / ".snakemake" / "slurm_logs").rglob(f"{job}.log"):
            out.append(f"--- {log.relative_to(ws)}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-25:]))
    return "\n".join(out) or "(no Slurm log kept)"


def test_the_pipeline_runs_through_slurm_with_gpus_and_matches_a_local_run(tmp_path_factory, request):
    ws = repo_copy(tmp_path_factory.mktemp("slurm"), {**GPU, "remove": ["models.rnnsearch-30", "models.rnnencdec-50"]})
    snakemake(ws, *SLURM)
    tiny_dag = request.getfixturevalue("tiny_dag")  # the local run, built meanwhile by the other worker

    jobs = submissions(ws)
    assert finished_rules(ws) - {r for _, r, _ in jobs} == {"all"}  # every rule with a command went to Slurm
    train = [(job, w) for job, rule, w in jobs if rule == "train"]  # wildcards: <model>_<replicate>
    assert sorted(w for _, w in train) == [f"{m}_1" for m in MODELS]
    train = [(job, w.rsplit("_", 1)[0]) for job, w in train]
    for job, model in train:
        record = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
        assert "gres:gpu:1" in record or "gres/gpu=1" in record, record  # Slurm's own record of the request
        log = (ws / f"results/logs/train/{model}/replicate1.log").read_text()
        assert f"Slurm job {job} on" in log and "CUDA_VISIBLE_DEVICES='0'" in log
        assert "but CUDA is not available here: running on the CPU" in log  # the GPU here is /dev/null

    # the local run (tiny_dag) has two replicates of four models: its replicate 1 of these two must be this run's,
    # byte for byte
    outputs = ["results/scores/aer.json", *[f"results/scores/{m}/replicate1.json" for m in MODELS],
               *[f"results/translations/{m}/replicate1/test.hyp" for m in MODELS]]
    for f in outputs:
        assert (ws / f).read_bytes() == (tiny_dag / f).read_bytes(), f"{f}: Slurm and local runs differ"
    for table, model, key in (("results/tables/table1_replicates.csv", "Model", "Replicate"),
                              ("results/figures/bleu_by_length.csv", "model", "replicate")):
        slurm, local = pd.read_csv(ws / table), pd.read_csv(tiny_dag / table)
        local = local[(local[key] == 1) & local[model].isin(MODELS)].reset_index(drop=True)
        pd.testing.assert_frame_equal(slurm, local, check_exact=True, obj=f"{table}: Slurm and local runs")


def test_a_training_of_two_tasks_past_its_time_limit_is_resubmitted_and_resumes(tmp_path_factory, tiny_dag: Path):
    """train.processes: 2 makes the training one Slurm job of two tasks, started by srun, training data-parallel
    (gloo: the node's two CPUs). Slurm's time limit (1 minute) stops a training that needs more: SIGTERM to both
    tasks, checkpoint, exit; Snakemake resubmits it (`cluster.train.attempts`) and the new job resumes, until the
    update budget is reached. A job killed just after it finished (while Snakemake wraps up) is completed by the
    next one without training. The data stages are the tiny DAG's, already built."""
    # the two tasks' training runs at about 0.27 times tiny_updates_per_second (32 to 43 updates/s in Slurm during a
    # test run against 138 in the test's process, 2 cores of a Xeon): a budget of about 150 s of training, two or
    # three jobs of Slurm's 1-minute limit, whatever this machine's speed (at 1,500 updates, one job on a fast one)
    updates = min(max(int(0.27 * 150 * tiny_updates_per_second()), 1500), 12000)
    ws = dag_copy(tiny_dag, tmp_path_factory.mktemp("timelimit"), {
        "cluster": {"train": {"runtime": 1, "attempts": 8}},  # no GPU: the node's one GPU is not one per task
        "models": {"rnnsearch-50": {"max_updates": updates}},
        "train": {"processes": 2, "checkpoint_every": 50, "log_every": 500, "validate_every": 2000}})
    model = "results/models/rnnsearch-50/replicate1/model.pt"
    planned = snakemake(ws, "-n", model).stdout
    assert "rule train:" in planned and "rule tokenize" not in planned, planned  # only the training is to run
    snakemake(ws, *SLURM, model)

    stats = json.loads((ws / "results/models/rnnsearch-50/replicate1/train_stats.json").read_text())
    runs = stats["runs"]  # the training's own record of the jobs that worked on it
    assert stats["updates"] == updates and len(runs) >= 2, runs
    assert runs[0]["start"] == 0 and runs[-1]["end"] == updates and runs[-1]["ended_by"] == "update budget"
    assert [r["processes"] for r in runs] == [2] * len(runs), runs
    for before, after in zip(runs, runs[1:]):
        # a job killed after it had finished (while Snakemake wrapped up) is completed by the next without training
        if before["end"] == updates:
            assert after["start"] == after["end"] == updates, runs
            continue
        assert before["ended_by"] == "signal 15" and after["start"] == before["end"], runs
        record = subprocess.run(["scontrol", "show", "job", before["slurm_job"]], capture_output=True, text=True).stdout
        assert "JobState=TIMEOUT" in record, record  # Slurm's own record: killed at its time limit
    jobs = [job for job, rule, _ in submissions(ws) if rule == "train"]
    # each run a new Slurm job submitted by Snakemake, none lost (CI once lost two: jobs killed at their time limit
    # just after finishing, whose outputs Snakemake deleted; the next attempt then started from scratch)
    assert jobs == [r["slurm_job"] for r in runs], slurm_logs(ws, jobs)
    for job in jobs:
        record = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
        assert re.search(r"NumTasks=2\b", record), record  # Slurm's own record of the job
    log = (ws / "results/logs/train/rnnsearch-50/replicate1.log").read_text()  # the last job's: each writes it anew
    assert f"Slurm job {jobs[-1]} on" in log and "data-parallel training: 2 processes (srun, gloo backend)" in log, log
    assert f"resuming from results/models/rnnsearch-50/replicate1/checkpoint.pt at update {runs[-1]['start']}" in log
    final = (ws / "results/models/rnnsearch-50/replicate1/checkpoint.pt")  # the final state, kept (see train.py)
    assert torch.load(final, weights_only=True)["progress"]["finished"]
