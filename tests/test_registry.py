"""The stage registry (rnnsearch.commands): one record per stage, the CLI and the rules built from it, and each
stage's source dependencies equal to what its code really imports."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rnnsearch import commands
from rnnsearch.cli import build_parser

from .conftest import REPO

RULE_TEXT = "".join(f.read_text(encoding="utf-8") for f in sorted((REPO / "workflow" / "rules").glob("*.smk")))
RULES = dict(re.findall(r"^\s*rule (\w+):(.*?)(?=^\s*rule \w+:|\Z)", RULE_TEXT, re.M | re.S))  # name: its text
TOOLS = {"check-params", "dvc-yaml", "rehearse"}  # commands, not pipeline stages: no rule (rehearse runs Snakemake)


def test_every_record_is_a_command_and_every_stage_a_rule():
    parsed = set(build_parser()._subparsers._group_actions[0].choices)
    assert parsed == {s.name for s in commands.STAGES}
    for s in commands.STAGES:
        if s.name not in TOOLS:
            assert set(s.rules or (s.name.replace("-", "_"),)) <= set(RULES), s.name
    for rule in RULES:
        stage = commands.stage_of_rule(rule)
        assert stage is not None, f"rule {rule} runs no stage of the registry"
        assert f"rnnsearch {stage.name} " in RULES[rule], f"rule {rule} does not run `rnnsearch {stage.name}`"


def test_help_lists_the_stages_in_pipeline_order():
    """`rnnsearch --help`: the numbered stages by their step (count, 4., after filter, 3.; data-report, 9., after
    score, 7.), then the benchmarks and tools."""
    listed = list(build_parser()._subparsers._group_actions[0].choices)
    steps = [int(s.help.split(".")[0]) for s in map(commands.BY_NAME.get, listed) if s.help.split(".")[0].isdigit()]
    assert steps == sorted(steps) and len(steps) > 15, listed
    assert listed.index("filter") < listed.index("count") and listed.index("score") < listed.index("data-report")
    assert all(commands.BY_NAME[n].help[0].isdigit() for n in listed[: len(steps)])  # the benchmarks come after


def test_a_stage_reads_only_what_it_declares(tiny_config):
    from rnnsearch import config as cfg

    p = cfg.stage_params(tiny_config, "train", "rnnsearch-50")
    assert set(p) == {"seed", "model", "train", "models.rnnsearch-50", "decode.max_len_a", "decode.max_len_b",
                      "data.src", "data.tgt", "data.unicode", "tokenize.normalize_punctuation"}
    nested = p.nested()
    assert nested["models"] == {"rnnsearch-50": tiny_config["models"]["rnnsearch-50"]}
    assert nested["decode"] == {k: tiny_config["decode"][k] for k in ("max_len_a", "max_len_b")}  # and no other


STAGE_NAMES = sorted({s.name for s in commands.STAGES} - TOOLS)

# One interpreter imports the third-party libraries the stages use, then forks a child per stage, which imports
# the stage's function and reports the files of rnnsearch that came with it (each child starts from the parent's
# modules: the CLI layer and the libraries, no stage's).
PROBE = """
import json, os, sys
import matplotlib, numpy, pandas, sacrebleu, sacremoses, torch, yaml  # noqa: E401 (the libraries, not rnnsearch)
from rnnsearch import cli, commands
found = {}
for name in sys.argv[1:]:
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        before = set(sys.modules)
        commands.BY_NAME[name].function()
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
    declared = set(commands.stage_code(name))
    assert files <= declared, f"{name}: imports {sorted(files - declared)} but does not declare them"
    assert all((REPO / f).is_file() for f in declared)


def test_import_closure_follows_imports_inside_functions():
    """translate imports the tokenizer inside a function (for users' text) and the checkpoint at the top."""
    code = commands.stage_code("translate")
    assert {"src/rnnsearch/data/text.py", "src/rnnsearch/data/vocab.py", "src/rnnsearch/checkpoint.py",
            "src/rnnsearch/model/fused.py", "src/rnnsearch/evaluation/bleu.py"} <= set(code)
    assert "src/rnnsearch/training/train.py" not in code  # decoding does not import training
    for stage in ("train", "translate"):  # nor do they import the score stage's measures: changing those reruns neither
        assert not {"src/rnnsearch/evaluation/score.py", "src/rnnsearch/evaluation/coverage.py"} & set(
            commands.stage_code(stage)), stage
    assert "src/rnnsearch/evaluation/coverage.py" in commands.stage_code("score")
    assert "src/rnnsearch/model/fused.py" not in commands.stage_code("tokenize")
    assert "src/rnnsearch/peer/joeynmt_driver.py" in commands.stage_code("peer")  # a script it runs


