"""The whole DAG through Snakemake, on the tiny config, in a copy of the repository (DVC's run of it:
test_dvc.py, on another worker).

Checks: every output is written; a second `snakemake` does nothing; changing one model's key reruns only
that model's jobs and the aggregates; the hand-overs between Snakemake and DVC rerun nothing; lint and dvc.yaml
are in step.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rnnsearch.evaluation.names import paper_name

from .conftest import PIXEL, REPO, dag_copy, page_check
from .conftest import run as sh  # a command of this environment in a workspace

MODELS = ("rnnencdec-30", "rnnsearch-30", "rnnencdec-50", "rnnsearch-50")
DVC_MODELS = MODELS  # the DVC tests' models: all four, as `dvc exp show` must fit them in 120 columns

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def job_counts(dry_run_output: str) -> dict[str, int]:
    """Snakemake's 'Job stats' table of a dry run: {rule: count}."""
    table = dry_run_output.split("Job stats:")[1].split("\n\n")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m.group(1) != "total"}


def git_repository(ws: Path) -> Path:
    """`ws` with its dvc.yaml written for its params.yaml, as a git repository of one commit."""
    sh([str(BIN / "rnnsearch"), "dvc-yaml"], ws)  # the tiny config draws 2 alignment figures, not 4
    sh(["git", "init", "-q"], ws)
    for key, value in (("user.name", "t"), ("user.email", "t@t")):  # DVC stashes the workspace with git
        sh(["git", "config", key, value], ws)
    sh(["git", "add", "-A"], ws)
    sh(["git", "commit", "-qm", "init"], ws)
    return ws


@pytest.fixture(scope="module")
def workspace(tiny_dag: Path, tmp_path_factory) -> Path:
    """A copy of the tiny DAG (the tiny params.yaml, two replicates of each model, built by `snakemake --cores 2`
    in a copy of the repository's files as a fresh clone has them), with its dvc.yaml, in git."""
    return git_repository(dag_copy(tiny_dag, tmp_path_factory.mktemp("ws")))


def test_lint_dry_run_and_dvc_yaml_are_clean():
    lint = sh([str(BIN / "snakemake"), "--lint"], REPO)
    assert "Congratulations, your workflow is in a good condition!" in lint.stdout + lint.stderr
    dry = sh([str(BIN / "snakemake"), "-n", "--forceall"], REPO)
    counts = job_counts(dry.stdout)
    assert counts["train"] == 4 and counts["translate"] == 4 and counts["tokenize"] == 4  # dev, test
    shards = yaml.safe_load((REPO / "params.yaml").read_text())["prepare"]["shards"]
    assert counts["shard"] == 1 and counts["tokenize_shard"] == counts["count"] == 2 * shards
    assert counts["clean"] == shards and counts["gather"] == 2 and counts["data_report"] == 1
    sh([str(BIN / "rnnsearch"), "dvc-yaml", "--check"], REPO)


