"""Every `rnnsearch <stage>` command as a record: the pipeline's stages and tools (`pipeline`), the benchmarks and
the JoeyNMT experiment (`benchmarks`); `record` is what a record is and how its function is called by name.

cli.py builds the parser from `STAGES`; the Snakemake rules and `dvc.yaml` take each stage's params
(rnnsearch.config.stage_params: a change of a value it reads reruns exactly its jobs) and its source files
(`stage_code`: the import closure of its module).
"""

from __future__ import annotations

from rnnsearch.closure import PACKAGE, REPO, import_closure
from rnnsearch.commands.benchmarks import BENCHMARKS
from rnnsearch.commands.pipeline import PIPELINE
from rnnsearch.commands.record import Arg, Params, Stage

__all__ = ["Arg", "Params", "Stage", "STAGES", "BY_NAME", "stage_code", "stage_of_rule"]

STAGES: tuple[Stage, ...] = PIPELINE + BENCHMARKS
BY_NAME = {s.name: s for s in STAGES}


def stage_of_rule(rule: str) -> Stage | None:
    """The stage a Snakemake rule runs (None for rules that run no stage)."""
    for s in STAGES:
        if rule in (s.rules or (s.name.replace("-", "_"),)):
            return s
    return None


def stage_code(name: str) -> list[str]:
    """The source files of a stage, as paths from the repository root: the rules list them as inputs, so that
    editing one reruns the stage (under Snakemake by modification time, under DVC by content). The command-line
    layer (cli.py, rnnsearch.commands, rnnsearch.jobs) only parses arguments and runs jobs, and is not listed."""
    stage = BY_NAME[name]
    files = import_closure(stage.module) + [PACKAGE / s for s in stage.scripts]
    return [str(f.relative_to(REPO)) for f in sorted(set(files))]
