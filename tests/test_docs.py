"""The documentation, tested: every `snakemake`, `dvc` and `rnnsearch` command of README.md and docs/*.md (code
blocks, tables and inline code) is taken out and checked, so that a docs command that no longer works fails the
suite.

- `rnnsearch`: the stage exists, every option is one of its options (spelt out, not abbreviated), and every value
  given passes the option's type and choices (the arguments after `…` are the reader's).
- `dvc`: the subcommand exists; a stage named exists in dvc.yaml; `-S key=value` names a key of params.yaml (or a
  new one with DVC's `+`) and the value passes the schema.
- `snakemake`: dry-runs (`-n`) in a fresh copy of the repository and reads every config file it names (Snakemake
  prints them). Files a reader makes first get a stand-in in the copy: an overlay the docs describe (`beam5.yaml`,
  `FILE`) is empty, the user's own text that `workflow/configs/local.yaml` points at is an empty file, and
  params.yaml gets the paths the reader sets before `peer` and the benchmarks (`peer.python`, `bench.*`).

Inline fragments that are not commands (`rnnsearch <stage>`, `snakemake --configfile` without its file) are
skipped, and counted.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rnnsearch import config as cfg
from rnnsearch.cli import build_parser

from .conftest import REPO
from .forks import ForkServer, forked_snakemake, snakemake

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOOLS = ("snakemake", "dvc", "rnnsearch")
DVC_COMMANDS = {("repro",), ("exp", "run"), ("exp", "show"), ("status",), ("push",), ("pull",), ("commit",),
                ("metrics", "show"), ("metrics", "diff"), ("plots", "show"), ("plots", "diff"), ("remote", "add"),
                ("remote", "modify"), ("exp", "apply"), ("checkout",)}


@dataclass(frozen=True)
class Command:
    where: str  # file:line
    words: tuple[str, ...]  # from the tool's name on

    @property
    def tool(self) -> str:
        return Path(self.words[0]).name

    def __str__(self) -> str:
        return f"{self.where}: {' '.join(self.words)}"


def _command(text: str, where: str) -> Command | None:
    """The snakemake/dvc/rnnsearch command in one shell command (after `VAR=… `, a path, torchrun's `--`)."""
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    start = next((i for i, w in enumerate(words) if w in TOOLS or w.endswith(tuple(f"bin/{t}" for t in TOOLS))),
                 None)
    return None if start is None else Command(where, tuple(words[start:]))


def _shell_lines(block: str) -> list[tuple[int, str]]:
    """A code block's commands: continuation lines joined, comments dropped, split at &&, ; and |."""
    out, pending, first = [], "", 0
    for k, line in enumerate(block.splitlines()):
        line = re.sub(r"(^|\s)#.*$", "", line).rstrip()
        if not pending:
            first = k
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out += [(first, part) for part in re.split(r"&&|;|\|", pending + line) if part.strip()]
        pending = ""
    return out


def doc_commands() -> list[Command]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        name = doc.relative_to(REPO)
        for m in re.finditer(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M):
            line0 = text[: m.start(1)].count("\n") + 1
            found += [c for k, part in _shell_lines(m.group(1)) if (c := _command(part, f"{name}:{line0 + k}"))]
        prose = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
        for m in re.finditer(r"`([^`]+)`", prose):  # a code span may run over a line end
            code = " ".join(m.group(1).split())
            if "\n\n" not in m.group(1) and code.split()[0] in TOOLS and len(code.split()) > 1:
                line = prose[: m.start()].count("\n") + 1
                found += [c for c in [_command(code, f"{name}:{line}")] if c]
    return found


def fragment(c: Command) -> bool:
    """Not a command but a reference to one: a placeholder stage, or a flag without its value."""
    return any(w.startswith("<") or w == "key=value" for w in c.words) or \
        c.words[-1] in ("--configfile", "--config", "--profile")


COMMANDS = doc_commands()
CHECKED = [c for c in COMMANDS if not fragment(c)]


def test_the_docs_hold_the_commands_this_test_checks():
    counts = {tool: sum(c.tool == tool for c in CHECKED) for tool in TOOLS}
    print(f"{len(CHECKED)} documented commands checked ({counts}); {len(COMMANDS) - len(CHECKED)} fragments "
          f"skipped: {[' '.join(c.words) for c in COMMANDS if fragment(c)]}")
    assert counts["snakemake"] >= 15 and counts["dvc"] >= 10 and counts["rnnsearch"] >= 8, counts


def check_rnnsearch(c: Command) -> None:
    stages = build_parser()._subparsers._group_actions[0].choices
    stage = c.words[1]
    assert stage in stages, f"{c}: no stage {stage!r}"
    parser = stages[stage]
    options = {s: a for a in parser._actions for s in a.option_strings}
    words = list(c.words[2:])
    words = words[: words.index("…")] if "…" in words else words
    k = 0
    while k < len(words):
        flag = words[k].split("=")[0]
        assert flag in options, f"{c}: {flag!r} is not an option of `rnnsearch {stage}`"
        action, k = options[flag], k + 1
        if action.nargs == 0:
            continue
        values = [words[k - 1].split("=", 1)[1]] if "=" in words[k - 1] else []
        wanted = action.nargs if isinstance(action.nargs, int) else 1 if action.nargs in (None, "?") else len(words)
        while len(values) < wanted and k < len(words) and not words[k].startswith("--"):  # nargs="+": all of them
            values.append(words[k])
            k += 1
        if values:
            parser._get_values(action, values)


def check_dvc(c: Command) -> None:
    words = c.words[1:]
    sub = next((s for s in DVC_COMMANDS if tuple(words[: len(s)]) == s), None)
    assert sub is not None, f"{c}: not a dvc command this project uses"
    rest = list(words[len(sub):])
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    params = cfg.load_params([REPO / "params.yaml"])
    while rest:
        word = rest.pop(0)
        if word == "-S":
            key, value = rest.pop(0).split("=", 1)
            new = key.startswith("+")
            key = key.lstrip("+")
            *parents, leaf = key.split(".")
            node = params
            for p in parents:
                assert isinstance(node.get(p), dict), f"{c}: params.yaml has no section {p!r} of {key!r}"
                node = node[p]
            assert (leaf in node) != new, f"{c}: {key!r} {'is' if new else 'is not'} in params.yaml" + (
                " (DVC wants `+` for a new key)" if not new else " (no `+` for a key it has)")
            node[leaf] = yaml.safe_load(value)
            cfg.validate(params, source=str(c))
        elif not word.startswith("-") and sub == ("repro",):
            assert word in stages, f"{c}: dvc.yaml has no stage {word!r}"


@pytest.mark.parametrize("command", [c for c in CHECKED if c.tool != "snakemake"], ids=str)
def test_a_documented_rnnsearch_or_dvc_command_is_valid(command: Command):
    (check_rnnsearch if command.tool == "rnnsearch" else check_dvc)(command)


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory) -> Path:
    return make_copy(tmp_path_factory.mktemp("docs"))