def test_the_import_scan_finds_what_parsing_each_module_whole_finds():
    """closure._imports parses only the lines that may import rnnsearch; parsing each module of the package whole and
    walking every node finds the same files (an import after `;` or `:` on one line would be missed: rewrite it)."""
    import ast

    from rnnsearch.closure import PACKAGE, _imports, files_imported

    for path in sorted(PACKAGE.rglob("*.py")):
        whole = set(files_imported(ast.walk(ast.parse(path.read_text(encoding="utf-8")))))
        assert set(_imports(path)) == whole, f"{path.relative_to(PACKAGE)}: the scan and the parse differ"


def _bound(stage, tiny_config):
    """The stage's function bound to a command line of every argument (its default, or a name for a required one)
    and to the tiny config's values of its settings."""
    import argparse

    from rnnsearch import config as cfg

    args = argparse.Namespace(**{a.dest: "X" if a.kw.get("required") else a.kw.get("default") for a in stage.args})
    # translate's settings of an entry that decodes another model are optional: bound for such an entry
    decoded = {"arch": "rnnsearch", "train_max_len": 50, "decodes": "rnnsearch-50",
               "decode": {"length_norm": False, "length_penalty": 0.2, "coverage_penalty": 0.2}}
    config = {**tiny_config, "models": {**tiny_config["models"], "decoded": decoded}}
    model = ("decoded" if stage.name == "translate" else "rnnsearch-50") if hasattr(args, "model") else None
    args.model = model
    p = cfg.stage_params(config, stage.name, model) if stage.params else commands.Params()
    return stage.bind(stage.function(), args, p)


@pytest.mark.parametrize("name", sorted(commands.BY_NAME))
def test_every_argument_and_setting_reaches_the_function_by_name(name, tiny_config):
    """A record's arguments (but cli.py's own and the job's, `Arg.job`) and settings are exactly the parameters
    of its function, its typed requests' fields included: nothing parsed and dropped, nothing passed by position."""
    stage = commands.BY_NAME[name]
    kwargs, used = _bound(stage, tiny_config)
    dests = {a.dest for a in stage.args if not a.job}
    assert dests | set(stage.settings) == used, f"{name}: unused {sorted((dests | set(stage.settings)) - used)}"


def test_no_stage_function_takes_more_than_eight_parameters():
    import inspect

    for s in commands.STAGES:
        n = len(inspect.signature(s.function()).parameters)
        assert n <= 8, f"{s.run}: {n} parameters"


def _options(stage_name: str) -> tuple[set[str], set[str]]:
    """The options of a stage's parser, and those of them it requires."""
    parser = build_parser()._subparsers._group_actions[0].choices[stage_name]
    actions = [a for a in parser._actions if a.option_strings]
    return {o for a in actions for o in a.option_strings}, {a.option_strings[0] for a in actions if a.required}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_rules_command_line_is_one_its_stage_accepts(rule):
    """The shell string of each rule (workflow/rules/*.smk) against its stage's record: every flag it writes is an
    option of the stage, and every option the stage requires is written (flags that `params:` build, as
    translate_extra's search flags, are checked with the settings they come from, in test_flags)."""
    stage = commands.stage_of_rule(rule)
    head, block = RULES[rule].split("shell:", 1)
    indent = len(head.splitlines()[-1]) + 1  # the shell string's lines are indented deeper than `shell:`
    lines = [line for line in block.splitlines()[1:] if line.strip()]
    shell = "".join(line for line in itertools.takewhile(lambda x: len(x) - len(x.lstrip()) >= indent, lines))
    command = shell[shell.index(f"rnnsearch {stage.name} "):]
    written = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", command))
    for param in re.findall(r"\{params\.(\w+)\}", command):  # flags a rule's params build (score_extra's --entry)
        written |= set(re.findall(r"(--[a-z][a-z0-9-]*) ", RULES[rule].split(f"{param}=", 1)[1].split("\n")[1]))
    known, needed = _options(stage.name)
    assert written <= known, f"rule {rule}: {sorted(written - known)} are not options of `rnnsearch {stage.name}`"
    assert needed <= written, f"rule {rule}: `rnnsearch {stage.name}` requires {sorted(needed - written)}"


def test_no_module_of_rnnsearch_imports_itself_back():
    """No import cycle among the package's modules, imports inside functions included: a module reaches a module
    that reaches it back through no chain of imports (package __init__ files, which Python runs on the way to
    a submodule, are left out: rnnsearch.model's lazily imports seq2seq, which imports the presets it exports)."""
    from rnnsearch.closure import PACKAGE, _imports

    modules = [p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    edges = {p: {q for q in _imports(p) if q.name != "__init__.py" and q != p} for p in modules}

    def reach(start):
        seen, todo = set(), list(edges[start])
        while todo:
            q = todo.pop()
            if q not in seen:
                seen.add(q)
                todo += edges.get(q, ())
        return seen

    cycles = sorted(str(p.relative_to(PACKAGE)) for p in modules if p in reach(p))
    assert not cycles, f"modules on an import cycle: {cycles}"