def test_snakemake_runs_everything_then_nothing(workspace: Path):
    """`snakemake --cores 2` (the tiny_dag fixture) wrote every output; a second run does nothing."""
    for f in ["results/tables/table1.csv", "results/tables/table1.md", "results/tables/table2.csv",
              "results/tables/table2.md", "results/figures/bleu_by_length.png", "results/figures/bleu_by_length.pdf",
              "results/figures/alignment_a.png", "results/figures/alignment_b.png", "results/figures/alignment_long.png",
              "results/report.md",
              *[f"results/scores/{m}/replicate{r}.json" for m in MODELS for r in (1, 2)]]:
        assert (workspace / f).stat().st_size > 0, f
    for r in (1, 2):
        assert (workspace / f"results/logs/train/rnnsearch-50/replicate{r}.log").read_text().count("update") >= 3
    seeds = [json.loads((workspace / f"results/models/rnnsearch-50/replicate{r}/train_stats.json").read_text())["seed"]
             for r in (1, 2)]
    assert seeds == [1234, 1235]
    per_replicate = pd.read_csv(workspace / "results/tables/table1_replicates.csv")
    assert list(per_replicate["Replicate"]) == [1, 2] * 4 and list(per_replicate["Seed"]) == [1234, 1235] * 4
    table1 = pd.read_csv(workspace / "results/tables/table1.csv")
    assert list(table1["Replicates"]) == [2] * 4
    for m, runs in per_replicate.groupby("Model"):
        row = table1[table1["Model"] == m].iloc[0]
        assert row["All (tokenized BLEU)"] == pytest.approx(runs["All (tokenized BLEU)"].mean())
        assert row["All (tokenized BLEU) sd"] == pytest.approx(runs["All (tokenized BLEU)"].std())
    assert " ± " in (workspace / "results/tables/table1.md").read_text()
    curve = pd.read_csv(workspace / "results/figures/bleu_by_length.csv")
    assert set(curve["replicate"]) == {1, 2}
    for maxlen in (30, 50):  # each training set binarized (what its trainings read) and in the data report
        header = json.loads((workspace / f"results/data/bin/train{maxlen}.json").read_text())
        pairs = len((workspace / f"results/data/train{maxlen}.en").read_text().splitlines())
        assert header["pairs"] == pairs and header["dtype"] == "uint8"  # 153 ids
        assert f"| train{maxlen} | {pairs:,} | uint8 |" in (workspace / "results/data/report.md").read_text()
    again = sh([str(BIN / "snakemake"), "--cores", "2"], workspace)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_config_on_the_command_line_sets_replicates_and_reaches_the_stages(workspace: Path):
    dry = sh([str(BIN / "snakemake"), "-n", "--cores", "2", "--config", "replicates=3"], workspace)
    counts = job_counts(dry.stdout)
    assert counts["train"] == counts["translate"] == counts["score"] == 4  # replicate 3 of each model
    assert counts["tables"] == counts["figures"] == counts["report"] == 1
    assert "results/models/rnnsearch-50/replicate3/model.pt" in dry.stdout
    # a section's key, merged into it and checked like params.yaml: the message names the key and the --config
    bad = sh([str(BIN / "snakemake"), "-n", "--cores", "2", "--config", "train={lr: -1}"], workspace, check=False)
    assert bad.returncode != 0 and "'train.lr'" in bad.stdout + bad.stderr and "--config" in bad.stdout + bad.stderr
    # the stages read the same merged values: a stage started by hand with the workflow's environment
    env = {**os.environ, "RNNSEARCH_CONFIG": json.dumps({"replicates": 3})}
    merged = subprocess.run([str(BIN / "rnnsearch"), "check-params"], cwd=workspace, env=env, capture_output=True,
                            text=True, check=True).stdout
    assert yaml.safe_load(merged)["replicates"] == 3


