"""What the Slurm tests (test_slurm.py, test_slurm_timelimit.py) share: the check for a running Slurm, Snakemake
through the shipped profile, and what Snakemake's logs say it submitted. Two files, so that pytest-xdist runs
them on two workers at once: both mostly wait on Slurm's queue."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
# docs/cluster.md's command: the shipped profile installed as it says (as `slurm`, in $HOME/.config/snakemake), nothing
# added. The workspaces' params.yaml are the tiny config merged with each test's changes; DOCUMENTED is the whole
# command docs/cluster.md gives for the local cluster, on the repository's own params.yaml.
SLURM = ["--profile", "slurm"]
DOCUMENTED = "snakemake --profile slurm --configfile tests/configs/tiny.yaml"
SQUEUE = "%.10i %.45k %.8T %.10M %R"  # docs/cluster.md's squeue format: the executor's comment names rule and model


@pytest.fixture(scope="session", autouse=True)  # session: before the session's tiny_dag, which a skip never needs
def slurm():
    try:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        state = ""
    if not re.search(r"idle|mixed|allocated", state):
        pytest.skip("no running Slurm here (workflow/slurm/local-cluster.sh starts one; .ci/run does)")


def snakemake(ws: Path, *args: str, timeout: int = 1800, check: bool = True) -> subprocess.CompletedProcess:
    """snakemake in `ws`, with $HOME=ws and the profile installed there by README's one line. The timeout is for a
    run that hangs: with the whole test run held to 0.77 of a core (a CPU quota), the pipeline through Slurm took
    more than 900 s."""
    p = subprocess.run([str(BIN / "snakemake"), *args], cwd=ws, capture_output=True, text=True, env=_environment(ws),
                       timeout=timeout)
    assert p.returncode == 0 or not check, f"snakemake {' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def snakemake_started(ws: Path, *args: str, stdout) -> subprocess.Popen:
    """snakemake in `ws` as `snakemake` runs it, started and left running, its output and errors to `stdout`."""
    return subprocess.Popen([str(BIN / "snakemake"), *args], cwd=ws, env=_environment(ws), stdout=stdout,
                            stderr=subprocess.STDOUT, text=True)


def _environment(ws: Path) -> dict:
    """$HOME=ws, with the shipped profile installed there as `slurm` (README's one line), and this environment's
    commands first on PATH."""
    profiles = ws / ".config" / "snakemake"
    if not (profiles / "slurm").exists():
        profiles.mkdir(parents=True, exist_ok=True)
        (profiles / "slurm").symlink_to(ws / "workflow" / "profiles" / "slurm")
    return {"PATH": f"{BIN}:/usr/bin:/bin:/usr/sbin", "HOME": str(ws), "PYTHONUNBUFFERED": "1"}


def submissions(ws: Path) -> list[tuple[str, str, str]]:
    """(Slurm job id, rule, wildcards) of every job Snakemake submitted, from its own logs."""
    text = "".join(p.read_text() for p in sorted((ws / ".snakemake" / "log").glob("*.snakemake.log")))
    return re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/rule_(\w+)/(?:([^/\s]+)/)?\d+\.log", text)


def job_record(job: str) -> str:
    """Slurm's own record of `job` (`scontrol show job`; kept an hour after it ends: local-cluster.sh's MinJobAge)."""
    return subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout


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
