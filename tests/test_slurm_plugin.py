"""rnnsearch/slurm_plugin.py's mends to snakemake-executor-plugin-slurm, on stand-ins for its status query and
Snakemake's jobs (no cluster needed; test_slurm.py stops a training with scancel on the local cluster)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from rnnsearch import slurm_plugin


def _job(job_id: str = "74", rule: str = "train", mem_mb: int = 100, attempt: int = 1):
    job = SimpleNamespace(rule=SimpleNamespace(name=rule), restart_times=2, attempt=attempt, resources={"mem_mb": mem_mb},
                          wildcards_dict={"model": "rnnsearch-50", "replicate": "1"})
    return SimpleNamespace(external_jobid=job_id, job=job)


class _Executor:
    """A stand-in for the plugin's Executor as report_job_error uses it: what each step saw of the job."""

    def __init__(self):
        self.calls = []
        self.workflow = SimpleNamespace(scheduler=SimpleNamespace(error_callback=self.scheduled))

    def print_job_error(self, job_info, msg=None, **kwargs):  # Snakemake prints the shell command, --attempt in it
        self.calls.append(("printed", msg, job_info.job.attempt, kwargs))

    def scheduled(self, job):  # the scheduler retries while restart_times > attempt - 1
        self.calls.append(("scheduled", job.restart_times > job.attempt - 1))

    def report(self, _, job_info, msg=None, **kwargs):  # the plugin's own report_job_error: both steps
        self.print_job_error(job_info, msg, **kwargs)
        self.scheduled(job_info.job)


def _reported(cancelled: set, info, msg: str, aux_logs: list) -> list:
    executor = _Executor()
    slurm_plugin.not_retried(executor.report, cancelled)(executor, info, msg=msg, aux_logs=aux_logs)
    return executor.calls


def test_a_state_of_cancelled_by_a_user_is_cancelled():
    """sacct's 'CANCELLED by 0' (a plain scancel), which the plugin took for a running job: its first word."""
    async def query(command, logger):
        return {"74": "CANCELLED by 0", "75": "TIMEOUT", "76": "RUNNING", "77": "COMPLETED"}, 0.01

    cancelled = set()
    status, seconds = asyncio.run(slurm_plugin.first_word_states(query, cancelled)("sacct ...", None))
    assert status == {"74": "CANCELLED", "75": "TIMEOUT", "76": "RUNNING", "77": "COMPLETED"} and seconds == 0.01
    assert cancelled == {"74"}


def test_a_cancelled_job_is_not_resubmitted_and_the_error_says_how_to_go_on():
    calls = _reported({"74"}, _job("74"), "SLURM-job '74' failed, SLURM status is: 'CANCELLED'.", [None])
    (printed, msg, attempt, _), (scheduled, retried) = calls
    assert (printed, scheduled, retried, attempt) == ("printed", "scheduled", False, 1)  # printed as it ran: --attempt 1
    assert ("SLURM job 74 (rule train, rnnsearch-50 replicate 1) was cancelled (scancel): not resubmitted" in msg
            and "run snakemake" in msg and msg.endswith(" "))  # a space before Snakemake's "For further error details"


def test_a_memory_kill_names_the_request_and_the_peak_and_is_not_resubmitted(tmp_path: Path):
    slurm_log = tmp_path / "75.log"
    slurm_log.write_text("update 10/100\nslurmstepd-vm: error: Job 75 exceeded memory limit (150704128 > 104857600),"
                         " being killed\n")
    calls = _reported(set(), _job("75", mem_mb=100), "SLURM-job '75' failed, SLURM status is: 'FAILED'. Reason: "
                      "Unknown.", [str(slurm_log)])
    (_, msg, attempt, kw), (_, retried) = calls
    assert ("SLURM job 75 (rule train, rnnsearch-50 replicate 1) was killed for its memory: it asked for mem_mb=100 "
            "(Slurm's limit 100 MB) and reached 144 MB") in msg and "raise mem_mb" in msg and msg.endswith(" ")
    assert kw == {"aux_logs": [str(slurm_log)]} and attempt == 1 and not retried


@pytest.mark.parametrize("attempt, state, then", [
    (1, "FAILED", "resubmitted to resume, attempt 2 of 3"),
    (2, "TIMEOUT", "resubmitted to resume, attempt 3 of 3"),
    (3, "FAILED", "not resubmitted: all 3 attempts ran (cluster.train.attempts); run snakemake again to resume")])
def test_a_training_stopped_by_a_signal_is_named_as_such(attempt, state, then, tmp_path: Path):
    """`scancel --signal=TERM` (or Slurm's time limit): the training saves its checkpoint and exits 75, which Slurm
    records as FAILED (TIMEOUT at the limit); the error says the signal, the update and what Snakemake does next."""
    slurm_log = tmp_path / "77.log"
    slurm_log.write_text("2026-12-02 01:00:00 rnnsearch WARNING rnnsearch-50: signal 15 at update 340: checkpoint "
                         "saved to results/models/rnnsearch-50/replicate1/checkpoint.pt; rerun to continue\n")
    calls = _reported(set(), _job("77", attempt=attempt), f"SLURM-job '77' failed, SLURM status is: '{state}'. "
                      "Reason: Unknown.", [str(slurm_log)])
    (_, msg, shown, _), (_, retried) = calls
    limit = " (Slurm's time limit)" if state == "TIMEOUT" else ""
    assert msg == (f"SLURM job 77 (rule train, rnnsearch-50 replicate 1) stopped by SIGTERM{limit} at update 340: "
                   f"checkpoint saved; {then}. ")
    assert shown == attempt and retried == (attempt < 3)  # Snakemake's own retry, untouched


def test_another_failure_is_reported_as_the_plugin_says_and_retried(tmp_path: Path):
    (tmp_path / "76.log").write_text("Traceback ...\n")
    calls = _reported({"74"}, _job("76"), "SLURM-job '76' failed, SLURM status is: 'FAILED'.",
                      [str(tmp_path / "76.log")])
    assert calls[0][1:3] == ("SLURM-job '76' failed, SLURM status is: 'FAILED'. ", 1) and calls[1][1]


def test_the_installed_plugin_is_mended_once(monkeypatch):
    plugin = pytest.importorskip("snakemake_executor_plugin_slurm")
    monkeypatch.setattr(plugin, "query_job_status", plugin.query_job_status)
    monkeypatch.setattr(plugin.Executor, "report_job_error", plugin.Executor.report_job_error)
    slurm_plugin.mend()
    query, report = plugin.query_job_status, plugin.Executor.report_job_error
    assert query.rnnsearch and report.rnnsearch  # the names check_active_jobs calls at run time
    slurm_plugin.mend()
    assert plugin.query_job_status is query and plugin.Executor.report_job_error is report
