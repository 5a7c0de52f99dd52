"""The whole DAG through DVC, on the tiny config, in a copy of the repository: `dvc repro` runs the same commands
as Snakemake (test_workflow.py) and gets the same numbers; `dvc status` is clean afterwards and flags exactly the
changed model or the stages importing an edited module; push and pull; experiments (a grid of decoding runs, an
ablation, replicates). The tests run in order in one workspace, on one pytest-xdist worker, beside
test_workflow.py's on another (they were one file of about 16 minutes on 2 cores).
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from .conftest import REPO, page_check, repo_copy
from .conftest import run as sh  # a command of this environment in a workspace
from .test_workflow import BIN, DVC_MODELS, MODELS, git_repository, job_counts
from .test_workflow import workspace as workspace  # noqa: F401 (a module fixture: the tiny DAG's copy, in git)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dvc_workspace(tmp_path_factory) -> Path:
    """A copy of the repository's files with the tiny params.yaml (one replicate of each of DVC_MODELS; the
    training text in one shard, where tiny_dag has two) and its dvc.yaml, in git, nothing run: the DVC tests below
    run in it, in order."""
    others = [f"models.{m}" for m in MODELS if m not in DVC_MODELS]
    return git_repository(repo_copy(tmp_path_factory.mktemp("dvc"), {"remove": others, "prepare": {"shards": 1}}))


def test_dvc_repro_gives_the_same_results_and_tracks_params(dvc_workspace: Path, request, tmp_path: Path):
    """`dvc repro` runs every stage; its outputs are those of `snakemake` (tiny_dag: replicate 1 of each model, the
    training text in two shards where this ws has one; asked for after the run, so that test_workflow.py's worker
    builds it meanwhile)."""
    ws = dvc_workspace
    repro = sh([str(BIN / "dvc"), "repro"], ws)
    assert "Running stage 'train_rnnsearch-50'" in repro.stdout
    smk = request.getfixturevalue("tiny_dag") / "results"
    for m in DVC_MODELS:
        a = json.loads((smk / f"scores/{m}/replicate1.json").read_text())
        b = json.loads((ws / f"results/scores/{m}/replicate1.json").read_text())
        assert a == b, f"{m}: snakemake and dvc repro disagree"
        sa = json.loads((smk / f"models/{m}/replicate1/train_stats.json").read_text())
        sb = json.loads((ws / f"results/models/{m}/replicate1/train_stats.json").read_text())
        assert (sa["train_nll"], sa["dev_nll"], sa["seed"]) == (sb["train_nll"], sb["dev_nll"], sb["seed"])
    per_replicate = pd.read_csv(smk / "tables/table1_replicates.csv")
    ours = per_replicate[(per_replicate["Replicate"] == 1) & per_replicate["Model"].isin(DVC_MODELS)]
    pd.testing.assert_frame_equal(pd.read_csv(ws / "results/tables/table1_replicates.csv"),
                                  ours.reset_index(drop=True))
    assert "up to date" in sh([str(BIN / "dvc"), "status"], ws).stdout
    figure2_drawn_offline(ws, tmp_path, ["plots", "show"], 1)
    plots = json.loads(sh([str(BIN / "dvc"), "plots", "show", "--json"], ws).stdout)
    names = {name.split("::")[-1] for name in (plots["data"] if "data" in plots else plots)}
    assert names == {"results/figures/bleu_by_length_models.csv"} | {  # the plots docs/ablations.md names
        f"results/models/{m}/replicate1/{f}" for m in DVC_MODELS for f in ("learning_curve.tsv", "validation.tsv")}

    params = ws / "params.yaml"
    original = params.read_text()
    changed = yaml.safe_load(original)
    changed["models"]["rnnencdec-30"]["max_updates"] = 5
    params.write_text(yaml.safe_dump(changed, sort_keys=False))
    status = sh([str(BIN / "dvc"), "status"], ws).stdout
    stages = set(re.findall(r"^(\S+):$", status, re.M))
    assert stages == {"train_rnnencdec-30", "report"}, status  # the report prints every param
    changed = yaml.safe_load(original)
    changed["train"]["threads"], changed["decode"]["threads"] = 8, 4  # speed only: no stage changes
    params.write_text(yaml.safe_dump(changed, sort_keys=False))
    assert "up to date" in sh([str(BIN / "dvc"), "status"], ws).stdout
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
    ws = dvc_workspace
    keep = {f: (ws / f).read_bytes() for f in ("results/scores/rnnsearch-50/replicate1.json",
                                                       "results/models/rnnsearch-50/replicate1/model.pt",
                                                       "results/figures/alignment_a.png")}
    push = sh([str(BIN / "dvc"), "push"], ws)
    assert (ws / ".dvc-storage").is_dir() and "pushed" in push.stdout + push.stderr
    shutil.rmtree(ws / ".dvc" / "cache")
    for path in (ws / "results").iterdir():
        if path.name != "README.md":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert "deleted" in sh([str(BIN / "dvc"), "status"], ws).stdout
    sh([str(BIN / "dvc"), "pull"], ws)
    assert "up to date" in sh([str(BIN / "dvc"), "status"], ws).stdout
    for f, data in keep.items():
        assert (ws / f).read_bytes() == data, f


EXP_SHOW = "dvc exp show --only-changed --drop 'Created|State|Executor|results/.*|.*No UNK' --keep '.*\\.All'"


def test_a_grid_of_decoding_experiments_reruns_only_decoding_and_what_follows(dvc_workspace: Path, tmp_path: Path):
    """docs/ablations.md's grid: with dvc.lock committed, experiments of decode.beam, each in a temporary copy of the
    repository (`dvc exp run --temp`: DVC's task queue, `--queue` then `--run-all`, can hang once its experiments
    are done: DVC's bug 10428 on GitHub), rerun no training (nor any data stage): translate, score,
    tables, figures, explorer and report only; a point of the grid at the committed value (as a grid around the
    default has) reruns nothing. `dvc exp show --only-changed` then shows the changed parameter and the headline
    metrics, nothing else."""
    ws = dvc_workspace
    sh(["git", "add", "-A"], ws)
    sh(["git", "commit", "-qm", "results of dvc repro"], ws)  # dvc.lock with it
    committed = yaml.safe_load((ws / "params.yaml").read_text())["decode"]["beam"]
    assert committed != 1
    grid = (REPO / "docs" / "ablations.md").read_text()
    assert "\ndvc exp run --temp -S decode.beam=1 " in grid
    decoding, unchanged = (set(re.findall(r"Running stage '([^']+)'", sh(
        [str(BIN / "dvc"), "exp", "run", "--temp", "-S", f"decode.beam={beam}"], ws).stdout))
        for beam in (1, committed))
    assert unchanged == set(), unchanged
    assert {f"translate_{m}" for m in DVC_MODELS} <= decoding, decoding
    follows = {f"{s}_{m}" for s in ("translate", "score") for m in DVC_MODELS} | {"tables", "figures", "explorer",
                                                                                   "report"}
    assert decoding <= follows, decoding
    assert EXP_SHOW in grid
    show = sh([str(BIN / "dvc"), *shlex.split(EXP_SHOW)[1:], "--csv"], ws).stdout
    columns = set(next(csv.reader(io.StringIO(show))))  # the changed parameter and Table 1's All BLEU, no more
    assert {c for c in columns if "." in c} == {"decode.beam"} | {f"{m}.All" for m in DVC_MODELS}, sorted(columns)
    experiments = [r["Experiment"] for r in csv.DictReader(io.StringIO(show)) if r["Experiment"]]
    assert len(experiments) == 2, show
    wide = sh([str(BIN / "dvc"), *shlex.split(EXP_SHOW)[1:], "--no-pager"], ws, env={"COLUMNS": "120"}).stdout
    lines = wide.splitlines()
    assert max(map(len, lines)) <= 120 and "…" not in wide, wide  # nothing cut off
    assert "decode.beam" in lines[1] and all(f"{m}.All" in lines[1] for m in DVC_MODELS), wide
    assert sum(e in wide for e in experiments) == 2, wide
    figure2_drawn_offline(ws, tmp_path, ["plots", "diff", *experiments], 2)
    sh([str(BIN / "dvc"), "exp", "remove", "--all-commits"], ws)


def figure2_drawn_offline(ws: Path, tmp_path: Path, command: list[str], revisions: int) -> None:
    """`dvc <command>` writes its page where .dvc/config says (results/dvc_plots, ignored by git), and headless
    Chromium with no network draws Figure 2 in it: a line per model and revision, the buckets in their order."""
    out = sh([str(BIN / "dvc"), *command], ws).stdout
    page = ws / "results/dvc_plots/index.html"
    assert page.as_uri() in out and not (ws / "dvc_plots").exists()
    untracked = sh(["git", "status", "--porcelain", "--untracked-files=all"], ws).stdout
    assert "dvc_plots" not in untracked, untracked  # results/ is ignored
    report = page_check(page, "dvc_plots_check.js", tmp_path, "</head>")
    assert report["error"] is None and report["vegaEmbed"] == "function", report
    charts = {c["title"]: c for c in report["charts"]}
    figure2 = charts["Figure 2: tokenized BLEU by source length (mean over replicates)"]
    assert figure2.get("error") is None and figure2["lines"] == len(DVC_MODELS) * revisions, figure2
    buckets = [label for label in figure2["axis_labels"] if label[0].isdigit() and ("-" in label or "+" in label)]
    assert buckets == ["1-10", "11-20", "21+"], figure2


def test_dvc_exp_run_is_an_ablation_of_one_model(dvc_workspace: Path):
    ws = dvc_workspace
    sh(["git", "add", "dvc.lock"], ws)
    sh(["git", "commit", "--allow-empty", "-qm", "lock"], ws)  # the grid test above committed it
    run = sh([str(BIN / "dvc"), "exp", "run", "-S", "models.rnnencdec-30.max_updates=5"], ws)
    ran = set(re.findall(r"Running stage '([^']+)'", run.stdout))
    # figures reruns only if the model's scores changed (with 5 or 12 updates the tiny model may score the same)
    assert {"train_rnnencdec-30", "translate_rnnencdec-30", "score_rnnencdec-30", "tables", "explorer",
            "report"} <= ran
    assert ran <= {"train_rnnencdec-30", "translate_rnnencdec-30", "score_rnnencdec-30", "tables", "figures",
                   "explorer", "report"}, run.stdout
    show = sh([str(BIN / "dvc"), "exp", "show", "--csv"], ws).stdout
    rows = list(csv.DictReader(io.StringIO(show)))
    updates = [r["models.rnnencdec-30.max_updates"] for r in rows if r["typ"] == "branch_base"]
    assert updates == ["5"], show[:2000]
    # the headline metrics (results/tables/metrics.json: each model's BLEU, All and No UNK) and nothing else
    metrics = {c for c in rows[0] if c.endswith((".All", ".No UNK"))}
    assert metrics == {f"{m}.{k}" for m in DVC_MODELS for k in ("All", "No UNK")}, sorted(rows[0])
    assert not [c for c in rows[0] if ".json:" in c], sorted(rows[0])  # no other file's metrics (file:key)


def test_dvc_exp_run_sets_the_number_of_replicates(dvc_workspace: Path):
    """`dvc exp run -S replicates=2 score_rnnencdec-30`: the model's train, translate and score stages run
    replicates 1-2, the first resumed from its finished checkpoint (the trainings' folders persist), the second
    with the next seed; the stages of Table 1 and what follows it read `replicates` too, so `dvc status` flags them
    (one model's stages only, as a target: every stage's command loops over `replicates` alike, and Table 1's mean
    and sd over two replicates from the same commands: test_workflow.py's run of the tiny DAG)."""
    ws, model = dvc_workspace, "rnnencdec-30"
    sh(["git", "add", "-A"], ws)
    sh(["git", "commit", "--allow-empty", "-qm", "before"], ws)
    run = sh([str(BIN / "dvc"), "exp", "run", "-S", "replicates=2", f"score_{model}"], ws)
    ran = set(re.findall(r"Running stage '([^']+)'", run.stdout))
    assert ran == {f"{stage}_{model}" for stage in ("train", "translate", "score")}, run.stdout
    assert (ws / f"results/scores/{model}/replicate2.json").exists()
    log = (ws / f"results/logs/train/{model}/replicate1.log").read_text()
    assert f"resuming from results/models/{model}/replicate1/checkpoint.pt" in log
    seed = json.loads((ws / f"results/models/{model}/replicate2/train_stats.json").read_text())["seed"]
    assert seed == 1235  # the configured seed + 1
    status = sh([str(BIN / "dvc"), "status"], ws).stdout
    flagged = set(re.findall(r"^(\S+):$", status, re.M))
    assert {"tables", "report", "train_rnnsearch-50"} <= flagged, status  # they read `replicates` too
    assert not {f"{stage}_{model}" for stage in ("train", "translate", "score")} & flagged, status


def test_dvc_exp_run_with_two_processes_stops_naming_the_setting(dvc_workspace: Path):
    """dvc.yaml's commands are fixed when `rnnsearch dvc-yaml` writes them: `dvc exp run -S train.processes=2`
    cannot start two processes, so the training stops before any work, saying how to start them."""
    ws = dvc_workspace
    params = ws / "params.yaml"
    original = params.read_text()
    sh(["git", "add", "-A"], ws)
    sh(["git", "commit", "--allow-empty", "-qm", "before two processes"], ws)
    try:
        run = sh([str(BIN / "dvc"), "exp", "run", "-S", "train.processes=2"], ws, check=False)
        out = run.stdout + run.stderr
        assert run.returncode != 0 and "'train.processes' is 2, but 1 process was started (no launcher)" in out, out
        assert "run `rnnsearch dvc-yaml` again" in out and "Traceback" not in out
        assert "Running stage 'translate_" not in out  # it stopped at the first training
    finally:
        params.write_text(original)
