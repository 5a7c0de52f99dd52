"""`rnnsearch <stage> …`: argument parsing only. The stages are the records of `rnnsearch.stages`; each one
validates the whole params.yaml (plus overlays), takes the keys it declares, and calls one stage function."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from rnnsearch import config as cfg
from rnnsearch.runtime import keep_freed_memory
from rnnsearch.stages import BY_NAME, STAGES, Params
from rnnsearch.textio import EXIT_INTERRUPTED, InputError, Interrupted


def _params_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", action="append", metavar="YAML",
                   help="params.yaml, then any overlays merged over it in order (default: $RNNSEARCH_PARAMS, "
                        "which the workflow sets, else params.yaml)")


class _Help(argparse.HelpFormatter):
    """Each option's help, then its default where it has one (not for flags, nor where there is none)."""

    def _get_help_string(self, action):
        default = action.default
        if default in (None, False, argparse.SUPPRESS) or not action.option_strings or "default" in action.help:
            return action.help
        shown = " ".join(map(str, default)) if isinstance(default, list) else default
        return f"{action.help} (default: {shown})"


DESCRIPTION = ("Bahdanau, Cho & Bengio (2015), from raw parallel text to Table 1 and Figures 2-3: each stage of "
               "the pipeline as a command (Snakemake and DVC run them; `rnnsearch <stage> --help` for one).")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rnnsearch", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="stage", required=True, metavar="<stage>")
    for stage in STAGES:
        p = sub.add_parser(stage.name, help=stage.help, description=stage.help,
                           formatter_class=_Help)
        if stage.params:
            _params_arg(p)
        for a in stage.args:
            p.add_argument(*a.flags, **a.kw)
        if stage.name not in ("check-params", "dvc-yaml"):
            p.add_argument("--log", metavar="FILE", help="write the full log here; only warnings go to stderr")
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line; an option the stage does not know is an error with the stage's usage."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        stage = parser._subparsers._group_actions[0].choices[args.stage]
        stage.error(f"unrecognized arguments: {' '.join(unknown)} (rnnsearch {args.stage} --help lists its options)")
    return args


def run(args: argparse.Namespace) -> None:
    """Validate the params files, take the keys the stage declares, and call its function."""
    stage = BY_NAME[args.stage]
    p = Params()
    if _user_translate(args) and args.params:
        raise InputError("--params is for the pipeline's translate stage (with --out-dir): translating your own "
                         "sentences takes the language pair, Unicode form and punctuation setting from the "
                         "checkpoint and the search settings from the flags (--beam, --max-len-a, …)")
    if stage.params and not _user_translate(args):  # a user's sentences need no params: the checkpoint has all
        files = params_files(args.params)
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
    stage.call(stage.function(), args, p)


def params_files(given: list[str] | None) -> list[str]:
    """--params as given; else $RNNSEARCH_PARAMS (the workflow's params.yaml and overlays, os.pathsep between
    them); else params.yaml."""
    env = os.environ.get("RNNSEARCH_PARAMS")
    return given or (env.split(os.pathsep) if env else ["params.yaml"])


def _user_translate(args: argparse.Namespace) -> bool:
    """`translate` without --out-dir translates a user's sentences instead of running the pipeline stage."""
    return args.stage == "translate" and not args.out_dir


def _rank() -> int:
    """This process's rank among the processes of one training or translation (torchrun's RANK, an srun task's
    SLURM_PROCID; 0 for one process)."""
    from rnnsearch.distributed import detect

    return detect().rank


def _setup_logging(log_file: str | None, quiet: bool = False, append: bool = False) -> None:
    fmt = logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(fmt)
    console.setLevel(logging.WARNING if log_file or quiet else logging.INFO)
    handlers: list[logging.Handler] = [console]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file, mode="a" if append else "w", encoding="utf-8")
        handler.setFormatter(fmt)
        handlers.append(handler)
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)
    logging.captureWarnings(True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # a training that resumes (a chain of cluster jobs) continues the log of the run it continues
    resuming = args.stage == "train" and (Path(args.out_dir) / "checkpoint.pt").exists()
    follower = args.stage in ("train", "translate") and _rank() > 0
    if follower:  # several processes (rnnsearch.distributed): process 0 writes the log; the others warn on stderr
        args.log = None
    _setup_logging(getattr(args, "log", None), quiet=_user_translate(args) or follower, append=resuming)
    log = logging.getLogger("rnnsearch")
    log.info("rnnsearch %s: %s", args.stage, " ".join(sys.argv[1:] if argv is None else argv))
    if os.environ.get("SLURM_JOB_ID"):  # evidence of where a job ran, for the log and the Slurm tests
        log.info("Slurm job %s on %s, CUDA_VISIBLE_DEVICES=%r", os.environ["SLURM_JOB_ID"],
                 os.environ.get("SLURMD_NODENAME", "?"), os.environ.get("CUDA_VISIBLE_DEVICES"))
    try:
        run(args)
    except Interrupted as e:
        log.warning("%s; exit status %d", e, EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except InputError as e:
        log.error("%s", e)
        if getattr(args, "log", None):  # the console handler shows errors already; say where the log is
            print(f"rnnsearch {args.stage}: see {args.log}", file=sys.stderr)
        return 2
    except OSError as e:  # the filesystem (a permission, a missing folder): one line, not a traceback
        log.error("%s: %s", e.filename or f"rnnsearch {args.stage}", e.strerror or e)
        return 1
    except Exception:
        log.exception("rnnsearch %s failed", args.stage)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
