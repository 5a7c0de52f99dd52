"""`snakemake --profile slurm` against a real Slurm: docs/cluster.md's command on the tiny pipeline, through the
shipped profile, every job submitted to Slurm, training and translation jobs holding a GPU, with the results of a
local run (the tiny_dag fixture); a setting that cannot take effect tried once, not `attempts` times; a job over its
memory request killed.
test_slurm_timelimit.py has the training killed at its time limit.

Needs a running Slurm (`workflow/slurm/local-cluster.sh` starts a one-node cluster; `.ci/run` does); skips,
saying so, where there is none."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from rnnsearch import config as cfg

from .conftest import REPO, overlay_params, repo_copy
from .slurm_cluster import (DOCUMENTED, SLURM, finished_rules, job_record, slurm,  # noqa: F401 (slurm: autouse)
                            snakemake, submissions)

pytestmark = pytest.mark.slow
GPU = {"cluster": {"train": {"gpu": 1}, "decode": {"gpu": 1}}}
# Two of tiny.yaml's four models (RNNencdec-30 and RNNsearch-50: both architectures, both lengths) and the training
# text in one shard (each per-shard rule still runs): 23 Slurm jobs where the whole tiny DAG has 41, each job two
# Snakemake starts of about 2 CPU-seconds besides its command. Sharding's outputs: test_workflow.py and test_dvc.py.
FEWER = {"prepare": {"shards": 1}, "remove": ["models.rnnsearch-30"]}
FEWER_TINY = "remove: [models.rnnencdec-50]  # the test's copy only (tiny.yaml, read last, sets its updates)\n"
# the workflow's light rules (localrule: True) run in Snakemake's own process, not as Slurm jobs
LOCAL = {"all", "tokenize", "tables", "figures", "report"}


def test_the_documented_command_runs_the_tiny_pipeline_through_slurm_as_a_local_run_does(tmp_path_factory, request):
    """docs/cluster.md's command for the local cluster, as written, in a copy of the repository whose params.yaml
    asks for a GPU per training and per translation job, as a GPU cluster's user sets it (GPU), and for fewer jobs
    (FEWER, FEWER_TINY): every job with a command but the light ones (LOCAL, run by Snakemake itself) goes to
    Slurm, polled with sacct, the run ends (it hung when the profile and the local cluster disagreed on
    accounting), the GPU jobs hold the node's GPU and run on the CPU, saying so (it is /dev/null), and the results
    are the local run's (tiny_dag, replicate 1)."""
    assert DOCUMENTED in (REPO / "docs" / "cluster.md").read_text()
    ws = repo_copy(tmp_path_factory.mktemp("documented"))
    (ws / "params.yaml").write_text((REPO / "params.yaml").read_text())  # as a clone has it
    overlay_params(ws, {**GPU, **FEWER})
    (ws / "tests/configs/tiny.yaml").write_text((ws / "tests/configs/tiny.yaml").read_text() + FEWER_TINY)
    snakemake(ws, *DOCUMENTED.split()[1:], timeout=1200)
    jobs = submissions(ws)
    assert finished_rules(ws) - {r for _, r, _ in jobs} == LOCAL  # every other rule went to Slurm
    assert not LOCAL & {r for _, r, _ in jobs}, jobs
    models = list(cfg.load_params([ws / "params.yaml", ws / "tests/configs/tiny.yaml"])["models"])
    for job, rule, _ in jobs:
        if rule in ("train", "translate"):
            record = job_record(job)
            assert "gres:gpu:1" in record or "gres/gpu=1" in record, record  # Slurm's own record of the request
    train = {w.rsplit("_", 1)[0]: job for job, rule, w in jobs if rule == "train"}  # wildcards: <model>_<replicate>
    assert sorted(train) == sorted(models) == ["rnnencdec-30", "rnnsearch-50"], jobs
    for model, job in train.items():
        log = (ws / f"results/logs/train/{model}/replicate1.log").read_text()
        assert f"Slurm job {job} on" in log and "CUDA_VISIBLE_DEVICES='0'" in log, log
        assert "but CUDA is not available here: running on the CPU" in log, log  # the GPU here is /dev/null
    tiny_dag = request.getfixturevalue("tiny_dag")
    for f in ["results/scores/aer.json", *[f"results/scores/{m}/replicate1.json" for m in models],
              *[f"results/translations/{m}/replicate1/test.hyp" for m in models]]:
        assert (ws / f).read_bytes() == (tiny_dag / f).read_bytes(), f"{f}: Slurm and local runs differ"
    for table, model, key in (("results/tables/table1_replicates.csv", "Model", "Replicate"),
                              ("results/figures/bleu_by_length.csv", "model", "replicate")):
        ours, local = pd.read_csv(ws / table), pd.read_csv(tiny_dag / table)
        local = local[(local[key] == 1) & local[model].isin(models)].reset_index(drop=True)
        # the paired bootstrap against the baseline's replicate: one replicate here, two there
        ours, local = (t.drop(columns=[c for c in t if c.startswith("p vs ")]) for t in (ours, local))
        pd.testing.assert_frame_equal(ours, local, check_exact=True, obj=f"{table}: Slurm and local runs")
    assert (ws / "results/report.md").exists() and (ws / "results/explorer.html").exists()
    _a_failure_that_repeats_itself_runs_once(ws)


