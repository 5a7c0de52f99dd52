"""The whole DAG through Snakemake and through DVC, on the tiny config, in a copy of the repository.

Checks: every output is written; a second `snakemake` does nothing; changing one model's key reruns only
that model's jobs and the aggregates; `dvc repro` runs the same commands and gets the same numbers;
`dvc status` is clean afterwards and flags exactly the changed model; lint and dvc.yaml are in step.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rnnsearch.evaluation.names import paper_name

from .conftest import REPO, dag_copy, page_check, repo_copy
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


@pytest.fixture(scope="module")
def dvc_workspace(tmp_path_factory) -> Path:
    """A copy of the repository's files with the tiny params.yaml (one replicate of each of DVC_MODELS; the
    training text in one shard, where tiny_dag has two) and its dvc.yaml, in git, nothing run: the DVC tests below
    run in it, in order."""
    others = [f"models.{m}" for m in MODELS if m not in DVC_MODELS]
    return git_repository(repo_copy(tmp_path_factory.mktemp("dvc"), {"remove": others, "prepare": {"shards": 1}}))


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


@pytest.mark.parametrize("overlay", ["empty", "threads", "decode", "copy", "variant"])
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
                     "variant": "models:\n  rnnsearch-50b: {arch: rnnsearch, train_max_len: 50, n: 12}\n"}[overlay])
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
    else:
        assert counts["train"] == 2 and "results/models/rnnsearch-50b/replicate2/model.pt" in dry.stdout
        assert counts["translate"] == 2 and counts["score"] == 2


def test_dvc_repro_gives_the_same_results_and_tracks_params(dvc_workspace: Path, tiny_dag: Path, tmp_path: Path):
    """`dvc repro` runs every stage; its outputs are those of `snakemake` (tiny_dag: replicate 1 of each model, the
    training text in two shards where this workspace has one)."""
    workspace = dvc_workspace
    repro = sh([str(BIN / "dvc"), "repro"], workspace)
    assert "Running stage 'train_rnnsearch-50'" in repro.stdout
    smk = tiny_dag / "results"
    for m in DVC_MODELS:
        a = json.loads((smk / f"scores/{m}/replicate1.json").read_text())
        b = json.loads((workspace / f"results/scores/{m}/replicate1.json").read_text())
        assert a == b, f"{m}: snakemake and dvc repro disagree"
        sa = json.loads((smk / f"models/{m}/replicate1/train_stats.json").read_text())
        sb = json.loads((workspace / f"results/models/{m}/replicate1/train_stats.json").read_text())
        assert (sa["train_nll"], sa["dev_nll"], sa["seed"]) == (sb["train_nll"], sb["dev_nll"], sb["seed"])
    per_replicate = pd.read_csv(smk / "tables/table1_replicates.csv")
    ours = per_replicate[(per_replicate["Replicate"] == 1) & per_replicate["Model"].isin(DVC_MODELS)]
    pd.testing.assert_frame_equal(pd.read_csv(workspace / "results/tables/table1_replicates.csv"),
                                  ours.reset_index(drop=True))
    assert "up to date" in sh([str(BIN / "dvc"), "status"], workspace).stdout
    figure2_drawn_offline(workspace, tmp_path, ["plots", "show"], 1)
    plots = json.loads(sh([str(BIN / "dvc"), "plots", "show", "--json"], workspace).stdout)
    names = {name.split("::")[-1] for name in (plots["data"] if "data" in plots else plots)}
    assert names == {"results/figures/bleu_by_length_models.csv"} | {  # the plots docs/ablations.md names
        f"results/models/{m}/replicate1/{f}" for m in DVC_MODELS for f in ("learning_curve.tsv", "validation.tsv")}

    params = workspace / "params.yaml"
    original = params.read_text()
    changed = yaml.safe_load(original)
    changed["models"]["rnnencdec-30"]["max_updates"] = 5
    params.write_text(yaml.safe_dump(changed, sort_keys=False))
    status = sh([str(BIN / "dvc"), "status"], workspace).stdout
    stages = set(re.findall(r"^(\S+):$", status, re.M))
    assert stages == {"train_rnnencdec-30", "report"}, status  # the report prints every param
    changed = yaml.safe_load(original)
    changed["train"]["threads"], changed["decode"]["threads"] = 8, 4  # speed only: no stage changes
    params.write_text(yaml.safe_dump(changed, sort_keys=False))
    assert "up to date" in sh([str(BIN / "dvc"), "status"], workspace).stdout
    params.write_text(original)


def test_editing_a_module_reruns_exactly_the_stages_that_import_it(workspace: Path, dvc_workspace: Path):
    """decoding/search.py is imported by training (validation) and translation, and by no data stage nor forced
    alignment (which scores the reference, searching nothing): after an edit, `dvc status` flags exactly the stages
    whose import closure holds it, and `snakemake -n` plans those jobs (what follows them reruns too) and no data
    preparation."""
    from rnnsearch.commands import STAGES, stage_code, stage_of_rule

    module = "src/rnnsearch/decoding/search.py"
    importers = {s.name for s in STAGES if module in stage_code(s.name)}
    assert {"train", "translate"} <= importers and not importers & {"corpus", "tokenize", "vocab", "aer"}
    originals = {ws: (ws / module).read_text() for ws in (workspace, dvc_workspace)}
    try:
        for ws, original in originals.items():
            (ws / module).write_text(original + "\n# an edit\n")
        status = sh([str(BIN / "dvc"), "status"], dvc_workspace).stdout
        flagged = set(re.findall(r"^(\S+):$", status, re.M))
        dvc_yaml = yaml.safe_load((dvc_workspace / "dvc.yaml").read_text())["stages"]
        assert flagged == {name for name, stage in dvc_yaml.items() if module in stage["deps"]}, status
        assert {"train_rnnsearch-50", "translate_rnnencdec-30"} <= flagged and "aer" not in flagged
        dry = sh([str(BIN / "snakemake"), "-n", "--cores", "2"], workspace).stdout
        direct = {m.group(1) for m in re.finditer(r"^(?:local)?rule (\w+):\n(?:    .*\n)*?    reason: Updated input files: ([^\n]*)",
                                                  dry, re.M) if module in m.group(2)}
        # Snakemake gives one reason per job: translate jobs, whose model reruns too, may show that one instead
        assert "train" in {stage_of_rule(r).name for r in direct} and {stage_of_rule(r).name for r in direct} <= \
            importers, dry[-3000:]
        counts = job_counts(dry)
        assert counts["train"] == 8 and counts["translate"] == 8, counts
        assert not set(counts) & {"corpus", "tokenize", "tokenize_shard", "clean", "vocab", "count"}
    finally:
        for ws, original in originals.items():
            (ws / module).write_text(original)


def test_dvc_push_and_pull_through_the_default_remote(dvc_workspace: Path):
    """`dvc push` to the repository's local-folder remote, lose the cache and every output, `dvc pull` them back."""
    workspace = dvc_workspace
    keep = {f: (workspace / f).read_bytes() for f in ("results/scores/rnnsearch-50/replicate1.json",
                                                       "results/models/rnnsearch-50/replicate1/model.pt",
                                                       "results/figures/alignment_a.png")}
    push = sh([str(BIN / "dvc"), "push"], workspace)
    assert (workspace / ".dvc-storage").is_dir() and "pushed" in push.stdout + push.stderr
    shutil.rmtree(workspace / ".dvc" / "cache")
    for path in (workspace / "results").iterdir():
        if path.name != "README.md":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert "deleted" in sh([str(BIN / "dvc"), "status"], workspace).stdout
    sh([str(BIN / "dvc"), "pull"], workspace)
    assert "up to date" in sh([str(BIN / "dvc"), "status"], workspace).stdout
    for f, data in keep.items():
        assert (workspace / f).read_bytes() == data, f