def make_copy(dest: Path) -> Path:
    """The repository's files as a clone has them, params.yaml as shipped but for the paths a reader sets."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            (dest / f).write_bytes((REPO / f).read_bytes())
    params = (dest / "params.yaml").read_text()
    for key in ("python", "data", "peer"):  # peer.python, bench.data, bench.peer: set by the reader first
        params = re.sub(rf"^(  {key}:\s+)null", rf"\g<1>{dest / 'reader'}", params, count=1, flags=re.M)
    (dest / "params.yaml").write_text(params)
    (dest / "beam5.yaml").write_text("decode: {beam: 5}\n")  # as docs/ablations.md describes it
    profiles = dest / ".config" / "snakemake"  # docs/cluster.md's first step: the profile installed as `slurm`
    profiles.mkdir(parents=True)
    (profiles / "slurm").symlink_to(dest / "workflow" / "profiles" / "slurm")
    return dest


def reader_files(words: list[str], ws: Path) -> None:
    """Stand-ins for what the reader makes before running a command: an overlay the docs describe but do not
    ship (gpus4.yaml, joeynmt.yaml) is empty; the text files an overlay points at (data.local, extra_tests)
    are empty files."""
    files = [w for w in words if w.endswith((".yaml", ".yml"))]
    for name in files:
        if not (ws / name).exists():
            (ws / name).write_text("{}\n")
        overlay = yaml.safe_load((ws / name).read_text()) or {}
        data = overlay.get("data", {})
        pair = (data.get("src", "en"), data.get("tgt", "fr"))
        prefixes = [*(data.get("local") or {}).values(), *(overlay.get("extra_tests") or {}).values()]
        for prefix in prefixes:
            for lang in pair if not prefix.startswith("results/") else ():
                (ws / f"{prefix}.{lang}").parent.mkdir(parents=True, exist_ok=True)
                (ws / f"{prefix}.{lang}").touch()


def snakemake_dry_run(c: Command, ws: Path, server: ForkServer) -> str:
    words = [w if w != "FILE" else "beam5.yaml" for w in c.words[1:]]
    if "--report" in words:  # a report needs results: the same workflow and config files, dry-run
        i = words.index("--report")
        del words[i : i + 2]
    reader_files(words, ws)
    for _ in range(3):
        status, out = snakemake(server, ws, ["-n", *words])
        missing = re.findall(r"^ {4,}(\S+)$", out.split("Missing input files")[1], re.M) \
            if "MissingInputException" in out else []
        missing = [ws / f for f in missing if not (ws / f).resolve().is_relative_to(ws / "results") and ":" not in f]
        if not missing:
            break
        for f in missing:  # the reader's own files: text (local.yaml), the peer benchmark's scripts
            f.parent.mkdir(parents=True, exist_ok=True)
            f.touch()
    assert status == 0 and "This was a dry-run" in out, f"{c}:\n{out[-3000:]}"
    return out


SNAKEMAKE = sorted({c.words: c for c in CHECKED if c.tool == "snakemake"}.values(), key=str)


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory) -> dict[tuple, tuple[Path, str]]:
    """Every documented snakemake command dry-run, two at a time (each a fork of a Snakemake already loaded), each
    half in its own fresh copy: command words → (the copy, Snakemake's output or the failure)."""
    from concurrent.futures import ThreadPoolExecutor

    # the folders made here, one thread: tmp_path_factory is not thread-safe (two threads creating this worker's
    # base folder at once: FileExistsError for one, where no test had made a temporary folder before)
    roots = [tmp_path_factory.mktemp(f"docs{half}") for half in (0, 1)]

    def run_half(half: int) -> dict:
        ws, done = make_copy(roots[half]), {}
        with forked_snakemake() as server:
            for c in SNAKEMAKE[half::2]:
                try:
                    done[c.words] = (ws, snakemake_dry_run(c, ws, server))
                except AssertionError as e:
                    done[c.words] = (ws, f"FAILED: {e}")
        return done

    with ThreadPoolExecutor(2) as pool:
        return {k: v for half in pool.map(run_half, (0, 1)) for k, v in half.items()}


@pytest.mark.slow
@pytest.mark.parametrize("command", SNAKEMAKE, ids=str)
def test_a_documented_snakemake_command_dry_runs_with_every_config_file_it_names(command: Command, dry_runs: dict):
    fresh_copy, out = dry_runs[command.words]
    assert not out.startswith("FAILED: "), out
    words = [w if w != "FILE" else "beam5.yaml" for w in command.words]
    named = set()
    for k, w in enumerate(words):
        if w in ("--configfile", "--configfiles"):
            named |= {str((fresh_copy / f).resolve()) for f in
                      [*(x for x in words[k + 1 :] if not x.startswith("-"))][: len(words)]
                      if f.endswith((".yaml", ".yml"))}
    read = set(re.findall(r"PosixPath\('([^']+)'\)", out.split("Config file(s):")[1].split("\n")[0])) \
        if "Config file(s):" in out else set()
    assert named <= {str(Path(f).resolve()) for f in read}, f"{command}: Snakemake read {sorted(read)}"


def test_the_two_flag_form_of_an_overlay_on_a_preset_fails_the_docs_check(fresh_copy: Path):
    """Snakemake keeps only the last --configfile flag: the form docs/ablations.md once gave ran the default."""
    bad = Command("docs/ablations.md:16", ("snakemake", "--configfile", "workflow/configs/paper.yaml",
                                           "--configfile", "beam5.yaml"))
    with pytest.raises(AssertionError, match="--configfile given 2 times: Snakemake reads only the files of the last"):
        with forked_snakemake() as server:
            snakemake_dry_run(bad, fresh_copy, server)


def test_update_counts_the_docs_give_for_a_preset_are_its_own_or_dated():
    """docs/results.md said the local.yaml run trained RNNsearch 2,000 updates where check-params shows 2,400:
    a paragraph that gives a preset's update counts either matches the preset or names the commit it measured."""
    checked = 0
    for doc in DOCS:
        for paragraph in doc.read_text(encoding="utf-8").split("\n\n"):
            if re.search(r"\bcommit [0-9a-f]{7}", paragraph):  # a dated run: its settings were those of then
                continue
            for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", paragraph):
                presets = set(re.findall(r"workflow/configs/(\w+)\.yaml", sentence))
                stated = {int(n.replace(",", "")) for n in re.findall(r"\b(\d[\d,]*) updates\b", sentence)}
                if len(presets) != 1 or not stated:
                    continue
                preset = presets.pop()
                config = cfg.load_params([REPO / "params.yaml", REPO / "workflow" / "configs" / f"{preset}.yaml"])
                actual = {cfg.train_config(config, m).max_updates for m in config["models"]}
                assert stated <= actual, f"{doc.name}: {sorted(stated)} updates for {preset}.yaml, which trains " \
                                         f"{sorted(actual)}: {sentence[:300]}"
                checked += 1
    print(f"{checked} undated paragraphs with a preset's update counts checked")


def test_the_cluster_time_table_agrees_with_paper_yaml_and_the_rehearsal():
    """docs/cluster.md's table of the paper's trainings on one GPU: each model's updates are paper.yaml's, its rate
    and time the projection of the GPU rehearsal committed in docs/bench; paper.yaml's training jobs (runtime ×
    attempts) hold twice the longest, their memory three times the trainings' measured peak, and a translation
    job's time ten times the longest measured."""
    from rnnsearch.bench.rehearsal import projection as project

    (rehearsed,) = sorted((REPO / "docs" / "bench").glob("rehearsal-h200-*.json"))
    measured = json.loads(rehearsed.read_text(encoding="utf-8"))
    config = cfg.load_params([REPO / "params.yaml", REPO / "workflow" / "configs" / "paper.yaml"])
    # the measured rates, projected with today's paper.yaml (RNNsearch-50* trains only after RNNsearch-50)
    projection = project(measured["trainings"], measured["decoding"], config)["models"]
    train, decode = config["cluster"]["train"], config["cluster"]["decode"]
    cluster = (REPO / "docs" / "cluster.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (RNN\w+-\d+\*?) \| ([^|]+) \| ([\d.]+) updates/s \| (?:at most )?([\d.]+) h \| (\d+) \|$",
                      cluster, re.M)
    assert len(rows) == len(config["models"]) == len(projection) == 5, rows
    for label, updates, rate, hours, jobs in rows:
        name = label.lower().replace("*", "-star")
        assert int(re.search(r"[\d,]+", updates).group(0).replace(",", "")) == projection[name]["budget"] \
            == cfg.train_config(config, name).max_updates, (label, updates)
        assert float(rate) == round(projection[name]["updates_per_s"], 1), (label, rate)
        assert float(hours) == projection[name]["hours"], (label, hours)
        assert int(jobs) == -(-float(hours) // (train["runtime"] / 60)), (label, jobs)
    longest = max(m["hours"] for m in projection.values())
    assert train["runtime"] / 60 * train["attempts"] >= 2 * longest
    peak = lambda stage, key: max(j[key] for j in measured["jobs"] if j["stage"] == stage)  # noqa: E731
    assert train["mem_mb"] >= 3 * peak("train", "peak_rss_mb")
    assert decode["mem_mb"] >= 3 * peak("translate", "peak_rss_mb")
    assert decode["runtime"] * 60 >= 10 * peak("translate", "seconds")
    # the bf16 rehearsal on one H100, projected with today's paper.yaml, at its budgets and at Table 2's updates
    h100 = json.loads((REPO / "docs" / "bench" / "rehearsal-bf16-h100-2026-11-27.json").read_text(encoding="utf-8"))
    assert h100["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"
    bf16 = project(h100["trainings"], h100["decoding"], config)
    rows = re.findall(r"^\| (RNN\w+-\d+\*?) \| ([\d,]+) \| ([\d.]+) updates/s \| ([\d.]+) h \| ([\d.]+) h \|$",
                      cluster, re.M)
    assert len(rows) == 5, rows
    for label, updates, rate, hours, table2 in rows:
        m = bf16["models"][label.lower().replace("*", "-star")]
        assert int(updates.replace(",", "")) == m.get("trains", m["budget"]), label
        assert float(rate) == round(m["updates_per_s"], 1) and float(hours) == m["hours"], label
        assert float(table2) == m.get("table2_hours", m["hours"]), label
    assert f"**{bf16['one_device_hours']} hours** to RNNsearch-50*'s full budget, **" \
           f"{bf16['table2_one_device_hours']} hours** at Table 2's updates" in " ".join(cluster.split())
    assert f"{bf16['one_model_per_device_hours']} and {bf16['table2_one_model_per_device_hours']} hours" in cluster
    assert config["train"]["precision"] == "bf16" or "In bf16" not in cluster  # the page follows paper.yaml
    asks = f"{train['runtime'] / 60:g} hours (`runtime: {train['runtime']}`), at most " \
           f"{train['attempts']} jobs in a chain"
    assert asks in " ".join(cluster.split())  # what the page says one training job asks for
