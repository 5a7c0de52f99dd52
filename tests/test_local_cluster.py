"""workflow/slurm/local-cluster.sh's package installation (.ci/run starts the local Slurm with it): while another
apt-get or dpkg holds its lock, it waits (at most 10 minutes) instead of failing at once with apt-get's exit 100,
and it says what it runs and that it is still running, where apt-get's own output is kept back.
The script's `apt_get` runs here against a stand-in apt-get on PATH, so that nothing is installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _apt_get(tmp_path: Path, fake: str) -> subprocess.CompletedProcess:
    """The script's apt_get function, run with `fake` as apt-get (a shell script's body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(f"#!/bin/bash\n{fake}\n")
    (bin_dir / "apt-get").chmod(0o755)
    script = (REPO / "workflow" / "slurm" / "local-cluster.sh").read_text()
    function = script[script.index("say() {"):]
    function = function[: function.index("\n}\n") + 3].replace("sleep 30;", "sleep 1;")  # its progress every second
    return subprocess.run(["bash", "-c", f'SUDO=""\n{function}\napt_get update -qq'], capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls")}, timeout=120)


def test_apt_get_waits_while_another_package_manager_holds_the_lock(tmp_path: Path):
    held = 'echo x >> "$CALLS"; if [ $(wc -l < "$CALLS") -lt 2 ]; then ' \
           'echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 42 (apt-get)" >&2; exit 100; fi'
    p = _apt_get(tmp_path, held)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "calls").read_text().count("x") == 2  # refused once, then run
    assert "waiting for another package manager: E: Could not get lock /var/lib/dpkg/lock-frontend" in p.stderr


def test_apt_get_fails_at_once_on_any_other_error(tmp_path: Path):
    p = _apt_get(tmp_path, 'echo x >> "$CALLS"; echo "E: Unable to locate package slurm-wlm" >&2; exit 100')
    assert p.returncode == 1 and "Unable to locate package slurm-wlm" in p.stderr
    assert (tmp_path / "calls").read_text().count("x") == 1


def test_apt_get_says_what_it_runs_while_it_runs(tmp_path: Path):
    """An install of minutes is not silent: a line when apt-get starts, one every 30 s while it runs (every second
    here), one when it is done; nothing after it (the line-writer stops with apt-get)."""
    p = _apt_get(tmp_path, 'sleep 2.5')
    lines = p.stderr.splitlines()
    assert p.returncode == 0 and lines[0] == "local-cluster.sh: apt-get update -qq", p.stderr
    assert 1 <= sum("apt-get update: still running after" in line for line in lines) <= 3, p.stderr
    assert lines[-1].startswith("local-cluster.sh: apt-get update: done in "), p.stderr
