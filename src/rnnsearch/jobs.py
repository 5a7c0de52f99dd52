"""One stage run as a job: its params read and validated, its function called with the keywords its record
binds, its log (the job's, and a pipeline job's history beside its outputs), its exit status, SIGTERM and
SIGINT, and the retry policy Snakemake's retries of a training follow (workflow/rules/common.smk)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import resource
import signal
import sys
import time
from pathlib import Path

from rnnsearch import config as cfg
from rnnsearch.runtime import keep_freed_memory, proc_mb
from rnnsearch.commands.record import Params, Stage
from rnnsearch.textio import EXIT_INTERRUPTED, InputError, Interrupted


def run(stage: Stage, args: argparse.Namespace) -> None:
    """Validate the params files, take the keys the stage declares, and call its function."""
    p = Params()
    if _user_translate(args) and args.params:
        raise InputError("--params is for the pipeline's translate stage (with --out-dir): translating your own "
                         "sentences takes the language pair, Unicode form and punctuation setting from the "
                         "checkpoint and the search settings from the flags (--beam, --max-len-a, …)")
    if stage.params and not _user_translate(args):  # a user's sentences need no params: the checkpoint has all
        files = cfg.params_files(args.params)
        overrides = cfg.env_overrides()  # snakemake --config
        config = cfg.load_params(files, overrides)  # all of it validated: a typo fails at the start
        model = getattr(args, "model", None)
        if model is not None and model not in config["models"]:
            raise cfg.ConfigError(f"--model {model!r} is not a key of 'models' ({', '.join(config['models'])})")
        p = cfg.stage_params(config, stage.name, model)  # a stage sees only the keys it declares
        logging.getLogger("rnnsearch").info("params from %s%s: %s", ", ".join(map(str, files)),
                                            f" and --config {json.dumps(overrides)}" if overrides else "",
                                            json.dumps(p, sort_keys=True, default=str))
    if stage.runs_model:
        keep_freed_memory()  # rnnsearch.runtime: no page faults on the tensors every update allocates again
    function = stage.function()
    kwargs, _ = stage.bind(function, args, p)
    function(**kwargs)


def _user_translate(args: argparse.Namespace) -> bool:
    """`translate` without --out-dir translates a user's sentences instead of running the pipeline stage."""
    return args.stage == "translate" and not args.out_dir


def _rank() -> int:
    """This process's rank among the processes of one training or translation (torchrun's RANK, an srun task's
    SLURM_PROCID; 0 for one process)."""
    from rnnsearch.distributed import detect

    return detect().rank


def _setup_logging(log_file: str | None, quiet: bool = False, history: Path | None = None) -> None:
    """Log records to stderr (warnings only where a file takes the rest), to `log_file` (this job's log, written
    anew: Snakemake deletes a job's `log:` before it runs it anyway) and appended to `history`."""
    fmt = logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(fmt)
    console.setLevel(logging.WARNING if log_file or quiet else logging.INFO)
    handlers: list[logging.Handler] = [console]
    if log_file and history and Path(log_file).resolve() == history.resolve():
        log_file = None  # the job's log is the history: appended to
    for path, mode in ((log_file, "w"), (history, "a")):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(path, mode=mode, encoding="utf-8")
            handler.setFormatter(fmt)
            handlers.append(handler)
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)
    logging.captureWarnings(True)


def history_log(stage: Stage, args: argparse.Namespace) -> Path | None:
    """Where a training or translation job of the pipeline appends its log, job after job: `train.log` or
    `translate.log` beside its outputs. Snakemake's `log:` file holds only the last job's part (Snakemake deletes it
    before each job: a rerun, a resumed training, each Slurm job of a chain)."""
    if stage.job_log and getattr(args, "out_dir", None) and args.log:
        return Path(args.out_dir) / f"{args.stage}.log"
    return None


def last_exit(history: Path) -> int | None:
    """The exit status the last job of `history` logged; None where it logged none (killed, or no job yet)."""
    try:
        lines = history.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        if "==== job " in line:
            ended = re.search(r"ended: exit status (-?\d+) ====$", line)
            return int(ended.group(1)) if ended else None
    return None


def failed_for_good(history: Path) -> int | None:
    """The exit status of the last job logged in `history` where running the job again repeats it (a setting, a
    traceback, a diverged run); None after a success, a stop by a signal (EXIT_INTERRUPTED: Slurm's time limit) or
    a job killed without a word (no status logged), which a rerun can take further."""
    status = last_exit(history)
    return None if status in (None, 0, EXIT_INTERRUPTED) else status


def _not_retried(args: argparse.Namespace, history: Path | None) -> str | None:
    """A retry of a training (Snakemake's --attempt ≥ 2) after a failure that running again repeats: why it stops.
    Snakemake retries any failure (workflow/rules/common.smk: train_retries)."""
    if getattr(args, "attempt", 1) == 1 or history is None:
        return None
    status = failed_for_good(history)
    if status is None:
        return None
    return (f"attempt {args.attempt} of this training not run: the last attempt failed with exit status {status}, "
            f"which running again repeats (see {history}); fix the cause, then rerun snakemake")


