"""tests/gpu-lib.sh's time budget (BUDGET=<seconds>), which keeps tests/gpu-kernels-check.sh inside one device call:
a step starts only with at least half its time limit left, runs for at most what is left, and a step cut or skipped
for the budget is named without failing the script. Run here with a stand-in python3 on PATH that says it sees a
GPU, so that the library starts on a machine without one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, budget: int | None, steps: str, before: str = "") -> subprocess.CompletedProcess:
    """`steps` after sourcing gpu-lib.sh with OUT = tmp_path/out, BUDGET = `budget` and `before` (shell lines)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\necho 'a stand-in GPU, torch 0, CUDA 0'\n")
    (bin_dir / "python3").chmod(0o755)
    given = f"BUDGET={budget}" if budget is not None else ""
    script = f"out={tmp_path}/out\n{given}\n{before}\nsource {REPO}/tests/gpu-lib.sh\n{steps}\nexit $status\n"
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})


def test_steps_share_the_budget(tmp_path: Path):
    """`long` needs 4 of the budget's 6 s left: bash counts whole seconds, so the 1 to 2 s of margin keep a slow or
    busy machine (a second ticking over between the deadline and the step) from skipping it."""
    p = _run(tmp_path, 6, "step quick 3 true\nstep big 100 true\nstep long 8 sleep 30\nstep late 2 true")
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "out"
    assert (out / "quick.log").exists() and (out / "long.log").exists(), p.stdout
    assert not (out / "big.log").exists() and not (out / "late.log").exists()
    budget = (out / "budget.txt").read_text().splitlines()
    assert re.search(r"big: skipped, [4-6] s left of BUDGET=6 \(its limit 100 s\)$", budget[0]), budget  # whole s
    assert budget[1] == f"  long: cut at the end of BUDGET=6 s: {out}/long.log"  # after about 6 s, not 8 or 30
    assert "late: skipped" in budget[2] and len(budget) == 3
    assert "failed" not in p.stdout


def test_a_failing_step_fails_the_script_within_the_budget(tmp_path: Path):
    p = _run(tmp_path, 30, "step broken 10 false\nstep slow 2 sleep 30")
    assert p.returncode == 1
    assert "broken failed (exit 1" in p.stdout
    assert "slow failed (exit 124; 124: over its 2 s)" in p.stdout  # its own limit, not the budget's end
    assert (tmp_path / "out" / "budget.txt").read_text() == ""


def test_without_a_budget_every_step_runs_to_its_own_limit(tmp_path: Path):
    p = _run(tmp_path, None, "step big 100 true\nstep slow 1 sleep 30")
    assert p.returncode == 1 and (tmp_path / "out" / "big.log").exists(), p.stdout
    assert "slow failed (exit 124; 124: over its 1 s)" in p.stdout
    assert (tmp_path / "out" / "budget.txt").read_text() == ""


def test_pack_keeps_a_rehearsals_logs_not_its_data(tmp_path: Path):
    """PACK=<file.tgz> (a device call returns a few files): OUT after every step, of a rehearsal's workspace only
    snakemake.log and the jobs' logs."""
    steps = ('mkdir -p "$out/rehearse/results/logs/train" "$out/rehearse/data"\n'
             'touch "$out/rehearse/snakemake.log" "$out/rehearse/results/logs/train/a.log" "$out/rehearse/data/train.en"'
             '\nstep done 5 true')
    p = _run(tmp_path, None, steps, before="PACK=out.tgz")  # relative to where the script started
    assert p.returncode == 0, p.stdout + p.stderr
    names = subprocess.run(["tar", "tzf", str(tmp_path / "out.tgz")], capture_output=True, text=True).stdout.split()
    assert {"./done.log", "./device.txt", "rehearse/snakemake.log", "rehearse/results/logs/train/a.log"} <= set(names)
    assert not [n for n in names if "data" in n], names