def test_html_report_renders_its_figures_in_a_browser(workspace: Path, tmp_path: Path):
    """`snakemake --report` with no reStructuredText error in its captions, then headless Chromium opens every
    result as a reader would (category, then the eye button) and reports the images the page shows: every figure
    must be there and decode."""
    built = sh([str(BIN / "snakemake"), "--report", "results/report.html"], workspace)
    page = (workspace / "results/report.html").read_text(encoding="utf-8")
    # none printed (docutils' "(ERROR/3) Undefined substitution"), none shown as a "problematic" link on the page
    problematic = re.search(r'class=\\?"problematic', page)  # in the page's data, its quotes escaped
    assert "ERROR/" not in built.stdout + built.stderr and not problematic, built.stderr[-2000:]
    report = page_check(workspace / "results/report.html", "report_check.js", tmp_path, "</body>",
                        'const CATEGORIES = ["Figures", "Tables", "Alignment"];')
    assert report["error"] is None and report["categories"] == {"Figures": True, "Tables": True, "Alignment": True}
    table1 = pd.read_csv(workspace / "results/tables/table1.csv")  # the landing page shows Table 1 as text
    for model, bleu in zip(table1["Model"], table1["All (tokenized BLEU)"]):
        row = next(line for line in report["landing"].splitlines() if line.startswith(paper_name(model, model[:9])))
        assert f"{bleu:.2f}" in row, (model, row)
    assert "Table 2: learning statistics" in report["landing"]
    for window in ((1280, 1000), (1920, 1080)):  # the landing page: its title in reach, nothing over the tables
        (tmp_path / str(window[0])).mkdir()
        landing = page_check(workspace / "results/report.html", "report_landing_check.js", tmp_path / str(window[0]),
                             "</body>", window=window)
        assert landing["error"] is None and landing["title"].startswith("rnnsearch: Bahdanau"), landing
        assert landing["title_box"]["top"] >= -PIXEL, landing  # scrolled to the top, the title is on the screen
        assert len(landing["tables"]) >= 2 and landing["graph"], landing
        for table in landing["tables"]:
            overlap = (min(table["right"], landing["graph"]["right"]) - max(table["left"], landing["graph"]["left"]),
                       min(table["bottom"], landing["graph"]["bottom"]) - max(table["top"], landing["graph"]["top"]))
            assert min(overlap) <= PIXEL, (window, table, landing["graph"])  # the rule graph beside or below, not over
    figures = ["bleu_by_length.png", "alignment_a.png", "alignment_b.png", "alignment_long.png"]
    for name in figures:
        shown = report["shown"][f"results/figures/{name}"]["images"]
        assert shown and all(complete and w > 100 and h > 100 for complete, w, h in shown), (name, shown)
    for name in ("tables/table1.csv", "tables/table2.md", "scores/aer.json"):
        assert f"results/{name}" in report["shown"]


def test_changing_one_model_reruns_only_what_depends_on_it(workspace: Path):
    params = workspace / "params.yaml"
    original = params.read_text()
    changed = yaml.safe_load(original)
    changed["models"]["rnnsearch-50"]["n"] = 12
    params.write_text(yaml.safe_dump(changed, sort_keys=False))
    try:
        dry = sh([str(BIN / "snakemake"), "-n", "--cores", "2"], workspace)
        assert job_counts(dry.stdout) == {"train": 2, "translate": 2, "score": 2, "aer": 1, "tables": 1, "figures": 1,
                                          "explorer": 1, "report": 1, "all": 1}
        assert "results/models/rnnsearch-50/replicate1/model.pt" in dry.stdout
        assert "results/models/rnnsearch-30/replicate1/model.pt" not in dry.stdout
    finally:
        params.write_text(original)


DATA_JOBS = {"corpus", "shard", "tokenize", "tokenize_shard", "clean", "gather", "filter", "count", "vocab", "data_report"}