EXP_SHOW = "dvc exp show --only-changed --drop 'Created|State|Executor|results/.*|.*No UNK' --keep '.*\\.All'"


def test_queued_decoding_experiments_rerun_only_decoding_and_what_follows(dvc_workspace: Path, tmp_path: Path):
    """docs/ablations.md's grid: with dvc.lock committed, experiments of decode.beam queued and run together rerun
    no training (nor any data stage): translate, score, tables, figures, explorer and report only. `dvc exp show
    --only-changed` then shows the changed parameter and the headline metrics, nothing else."""
    workspace = dvc_workspace
    sh(["git", "add", "-A"], workspace)
    sh(["git", "commit", "-qm", "results of dvc repro"], workspace)  # dvc.lock with it
    for beam in (1, 2):
        sh([str(BIN / "dvc"), "exp", "run", "--queue", "-S", f"decode.beam={beam}"], workspace)
    run = sh([str(BIN / "dvc"), "exp", "run", "--run-all"], workspace)
    experiments = run.stdout.split("Reproducing experiment")[1:]
    assert len(experiments) == 2, run.stdout
    for log in experiments:
        ran = set(re.findall(r"Running stage '([^']+)'", log))
        assert {f"translate_{m}" for m in DVC_MODELS} <= ran, log
        assert ran <= {f"{s}_{m}" for s in ("translate", "score") for m in DVC_MODELS} | {"tables", "figures",
                                                                                          "explorer", "report"}, log
    assert EXP_SHOW in (REPO / "docs" / "ablations.md").read_text()
    show = sh([str(BIN / "dvc"), *shlex.split(EXP_SHOW)[1:], "--csv"], workspace).stdout
    columns = set(next(csv.reader(io.StringIO(show))))  # the changed parameter and Table 1's All BLEU, no more
    assert {c for c in columns if "." in c} == {"decode.beam"} | {f"{m}.All" for m in DVC_MODELS}, sorted(columns)
    experiments = [r["Experiment"] for r in csv.DictReader(io.StringIO(show)) if r["Experiment"]]
    assert len(experiments) == 2, show
    wide = sh([str(BIN / "dvc"), *shlex.split(EXP_SHOW)[1:], "--no-pager"], workspace, env={"COLUMNS": "120"}).stdout
    lines = wide.splitlines()
    assert max(map(len, lines)) <= 120 and "…" not in wide, wide  # nothing cut off
    assert "decode.beam" in lines[1] and all(f"{m}.All" in lines[1] for m in DVC_MODELS), wide
    assert sum(e in wide for e in experiments) == 2, wide
    figure2_drawn_offline(workspace, tmp_path, ["plots", "diff", *experiments], 2)
    sh([str(BIN / "dvc"), "exp", "remove", "--all-commits"], workspace)


