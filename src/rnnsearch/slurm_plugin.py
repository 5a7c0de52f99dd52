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

- a job whose training a signal stopped (`scancel --signal=TERM`, Slurm's time limit): the plugin said
  "SLURM status is: 'FAILED'. Reason: Unknown" and Snakemake resubmitted it without a word. The training's Slurm log
  says the signal and the update it saved its checkpoint at: the error says so, and whether it is resubmitted to
  resume (attempt k of `cluster.train.attempts`).

Each error is printed with the attempt that ran (Snakemake prints the job's shell command, `--attempt` included,
from the job as it is when the error is reported), and ends with a space before Snakemake's next sentence. Each
mend is skipped, with a warning, where the plugin no longer has the function it wraps.
"""

from __future__ import annotations

import logging
import re
import signal
from pathlib import Path

log = logging.getLogger("rnnsearch")

MEMORY_KILL = re.compile(r"exceeded memory limit \((\d+) > (\d+)\)")
# what a training logs on stderr when a signal stops it (rnnsearch.training.train: Trainer.checkpoint)
SIGNALLED = re.compile(r": signal (\d+) at update (\d+): checkpoint saved to ")


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


def _last(pattern: re.Pattern, slurm_log: str | None) -> tuple[int, int] | None:
    """The two numbers of `pattern`'s last match in a job's Slurm log; None where it has none (or no log)."""
    try:
        text = Path(slurm_log).read_text(errors="replace") if slurm_log else ""
    except OSError:
        return None
    found = pattern.findall(text)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def memory_kill(slurm_log: str | None) -> tuple[int, int] | None:
    """(peak, limit) in bytes from a Slurm log that says the job exceeded its memory limit; None otherwise."""
    return _last(MEMORY_KILL, slurm_log)


def signalled(slurm_log: str | None) -> tuple[int, int] | None:
    """(signal, update) from the Slurm log of a training that a signal stopped at a checkpoint; None otherwise."""
    return _last(SIGNALLED, slurm_log)


def _what(job) -> str:
    """'rule train, rnnsearch-50 replicate 1': the rule and the values of its wildcards."""
    wildcards = getattr(job, "wildcards_dict", None) or {}
    named = " ".join(f"{k} {v}" if k == "replicate" else str(v) for k, v in wildcards.items())
    return f"rule {job.rule.name}" + (f", {named}" if named else "")


def stop_message(job_info, cancelled: set[str], aux_logs: list | None) -> str | None:
    """Why `job_info`'s job is not to be resubmitted, as the error says it, or None (a failure Snakemake retries)."""
    job_id, what = str(job_info.external_jobid), _what(job_info.job)
    killed = memory_kill((aux_logs or [None])[0])  # first: Slurm may record such a job as cancelled too
    if killed:
        peak, limit = (round(b / 2**20) for b in killed)
        asked = job_info.job.resources.get("mem_mb")
        return (f"SLURM job {job_id} ({what}) was killed for its memory: it asked for mem_mb={asked} "
                f"(Slurm's limit {limit} MB) and reached {peak} MB. Not resubmitted with the same request: raise "
                f"mem_mb (params.yaml's cluster.train or cluster.decode for those jobs, the profile's "
                f"default-resources for the others), then run snakemake again. ")
    if job_id in cancelled or job_id.split("_")[0] in cancelled:
        return (f"SLURM job {job_id} ({what}) was cancelled (scancel): not resubmitted. A training saved its "
                "checkpoint at Slurm's SIGTERM; run snakemake again to resume it. ")
    return None


def signal_message(job_info, aux_logs: list | None, msg: str | None) -> str | None:
    """What the error says of a training that a signal stopped at a checkpoint (Snakemake resubmits it while
    attempts are left), or None for any other failure."""
    stopped = signalled((aux_logs or [None])[0])
    if not stopped:
        return None
    job = job_info.job
    name = signal.Signals(stopped[0]).name if stopped[0] in signal.valid_signals() else f"signal {stopped[0]}"
    why = " (Slurm's time limit)" if "TIMEOUT" in (msg or "") else ""
    attempts = job.restart_times + 1
    then = (f"resubmitted to resume, attempt {job.attempt + 1} of {attempts}" if job.attempt < attempts else
            f"not resubmitted: all {attempts} attempts ran (cluster.train.attempts); run snakemake again to resume")
    return (f"SLURM job {job_info.external_jobid} ({_what(job)}) stopped by {name}{why} at update {stopped[1]}: "
            f"checkpoint saved; {then}. ")


def not_retried(report, cancelled: set[str]):
    """The executor's `report_job_error(self, job_info, msg=None, **kwargs)`, which for a job cancelled with scancel
    or killed for its memory gives `stop_message` as the error and leaves no retry (Snakemake's scheduler retries
    while a job's restart_times > attempt - 1)."""

    def report_job_error(self, job_info, msg=None, **kwargs):
        why = stop_message(job_info, cancelled, kwargs.get("aux_logs"))
        if not why:
            said = signal_message(job_info, kwargs.get("aux_logs"), msg) or msg or ""
            spaced = said if not said or said[-1].isspace() else said + " "  # before "For further error details"
            return report(self, job_info, msg=spaced, **kwargs)
        # the report's two steps (the plugin interface's AbstractExecutor.report_job_error), the retries taken away
        # between them: the error shows the attempt that ran, and the scheduler, when it handles it, retries none
        self.print_job_error(job_info, msg=why, **kwargs)
        job_info.job.attempt = job_info.job.restart_times + 1
        self.workflow.scheduler.error_callback(job_info.job)

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
    if query is None or report is None or not hasattr(plugin.Executor, "print_job_error"):
        log.warning("snakemake-executor-plugin-slurm %s: no query_job_status or Executor.report_job_error and "
                    "print_job_error to wrap; "
                    "a job cancelled with scancel may keep Snakemake waiting (docs/cluster.md)",
                    getattr(plugin, "__version__", "?"))
        return
    if getattr(query, "rnnsearch", False):
        return
    cancelled: set[str] = set()
    plugin.query_job_status = first_word_states(query, cancelled)
    plugin.Executor.report_job_error = not_retried(report, cancelled)
