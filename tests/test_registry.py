"""The stage registry (rnnsearch.stages): one record per stage, the CLI and the rules built from it, and each
stage's source dependencies equal to what its code really imports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rnnsearch import stages
from rnnsearch.cli import build_parser

from .conftest import REPO

RULE_TEXT = "".join(f.read_text(encoding="utf-8") for f in sorted((REPO / "workflow" / "rules").glob("*.smk")))
RULES = dict(re.findall(r"^\s*rule (\w+):(.*?)(?=^\s*rule \w+:|\Z)", RULE_TEXT, re.M | re.S))  # name: its text
TOOLS = {"check-params", "dvc-yaml", "rehearse"}  # commands, not pipeline stages: no rule (rehearse runs Snakemake)


def test_every_record_is_a_command_and_every_stage_a_rule():
    commands = set(build_parser()._subparsers._group_actions[0].choices)
    assert commands == {s.name for s in stages.STAGES}
    for s in stages.STAGES:
        if s.name not in TOOLS:
            assert set(s.rules or (s.name.replace("-", "_"),)) <= set(RULES), s.name
    for rule in RULES:
        stage = stages.stage_of_rule(rule)
        assert stage is not None, f"rule {rule} runs no stage of the registry"
        assert f"rnnsearch {stage.name} " in RULES[rule], f"rule {rule} does not run `rnnsearch {stage.name}`"


def test_help_lists_the_stages_in_pipeline_order():
    """`rnnsearch --help`: the numbered stages by their step (count, 4., after filter, 3.; data-report, 9., after
    score, 7.), then the benchmarks and tools."""
    listed = list(build_parser()._subparsers._group_actions[0].choices)
    steps = [int(s.help.split(".")[0]) for s in map(stages.BY_NAME.get, listed) if s.help.split(".")[0].isdigit()]
    assert steps == sorted(steps) and len(steps) > 15, listed
    assert listed.index("filter") < listed.index("count") and listed.index("score") < listed.index("data-report")
    assert all(stages.BY_NAME[n].help[0].isdigit() for n in listed[: len(steps)])  # the benchmarks come after


def test_a_stage_reads_only_what_it_declares(tiny_config):
    from rnnsearch import config as cfg

    p = cfg.stage_params(tiny_config, "train", "rnnsearch-50")
    assert set(p) == {"seed", "model", "train", "models.rnnsearch-50", "data.src", "data.tgt", "data.unicode",
                      "tokenize.normalize_punctuation"}
    nested = p.nested()
    assert nested["models"] == {"rnnsearch-50": tiny_config["models"]["rnnsearch-50"]} and "decode" not in nested


STAGE_NAMES = sorted({s.name for s in stages.STAGES} - TOOLS)

# One interpreter imports the third-party libraries the stages use, then forks a child per stage, which imports
# the stage's function and reports the files of rnnsearch that came with it (each child starts from the parent's
# modules: the CLI layer and the libraries, no stage's).
PROBE = """
import json, os, sys
import matplotlib, numpy, pandas, sacrebleu, sacremoses, torch, yaml  # noqa: E401 (the libraries, not rnnsearch)
from rnnsearch import cli, stages
found = {}
for name in sys.argv[1:]:
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        before = set(sys.modules)
        stages.BY_NAME[name].function()
        files = sorted(getattr(sys.modules[m], "__file__", None) or "" for m in set(sys.modules) - before
                       if m.startswith("rnnsearch"))
        os.write(w, json.dumps(files).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        found[name] = json.loads(f.read() or "null")
    os.wait()
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """Each stage's name → the files of rnnsearch that importing its function loads."""
    out = subprocess.run([sys.executable, "-c", PROBE, *STAGE_NAMES], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout
    return json.loads(out)


@pytest.mark.parametrize("name", STAGE_NAMES)
def test_stage_code_holds_every_module_the_stage_imports(name, loaded):
    """Import the stage's function in a fresh interpreter (a fork of one that loaded only the CLI layer and the
    libraries): every file of rnnsearch it loads is among the stage's declared source files."""
    assert loaded[name] is not None, f"{name}: importing its function failed (see the probe's stderr)"
    files = {str(Path(f).resolve().relative_to(REPO)) for f in loaded[name] if f}
    declared = set(stages.stage_code(name))
    assert files <= declared, f"{name}: imports {sorted(files - declared)} but does not declare them"
    assert all((REPO / f).is_file() for f in declared)


def test_import_closure_follows_imports_inside_functions():
    """translate imports the tokenizer inside a function (for users' text) and the checkpoint at the top."""
    code = stages.stage_code("translate")
    assert {"src/rnnsearch/data/text.py", "src/rnnsearch/data/vocab.py", "src/rnnsearch/checkpoint.py",
            "src/rnnsearch/model/fused.py", "src/rnnsearch/evaluation/score.py"} <= set(code)
    assert "src/rnnsearch/training/train.py" not in code  # decoding does not import training
    assert "src/rnnsearch/model/fused.py" not in stages.stage_code("tokenize")
    assert "src/rnnsearch/peer/joeynmt_driver.py" in stages.stage_code("peer")  # a script it runs