def figure2_drawn_offline(workspace: Path, tmp_path: Path, command: list[str], revisions: int) -> None:
    """`dvc <command>` writes its page where .dvc/config says (results/dvc_plots, ignored by git), and headless
    Chromium with no network draws Figure 2 in it: a line per model and revision, the buckets in their order."""
    out = sh([str(BIN / "dvc"), *command], workspace).stdout
    page = workspace / "results/dvc_plots/index.html"
    assert page.as_uri() in out and not (workspace / "dvc_plots").exists()
    untracked = sh(["git", "status", "--porcelain", "--untracked-files=all"], workspace).stdout
    assert "dvc_plots" not in untracked, untracked  # results/ is ignored
    report = page_check(page, "dvc_plots_check.js", tmp_path, "</head>")
    assert report["error"] is None and report["vegaEmbed"] == "function", report
    charts = {c["title"]: c for c in report["charts"]}
    figure2 = charts["Figure 2: tokenized BLEU by source length (mean over replicates)"]
    assert figure2.get("error") is None and figure2["lines"] == len(DVC_MODELS) * revisions, figure2
    buckets = [label for label in figure2["axis_labels"] if label[0].isdigit() and ("-" in label or "+" in label)]
    assert buckets == ["1-10", "11-20", "21+"], figure2


