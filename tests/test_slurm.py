"""`snakemake --profile slurm` against a real Slurm: docs/cluster.md's command on the tiny pipeline, and one model
trained and translated on GPUs from the local run's data, through the shipped profile, every job submitted to Slurm,
training jobs holding a GPU, with the results of a local run (the tiny_dag fixture); a job over its memory request
killed.
test_slurm_timelimit.py has the training killed at its time limit.

Needs a running Slurm (`workflow/slurm/local-cluster.sh` starts a one-node cluster; `.ci/run` does); skips,
saying so, where there is none.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pandas as pd
import pytest

from rnnsearch import config as cfg

from .conftest import REPO, dag_copy, overlay_params, repo_copy
from .slurm_cluster import (DOCUMENTED, SLURM, finished_rules, job_record, slurm,  # noqa: F401 (slurm: autouse)
                            snakemake, submissions)
from .test_workflow import job_counts

pytestmark = pytest.mark.slow
GPU = {"cluster": {"train": {"gpu": 1}, "decode": {"gpu": 1}}}
MODELS = ("rnnsearch-50",)  # the alignment model: every rule (the others' jobs are these rules with other wildcards)


def test_the_documented_command_runs_the_tiny_pipeline_through_slurm_as_a_local_run_does(tmp_path_factory, request):
    """docs/cluster.md's command for the local cluster, as written, in a copy of the repository (its own
    params.yaml): every job with a command goes to Slurm, polled with sacct, the run ends (it hung when the profile
    and the local cluster disagreed on accounting), and its results are the local run's (tiny_dag, replicate 1)."""
    assert DOCUMENTED in (REPO / "docs" / "cluster.md").read_text()
    ws = repo_copy(tmp_path_factory.mktemp("documented"))
    (ws / "params.yaml").write_text((REPO / "params.yaml").read_text())  # as a clone has it
    snakemake(ws, *DOCUMENTED.split()[1:], timeout=1200)
    assert finished_rules(ws) - {r for _, r, _ in submissions(ws)} == {"all"}  # every rule with a command
    tiny_dag = request.getfixturevalue("tiny_dag")
    models = list(cfg.load_params([ws / "params.yaml", ws / "tests/configs/tiny.yaml"])["models"])
    for f in ["results/scores/aer.json", *[f"results/scores/{m}/replicate1.json" for m in models],
              *[f"results/translations/{m}/replicate1/test.hyp" for m in models]]:
        assert (ws / f).read_bytes() == (tiny_dag / f).read_bytes(), f"{f}: Slurm and local runs differ"
    for table, model, key in (("results/tables/table1_replicates.csv", "Model", "Replicate"),
                              ("results/figures/bleu_by_length.csv", "model", "replicate")):
        ours, local = pd.read_csv(ws / table), pd.read_csv(tiny_dag / table)
        local = local[local[key] == 1].reset_index(drop=True)
        # the paired bootstrap against the baseline's replicate: one replicate here, two there
        ours, local = (t.drop(columns=[c for c in t if c.startswith("p vs ")]) for t in (ours, local))
        pd.testing.assert_frame_equal(ours, local, check_exact=True, obj=f"{table}: Slurm and local runs")
    assert (ws / "results/report.md").exists() and (ws / "results/explorer.html").exists()


def test_a_model_trains_and_translates_through_slurm_on_a_gpu_and_matches_a_local_run(tmp_path_factory, tiny_dag):
    """One model's training, translation and scores through the profile, training and translation jobs each asking
    for a GPU, from the local run's data (tiny_dag: the documented command's test above runs the data stages
    through Slurm, and test_dvc.py's `dvc repro` checks a training text prepared in one shard against tiny_dag's
    two): the same translations and scores as the local run."""
    ws = dag_copy(tiny_dag, tmp_path_factory.mktemp("slurm"), GPU)
    scores = [f"results/scores/{m}/replicate1.json" for m in MODELS]
    for output in (f"results/{kind}/{m}/replicate1" for kind in ("models", "translations") for m in MODELS):
        shutil.rmtree(ws / output)
    for score in scores:
        (ws / score).unlink()
    planned = snakemake(ws, "-n", *scores).stdout
    assert job_counts(planned) == {"train": len(MODELS), "translate": len(MODELS), "score": len(MODELS)}, planned
    snakemake(ws, *SLURM, *scores)

    jobs = submissions(ws)
    assert {rule for _, rule, _ in jobs} == {"train", "translate", "score"}, jobs
    train = [(job, w) for job, rule, w in jobs if rule == "train"]  # wildcards: <model>_<replicate>
    assert sorted(w for _, w in train) == [f"{m}_1" for m in MODELS]
    train = [(job, w.rsplit("_", 1)[0]) for job, w in train]
    for job, model in train:
        record = job_record(job)
        assert "gres:gpu:1" in record or "gres/gpu=1" in record, record  # Slurm's own record of the request
        log = (ws / f"results/logs/train/{model}/replicate1.log").read_text()
        assert f"Slurm job {job} on" in log and "CUDA_VISIBLE_DEVICES='0'" in log
        assert "but CUDA is not available here: running on the CPU" in log  # the GPU here is /dev/null
    for f in [*scores, *[f"results/translations/{m}/replicate1/test.hyp" for m in MODELS]]:
        assert (ws / f).read_bytes() == (tiny_dag / f).read_bytes(), f"{f}: Slurm and local runs differ"

    # A failure that running again repeats (a setting that cannot take effect: CUDA graphs without CUDA) is not
    # retried: with 3 attempts, the training runs once; Snakemake retries any failure, so its next attempts go to
    # Slurm asking for one minute and no GPU, and stop at once, saying why.
    overlay_params(ws, {"train": {"cuda_graphs": True}, "cluster": {"train": {"attempts": 3}}})
    model = f"results/models/{MODELS[0]}/replicate1"
    before = len(submissions(ws))
    failed = snakemake(ws, *SLURM, f"{model}/model.pt", check=False)
    assert failed.returncode != 0
    attempts = [job for job, rule, _ in submissions(ws)[before:] if rule == "train"]
    assert len(attempts) == 3, failed.stdout[-3000:]
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