@pytest.mark.parametrize("overlay", ["empty", "threads", "decode", "copy", "variant", "decodes"])
def test_an_overlay_reruns_only_the_jobs_whose_keys_it_changes(workspace: Path, tmp_path: Path, overlay: str):
    """The same change as an edit of params.yaml or as a --configfile overlay plans the same jobs: a job's rerun
    depends on the values of the keys its stage reads, never on which files gave them. A copy of params.yaml
    with decode.beam changed (its nulls restated) is such an overlay. Thread counts (config.SPEED_ONLY) rerun
    nothing, as an overlay or on the command line."""
    path = tmp_path / "overlay.yaml"
    copy = yaml.safe_load((workspace / "params.yaml").read_text())
    copy["decode"]["beam"] = 2
    assert copy["peer"]["python"] is None
    path.write_text({"empty": "{}\n", "threads": "train: {threads: 8}\ndecode: {threads: 4}\n",
                     "decode": "decode: {beam: 2}\n", "copy": yaml.safe_dump(copy, sort_keys=False),
                     "variant": "models:\n  rnnsearch-50b: {arch: rnnsearch, train_max_len: 50, n: 12}\n",
                     "decodes": "models:\n  gnmt: {arch: rnnsearch, train_max_len: 50, decodes: rnnsearch-50, decode: "
                                "{length_norm: false, length_penalty: 0.2, coverage_penalty: 0.2}}\n"}[overlay])
    dry = sh([str(BIN / "snakemake"), "-n", "--cores", "2", "--configfile", str(path)], workspace)
    if overlay in ("empty", "threads"):
        assert "Nothing to be done" in dry.stdout + dry.stderr
        if overlay == "threads":
            dry = sh([str(BIN / "snakemake"), "-n", "--cores", "2", "--config", "train={threads: 8}",
                      "decode={threads: 4}"], workspace)
            assert "Nothing to be done" in dry.stdout + dry.stderr
        return
    counts = job_counts(dry.stdout)
    assert not DATA_JOBS & set(counts)
    if overlay in ("decode", "copy"):
        assert "train" not in counts and counts["translate"] == 8
    elif overlay == "decodes":  # rnnsearch-50's trainings decoded again, no training of its own
        assert "train" not in counts and counts["translate"] == counts["score"] == 2
        planned = re.findall(r"^rule translate:\n    input: (\S+),", dry.stdout, re.M)
        assert sorted(planned) == [f"results/models/rnnsearch-50/replicate{r}/model.pt" for r in (1, 2)], planned
    else:
        assert counts["train"] == 2 and "results/models/rnnsearch-50b/replicate2/model.pt" in dry.stdout
        assert counts["translate"] == 2 and counts["score"] == 2


# docs/ablations.md's hand-overs, as the docs give them
SNAKEMAKE_TO_DVC = "dvc commit -f --no-relink"
DVC_TO_SNAKEMAKE = "snakemake --touch --forceall --cores 1"


def planned_by_times(ws: Path) -> dict[str, int]:
    """The jobs `snakemake -n` plans when it judges by file times alone, as it judges files over 1 MB (the
    paper's training text, every model): its checksum fallback off."""
    out = sh([str(BIN / "snakemake"), "-n", "--max-checksum-file-size", "0"], ws).stdout
    return job_counts(out) if "Job stats:" in out else {}


def test_the_documented_hand_overs_between_snakemake_and_dvc_rerun_nothing(tiny_dag: Path, tmp_path: Path):
    """A Snakemake run handed to DVC, then outputs rewritten by DVC (`dvc checkout --relink`, as `dvc pull` or
    `dvc exp apply` write them) handed back: afterwards neither tool plans anything. `dvc commit -f` alone (what
    the docs said before) leaves the training text newer than the models: Snakemake then retrains them all."""
    ablations = (REPO / "docs" / "ablations.md").read_text()
    assert SNAKEMAKE_TO_DVC in ablations and DVC_TO_SNAKEMAKE in ablations
    ws = git_repository(dag_copy(tiny_dag, tmp_path / "ws"))
    assert planned_by_times(ws) == {}
    sh(SNAKEMAKE_TO_DVC.split(), ws)
    assert planned_by_times(ws) == {}
    assert "up to date" in sh([str(BIN / "dvc"), "status"], ws).stdout

    sh([str(BIN / "dvc"), "checkout", "--relink", "--force"], ws)  # DVC rewrites every output, in its order
    assert planned_by_times(ws).get("train", 0) > 0  # what a user would retrain without the hand-over
    sh(DVC_TO_SNAKEMAKE.split(), ws)
    assert planned_by_times(ws) == {}
    assert "Nothing to be done" in sh([str(BIN / "snakemake"), "-n"], ws).stdout
    assert "up to date" in sh([str(BIN / "dvc"), "status"], ws).stdout

    sh(["dvc", "commit", "-f"], ws)  # the old advice: the files copied back from DVC's cache, in its order
    assert planned_by_times(ws).get("train", 0) > 0