def test_dvc_exp_run_is_an_ablation_of_one_model(dvc_workspace: Path):
    workspace = dvc_workspace
    sh(["git", "add", "dvc.lock"], workspace)
    sh(["git", "commit", "--allow-empty", "-qm", "lock"], workspace)  # the queued test above committed it
    run = sh([str(BIN / "dvc"), "exp", "run", "-S", "models.rnnencdec-30.max_updates=5"], workspace)
    ran = set(re.findall(r"Running stage '([^']+)'", run.stdout))
    # figures reruns only if the model's scores changed (with 5 or 12 updates the tiny model may score the same)
    assert {"train_rnnencdec-30", "translate_rnnencdec-30", "score_rnnencdec-30", "tables", "explorer",
            "report"} <= ran
    assert ran <= {"train_rnnencdec-30", "translate_rnnencdec-30", "score_rnnencdec-30", "tables", "figures",
                   "explorer", "report"}, run.stdout
    show = sh([str(BIN / "dvc"), "exp", "show", "--csv"], workspace).stdout
    rows = list(csv.DictReader(io.StringIO(show)))
    updates = [r["models.rnnencdec-30.max_updates"] for r in rows if r["typ"] == "branch_base"]
    assert updates == ["5"], show[:2000]
    # the headline metrics (results/tables/metrics.json: each model's BLEU, All and No UNK) and nothing else
    metrics = {c for c in rows[0] if c.endswith((".All", ".No UNK"))}
    assert metrics == {f"{m}.{k}" for m in DVC_MODELS for k in ("All", "No UNK")}, sorted(rows[0])
    assert not [c for c in rows[0] if ".json:" in c], sorted(rows[0])  # no other file's metrics (file:key)


def test_dvc_exp_run_sets_the_number_of_replicates(dvc_workspace: Path):
    """`dvc exp run -S replicates=2`: each model's train, translate and score stage runs replicates 1-2, the first
    resumed from its finished checkpoint (the trainings' folders persist), the second with the next seed, and
    Table 1 gives each model's mean and sd over both (Welch's test, from three replicates:
    test_replicates.py)."""
    workspace = dvc_workspace
    sh(["git", "add", "-A"], workspace)
    sh(["git", "commit", "--allow-empty", "-qm", "before"], workspace)
    run = sh([str(BIN / "dvc"), "exp", "run", "-S", "replicates=2"], workspace)
    ran = set(re.findall(r"Running stage '([^']+)'", run.stdout))
    assert {f"{stage}_{m}" for stage in ("train", "translate", "score") for m in DVC_MODELS} | {"tables"} <= ran
    for m in DVC_MODELS:
        assert (workspace / f"results/scores/{m}/replicate2.json").exists()
        log = (workspace / f"results/logs/train/{m}/replicate1.log").read_text()
        assert f"resuming from results/models/{m}/replicate1/checkpoint.pt" in log
        seed = json.loads((workspace / f"results/models/{m}/replicate2/train_stats.json").read_text())["seed"]
        assert seed == 1235  # the configured seed + 1
    table1 = pd.read_csv(workspace / "results/tables/table1.csv")
    assert list(table1["Replicates"]) == [2] * len(DVC_MODELS) and table1["All (tokenized BLEU) sd"].notna().all()


def test_dvc_exp_run_with_two_processes_stops_naming_the_setting(dvc_workspace: Path):
    """dvc.yaml's commands are fixed when `rnnsearch dvc-yaml` writes them: `dvc exp run -S train.processes=2`
    cannot start two processes, so the training stops before any work, saying how to start them."""
    workspace = dvc_workspace
    params = workspace / "params.yaml"
    original = params.read_text()
    sh(["git", "add", "-A"], workspace)
    sh(["git", "commit", "--allow-empty", "-qm", "before two processes"], workspace)
    try:
        run = sh([str(BIN / "dvc"), "exp", "run", "-S", "train.processes=2"], workspace, check=False)
        out = run.stdout + run.stderr
        assert run.returncode != 0 and "'train.processes' is 2, but 1 process was started (no launcher)" in out, out
        assert "run `rnnsearch dvc-yaml` again" in out and "Traceback" not in out
        assert "Running stage 'translate_" not in out  # it stopped at the first training
    finally:
        params.write_text(original)


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
