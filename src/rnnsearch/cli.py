"""`rnnsearch <stage> …`: argument parsing only. The parser is built from the stage records (`rnnsearch.commands`);
`rnnsearch.jobs` runs the stage the command line names."""

from __future__ import annotations

import argparse
import sys

from rnnsearch.jobs import run_job
from rnnsearch.commands import BY_NAME, STAGES


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


def _pipeline_order(stage) -> int:
    """Where `rnnsearch --help` lists a stage: by the step number its help starts with ("4. …"), the benchmarks
    and tools (no number) after the pipeline, each group in the registry's order (sorted is stable)."""
    number = stage.help.split(".", 1)[0]
    return int(number) if number.isdigit() else 100


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rnnsearch", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="stage", required=True, metavar="<stage>")
    for stage in sorted(STAGES, key=_pipeline_order):
        p = sub.add_parser(stage.name, help=stage.help, description=stage.help,
                           formatter_class=_Help)
        if stage.params:
            _params_arg(p)
        for a in stage.args:
            p.add_argument(*a.flags, **a.kw)
        if stage.log:
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


def main(argv: list[str] | None = None) -> int:
    """`rnnsearch <stage> …`: the command line parsed, the stage run as a job (rnnsearch.jobs); its exit status."""
    args = parse(argv)
    return run_job(BY_NAME[args.stage], args, argv)


if __name__ == "__main__":
    sys.exit(main())