def run_job(stage: Stage, args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Run `stage` for the parsed command line `args` (`argv`: as given, None: sys.argv); its exit status."""
    history = history_log(stage, args)
    refused = _not_retried(args, history)  # from the history's last job, before this one's lines
    follower = stage.job_log and _rank() > 0
    if follower:  # several processes (rnnsearch.distributed): process 0 writes the logs; the others warn on stderr
        args.log = history = None
    _setup_logging(getattr(args, "log", None), quiet=_user_translate(args) or follower, history=history)
    log = logging.getLogger("rnnsearch")
    job = os.environ.get("SLURM_JOB_ID", "(not Slurm)")
    if history:  # one job's part of the history: where and when it ran
        log.info("==== job %s on %s (pid %d) ====", job, platform.node(), os.getpid())
    log.info("rnnsearch %s: %s", args.stage, " ".join(sys.argv[1:] if argv is None else argv))
    if os.environ.get("SLURM_JOB_ID"):  # evidence of where a job ran, for the log and the Slurm tests
        log.info("Slurm job %s on %s, CUDA_VISIBLE_DEVICES=%r", os.environ["SLURM_JOB_ID"],
                 os.environ.get("SLURMD_NODENAME", "?"), os.environ.get("CUDA_VISIBLE_DEVICES"))
    if refused:
        log.error("%s", refused)
    start = time.monotonic()
    try:
        status = 2 if refused else _run_logged(stage, args, log, stoppable=history is not None)
        _STOPPING["final"] = True
    except Terminated as e:  # the one signal the handler raises, arriving as the stage returned
        log.warning("rnnsearch %s: signal %d; exit status %d", args.stage, e.signum, EXIT_INTERRUPTED)
        status = EXIT_INTERRUPTED
    if history:  # the job's last lines are written whatever signal comes now (Slurm sends more than one)
        _on_stop_signals(signal.SIG_IGN)
    log.info("rnnsearch %s: exit status %d after %.1f s; %s", args.stage, status, time.monotonic() - start,
             peak_memory())
    if history:
        log.info("==== job %s ended: exit status %d ====", job, status)
    return status


class Terminated(BaseException):
    """SIGTERM or SIGINT to a pipeline job outside a stage's own handling of them (the training loop saves and
    raises Interrupted): the job stops with its exit lines written."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_STOPPING = {"raised": False, "final": False}  # Terminated is raised once, and never once the stage has returned


def _raise_terminated(signum, frame):
    if not (_STOPPING["raised"] or _STOPPING["final"]):
        _STOPPING["raised"] = True
        raise Terminated(signum)


def _on_stop_signals(handler) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


EXIT_READER_GONE = 128 + signal.SIGPIPE  # 141, as a shell reports a Unix tool ended by SIGPIPE


def reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone (`rnnsearch translate | head -1`); if so, standard
    output is pointed at /dev/null, so that nothing more is written to it, and no error is said at exit when Python
    flushes what is still buffered (the lines the reader did not wait for)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, 0)  # a pipe's writing end reports POLLERR once its reader has closed it
        gone = any(event & select.POLLERR for _, event in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no stdout, or one that is not a file
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return gone


def peak_memory() -> str:
    """This process's peak resident memory and, once it has held GPU memory, its peak GPU memory: the last line of
    every stage's log, which `rnnsearch rehearse` reads (a process that only asked CUDA for the device's name says
    no GPU memory, not 0 MB). The peak is VmHWM (rnnsearch.runtime.proc_mb): getrusage's would be
    no lower than Snakemake's own size when it forked the job."""
    try:
        rss = proc_mb("VmHWM")
    except (OSError, RuntimeError):  # no /proc (macOS): getrusage's, in kB on Linux and bytes on macOS
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)
    said = f"peak RSS {rss:.0f} MB"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and torch.cuda.max_memory_reserved() > 0:
        said += (f"; peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MB allocated, "
                 f"{torch.cuda.max_memory_reserved() / 2**20:.0f} MB reserved")
    return said


def _run_logged(stage: Stage, args: argparse.Namespace, log: logging.Logger, stoppable: bool = False) -> int:
    """Run the stage; its exit status, every failure logged in one line (a traceback only for a bug). `stoppable`
    (a pipeline job): SIGTERM and SIGINT stop it with EXIT_INTERRUPTED, as a training's loop does."""
    try:
        if stoppable:
            _on_stop_signals(_raise_terminated)
        run(stage, args)
    except Interrupted as e:
        log.warning("%s; exit status %d", e, EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except Terminated as e:
        log.warning("rnnsearch %s: stopped by signal %d before it finished (rerun to start it again); exit status "
                    "%d", args.stage, e.signum, EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except InputError as e:
        log.error("%s", e)
        if getattr(args, "log", None):  # the console handler shows errors already; say where the log is
            print(f"rnnsearch {args.stage}: see {args.log}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        if not reader_gone():
            raise
        return EXIT_READER_GONE
    except OSError as e:  # the filesystem (a permission, a missing folder): one line, not a traceback
        log.error("%s: %s", e.filename or f"rnnsearch {args.stage}", e.strerror or e)
        return 1
    except Exception:
        log.exception("rnnsearch %s failed", args.stage)
        return 1
    return 0