def _a_failure_that_repeats_itself_runs_once(ws: Path) -> None:
    """A failure that running again repeats (a setting that cannot take effect: CUDA graphs without CUDA) is not
    retried: with 3 attempts, the training runs once; Snakemake retries any failure, so its next attempts go to
    Slurm asking for one minute and no GPU, and stop at once, saying why."""
    overlay_params(ws, {"train": {"cuda_graphs": True}, "cluster": {"train": {"attempts": 3}}})
    model = "results/models/rnnsearch-50/replicate1"
    before = len(submissions(ws))
    failed = snakemake(ws, *SLURM, f"{model}/model.pt", *DOCUMENTED.split()[3:], check=False)  # tiny.yaml
    assert failed.returncode != 0
    attempts = [job for job, rule, _ in submissions(ws)[before:] if rule == "train"]
    assert len(attempts) == len(submissions(ws)[before:]) == 3, failed.stdout[-3000:]  # the training's, no other
    records = [job_record(job) for job in attempts]
    gpu = ("gres:gpu:1", "gres/gpu=1")
    assert any(g in records[0] for g in gpu) and "TimeLimit=00:30:00" in records[0], records[0]  # the training's
    for record in records[1:]:
        assert not any(g in record for g in gpu) and "TimeLimit=00:01:00" in record, record
    history = (ws / model / "train.log").read_text()
    assert history.count("train.cuda_graphs: true, but") == 1, history  # the training ran once
    assert history.count("of this training not run: the last attempt failed with exit status 2") == 2, history


def test_a_job_over_its_memory_request_is_killed_as_on_a_real_cluster(tmp_path):
    """local-cluster.sh enforces memory (CR_Core_Memory, OverMemoryKill): a job asking for 100 MB that touches
    600 MB is killed, and Slurm's accounting says so."""
    script = "import time; x = bytearray(600 * 2**20); x[::4096] = bytes(len(x[::4096])); time.sleep(30)"
    out = tmp_path / "oom.out"
    job = subprocess.run(["sbatch", "--parsable", "--mem=100M", f"--output={out}", "--wrap",
                          f"python3 -c '{script}'"], capture_output=True, text=True, check=True).stdout.strip()
    deadline = time.time() + 120
    while time.time() < deadline:
        state = subprocess.run(["sacct", "-j", job, "-n", "-X", "-o", "State"], capture_output=True,
                               text=True).stdout.strip()
        if state and state not in ("PENDING", "RUNNING"):
            break
        time.sleep(1)
    assert state in ("FAILED", "OUT_OF_MEMORY", "CANCELLED"), state  # not COMPLETED after its 30 s
    assert "exceeded memory limit" in out.read_text()
