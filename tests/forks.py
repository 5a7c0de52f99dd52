"""Command lines run many times at little cost: one interpreter imports what a command needs (Snakemake and the
workflow's imports; torch and the stages of `rnnsearch`), then forks a child per command, which runs the command
line with its own working folder, standard input, output and error files and exit status, as a new process would
(a fresh interpreter spent more than half of a short command's CPU time importing them)."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .conftest import BIN

SERVER = r"""
import json, logging, os, signal, sys, traceback
{preload}

requests, replies = os.fdopen(int(sys.argv[1])), os.fdopen(int(sys.argv[2]), "w")
for line in requests:
    cwd, argv, (stdin, out, err), env, timeout = json.loads(line)
    pid = os.fork()
    if pid == 0:
        requests.close()
        replies.close()
        os.chdir(cwd)
        os.environ.update(env)
        for fd, path in ((0, stdin), (1, out), (2, err)):
            os.dup2(os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_APPEND), fd)
        signal.alarm(timeout)  # past it, SIGALRM ends the child: the client raises TimeoutExpired
        sys.argv = [{name!r}, *argv]
        code = 1
        try:
            code = {main}(argv) or 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        except BaseException:
            traceback.print_exc()
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    replies.write(f"{{os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}}\n")
    replies.flush()
"""


SNAKEMAKE_PRELOAD = ("import snakemake.api, snakemake.cli, snakemake.dag, snakemake.workflow  # noqa: E401\n"
                     "from rnnsearch import commands, config  # noqa: F401 (what the workflow's rules import)\n"
                     "from rnnsearch.data import binarized  # noqa: F401")


class ForkServer:
    """`name ARGS` run by `main(ARGS)` in a fork of an interpreter that ran `preload`; one command at a time."""

    def __init__(self, name: str, main: str, preload: str, env: dict | None = None):
        self.name = name
        requests, to_server = os.pipe()
        from_server, replies = os.pipe()
        code = SERVER.format(preload=preload, name=name, main=main)
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(requests), str(replies)],
                                     pass_fds=(requests, replies), stdin=subprocess.DEVNULL, env=env)
        os.close(requests)
        os.close(replies)
        self.to_server, self.from_server = os.fdopen(to_server, "w"), os.fdopen(from_server)

    def run(self, args: list, cwd: Path | str = ".", stdin: bytes = b"", timeout: int = 600, env: dict | None = None,
            merged: bool = False) -> subprocess.CompletedProcess:
        """The command's exit status and its output and error (bytes; both in stdout where `merged`)."""
        args = [str(a) for a in args]
        with tempfile.TemporaryDirectory(prefix="fork-") as tmp:
            files = [Path(tmp, name) for name in ("stdin", "stdout", "stdout" if merged else "stderr")]
            files[0].write_bytes(stdin)
            for f in files[1:]:
                f.touch()
            paths = [str(f) for f in files]
            self.to_server.write(json.dumps([str(Path(cwd).resolve()), args, paths, env or {}, timeout]) + "\n")
            self.to_server.flush()
            status = self.from_server.readline()
            if not status:
                raise RuntimeError(f"the {self.name} fork server ended ({self.proc.wait()})")
            if int(status) == -14:  # SIGALRM
                raise subprocess.TimeoutExpired([self.name, *args], timeout)
            return subprocess.CompletedProcess([self.name, *args], int(status), files[1].read_bytes(),
                                               b"" if merged else files[2].read_bytes())

    def close(self) -> None:
        self.to_server.close()
        self.proc.wait(timeout=60)
        self.from_server.close()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def forked_snakemake() -> ForkServer:
    """`snakemake ARGS` with this environment's PATH (each command's $HOME: its workspace, see `snakemake`)."""
    return ForkServer("snakemake", "snakemake.cli.main", SNAKEMAKE_PRELOAD, env={"PATH": f"{BIN}:/usr/bin:/bin"})


def snakemake(server: ForkServer, ws: Path, args: list[str]) -> tuple[int, str]:
    """Snakemake's exit status and its output (stdout and stderr, as written) in workspace `ws`, $HOME there (the
    workflow reads its --configfile flags from sys.argv)."""
    p = server.run(args, ws, env={"HOME": str(ws)}, merged=True)
    return p.returncode, p.stdout.decode(errors="replace")


_SNAKEMAKE: dict[str, ForkServer] = {}


def snakemake_command(args: list, cwd: Path, env: dict, timeout: int | None) -> subprocess.CompletedProcess:
    """`snakemake ARGS` as `subprocess.run(..., capture_output=True, text=True, env=env)` gives it, run by this test
    process's fork server of Snakemake (started at its first use, by the environment `env` less $HOME): a fresh
    interpreter spent about 1.3 of a dry run's 2 CPU-seconds importing Snakemake and collecting its plugins."""
    base = {k: v for k, v in env.items() if k != "HOME"}
    key = json.dumps(base, sort_keys=True)
    if key not in _SNAKEMAKE:
        _SNAKEMAKE[key] = ForkServer("snakemake", "snakemake.cli.main", SNAKEMAKE_PRELOAD, env=base)
        atexit.register(_SNAKEMAKE[key].close)
    p = _SNAKEMAKE[key].run(args, cwd, timeout=timeout or 3600, env=env)
    p.stdout, p.stderr = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    return p


_CLI: list[ForkServer] = []


def rnnsearch(*args, stdin: str | bytes = "", timeout: int = 600, cwd: Path | str = ".",
              text: bool = True) -> subprocess.CompletedProcess:
    """`rnnsearch ARGS` as `subprocess.run(..., capture_output=True)` gives it (text unless `text` is False), run
    by this test process's fork server of the command line, started at its first use."""
    if not _CLI:
        preload = ("import torch, torch._dynamo  # noqa: E401 (torch.optim's add_param_group imports it)\n"
                   "from rnnsearch.cli import main\n"
                   "from rnnsearch.commands import BY_NAME\n"
                   "for stage in ('train', 'translate'):\n"
                   "    BY_NAME[stage].function()")
        _CLI.append(ForkServer("rnnsearch", "main", preload))
        atexit.register(_CLI[0].close)
    p = _CLI[0].run(list(args), cwd, stdin.encode() if isinstance(stdin, str) else stdin, timeout)
    if text:
        p.stdout, p.stderr = p.stdout.decode(), p.stderr.decode()
    return p
