"""rnnsearch/slurm_plugin.py's mends to snakemake-executor-plugin-slurm, on stand-ins for its status query and
Snakemake's jobs (no cluster needed; test_slurm.py stops a training with scancel on the local cluster)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from rnnsearch import slurm_plugin


def _job(job_id: str = "74", rule: str = "train", mem_mb: int = 100):
    job = SimpleNamespace(rule=SimpleNamespace(name=rule), restart_times=3, attempt=1, resources={"mem_mb": mem_mb})
    return SimpleNamespace(external_jobid=job_id, job=job)


def test_a_state_of_cancelled_by_a_user_is_cancelled():
    """sacct's 'CANCELLED by 0' (a plain scancel), which the plugin took for a running job: its first word."""
    async def query(command, logger):
        return {"74": "CANCELLED by 0", "75": "TIMEOUT", "76": "RUNNING", "77": "COMPLETED"}, 0.01

    cancelled = set()
    status, seconds = asyncio.run(slurm_plugin.first_word_states(query, cancelled)("sacct ...", None))
    assert status == {"74": "CANCELLED", "75": "TIMEOUT", "76": "RUNNING", "77": "COMPLETED"} and seconds == 0.01
    assert cancelled == {"74"}


def test_a_cancelled_job_is_not_resubmitted_and_the_error_says_how_to_go_on():
    calls, cancelled = [], {"74"}
    report = slurm_plugin.not_retried(lambda self, info, msg=None, **kw: calls.append((info, msg, kw)), cancelled)
    info = _job("74")
    report(None, info, msg="SLURM-job '74' failed, SLURM status is: 'CANCELLED'.", aux_logs=[None])
    (_, msg, _), = calls
    assert "SLURM job 74 (rule train) was cancelled (scancel): not resubmitted" in msg and "run snakemake" in msg
    assert not info.job.restart_times > info.job.attempt - 1  # Snakemake's scheduler retries only while this holds


def test_a_memory_kill_names_the_request_and_the_peak_and_is_not_resubmitted(tmp_path: Path):
    slurm_log = tmp_path / "75.log"
    slurm_log.write_text("update 10/100\nslurmstepd-vm: error: Job 75 exceeded memory limit (150704128 > 104857600),"
                         " being killed\n")
    calls = []
    report = slurm_plugin.not_retried(lambda self, info, msg=None, **kw: calls.append((info, msg, kw)), set())
    info = _job("75", mem_mb=100)
    report(None, info, msg="SLURM-job '75' failed, SLURM status is: 'FAILED'. Reason: Unknown.",
           aux_logs=[str(slurm_log)])
    (_, msg, kw), = calls
    assert ("SLURM job 75 (rule train) was killed for its memory: it asked for mem_mb=100 (Slurm's limit 100 MB) "
            "and reached 144 MB") in msg and "raise mem_mb" in msg
    assert kw == {"aux_logs": [str(slurm_log)]} and not info.job.restart_times > info.job.attempt - 1


def test_another_failure_is_reported_as_the_plugin_says_and_retried(tmp_path: Path):
    calls = []
    report = slurm_plugin.not_retried(lambda self, info, msg=None, **kw: calls.append((info, msg, kw)), {"74"})
    info = _job("76")
    (tmp_path / "76.log").write_text("Traceback ...\n")
    report(None, info, msg="SLURM-job '76' failed, SLURM status is: 'FAILED'.", aux_logs=[str(tmp_path / "76.log")])
    assert calls[0][1] == "SLURM-job '76' failed, SLURM status is: 'FAILED'." and info.job.attempt == 1


def test_the_installed_plugin_is_mended_once(monkeypatch):
    plugin = pytest.importorskip("snakemake_executor_plugin_slurm")
    monkeypatch.setattr(plugin, "query_job_status", plugin.query_job_status)
    monkeypatch.setattr(plugin.Executor, "report_job_error", plugin.Executor.report_job_error)
    slurm_plugin.mend()
    query, report = plugin.query_job_status, plugin.Executor.report_job_error
    assert query.rnnsearch and report.rnnsearch  # the names check_active_jobs calls at run time
    slurm_plugin.mend()
    assert plugin.query_job_status is query and plugin.Executor.report_job_error is report
