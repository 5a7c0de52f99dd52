"""`snakemake` run many times at little cost: one interpreter loads Snakemake and what the workflow imports, then
forks a child per command, which runs Snakemake's command line in its workspace (a fresh interpreter spent more
than half of a dry-run's CPU time importing them). Each child starts from the same state, as a new process would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import BIN

SERVER = r"""
import json, os, sys
import snakemake.api, snakemake.cli, snakemake.dag, snakemake.workflow  # noqa: E401
from rnnsearch import config, stages  # noqa: F401 (what the workflow's rules import)
from rnnsearch.data import binarized  # noqa: F401

for line in sys.stdin:
    cwd, out, argv = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(cwd)
        os.environ["HOME"] = cwd
        sys.argv = ["snakemake", *argv]  # the workflow reads its --configfile flags from it
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        code = 1
        try:
            snakemake.cli.main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class ForkedSnakemake:
    """`snakemake ARGS` in a workspace, with $HOME there and this environment's PATH; one command at a time."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env={"PATH": f"{BIN}:/usr/bin:/bin"})

    def run(self, ws: Path, args: list[str]) -> tuple[int, str]:
        """Snakemake's exit status and its output (stdout and stderr, as written)."""
        out = ws.parent / f"{ws.name}.snakemake.out"
        self.proc.stdin.write(json.dumps([str(ws), str(out), [str(a) for a in args]]) + "\n")
        self.proc.stdin.flush()
        status = self.proc.stdout.readline()
        if not status:
            raise RuntimeError(f"the Snakemake fork server ended ({self.proc.wait()})")
        return int(status), out.read_text(errors="replace")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)

    def __enter__(self) -> ForkedSnakemake:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
