"""Two mends to snakemake-executor-plugin-slurm (2.8.0, its newest release), made inside Snakemake's own process when
a run starts under the Slurm executor (the Snakefile's `onstart`), for what a cluster user does: stop a job, and
read why one died (docs/cluster.md, "Stopping a training").

- `scancel <job>`: sacct writes such a job's state as 'CANCELLED by <uid>', and the plugin matches the state
  'CANCELLED' exactly, so it took the job for one still running and Snakemake waited for it forever. The status
  query is wrapped to keep the state's first word. A cancelled job is the user's stop, not a failure: it is not
  resubmitted (Snakemake retries a training for Slurm's time limit, workflow/rules/common.smk: train_retries),
  and the error says so and how to go on (a training saved its checkpoint at Slurm's SIGTERM).
- a job killed for its memory: the plugin said "SLURM status is: 'FAILED'. Reason: Unknown" and Snakemake resubmitted
  the same request; Slurm's reason is in the job's Slurm log ("exceeded memory limit (<peak> > <limit>)"). The
  error names the job, its request and the peak, and the job is not resubmitted unchanged.

Each mend is skipped, with a warning, where the plugin no longer has the function it wraps.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger("rnnsearch")

MEMORY_KILL = re.compile(r"exceeded memory limit \((\d+) > (\d+)\)")


def first_word_states(query, cancelled: set[str]):
    """The plugin's `query_job_status(command, logger)` with each state cut to its first word; the jobs whose state
    was 'CANCELLED by <uid>' (scancel) are added to `cancelled`."""

    async def query_job_status(command, logger):
        status, seconds = await query(command, logger)
        for job, state in (status or {}).items():
            if state.startswith("CANCELLED by"):
                cancelled.add(job)
            status[job] = state.split()[0] if state.strip() else state
        return status, seconds

    query_job_status.rnnsearch = True
    return query_job_status


def memory_kill(slurm_log: str | None) -> tuple[int, int] | None:
    """(peak, limit) in bytes from a Slurm log that says the job exceeded its memory limit; None otherwise."""
    try:
        text = Path(slurm_log).read_text(errors="replace") if slurm_log else ""
    except OSError:
        return None
    found = MEMORY_KILL.findall(text)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def stop_message(job_info, cancelled: set[str], aux_logs: list | None) -> str | None:
    """Why `job_info`'s job is not to be resubmitted, as the error says it, or None (a failure Snakemake retries)."""
    job_id = str(job_info.external_jobid)
    rule = job_info.job.rule.name
    killed = memory_kill((aux_logs or [None])[0])  # first: Slurm may record such a job as cancelled too
    if killed:
        peak, limit = (round(b / 2**20) for b in killed)
        asked = job_info.job.resources.get("mem_mb")
        return (f"SLURM job {job_id} (rule {rule}) was killed for its memory: it asked for mem_mb={asked} "
                f"(Slurm's limit {limit} MB) and reached {peak} MB. Not resubmitted with the same request: raise "
                f"mem_mb (params.yaml's cluster.train or cluster.decode for those jobs, the profile's "
                f"default-resources for the others), then run snakemake again.")
    if job_id in cancelled or job_id.split("_")[0] in cancelled:
        return (f"SLURM job {job_id} (rule {rule}) was cancelled (scancel): not resubmitted. A training saved its "
                "checkpoint at Slurm's SIGTERM; run snakemake again to resume it.")
    return None


def not_retried(report, cancelled: set[str]):
    """The executor's `report_job_error(self, job_info, msg=None, **kwargs)`, which for a job cancelled with scancel
    or killed for its memory gives `stop_message` as the error and leaves no retry (Snakemake's scheduler retries
    while a job's restart_times > attempt - 1)."""

    def report_job_error(self, job_info, msg=None, **kwargs):
        why = stop_message(job_info, cancelled, kwargs.get("aux_logs"))
        if why:
            job_info.job.attempt = job_info.job.restart_times + 1
            msg = why
        return report(self, job_info, msg=msg, **kwargs)

    report_job_error.rnnsearch = True
    return report_job_error


def mend() -> None:
    """Wrap the installed plugin's status query and error report (once per process)."""
    try:
        import snakemake_executor_plugin_slurm as plugin
    except ImportError:
        return
    query = getattr(plugin, "query_job_status", None)
    report = getattr(getattr(plugin, "Executor", None), "report_job_error", None)
    if query is None or report is None:
        log.warning("snakemake-executor-plugin-slurm %s: no query_job_status or Executor.report_job_error to wrap; "
                    "a job cancelled with scancel may keep Snakemake waiting (docs/cluster.md)",
                    getattr(plugin, "__version__", "?"))
        return
    if getattr(query, "rnnsearch", False):
        return
    cancelled: set[str] = set()
    plugin.query_job_status = first_word_states(query, cancelled)
    plugin.Executor.report_job_error = not_retried(report, cancelled)
