"""`rnnsearch compare`: Welch's test against scipy's figures, and the report of two models' replicates."""

import json
import re
from pathlib import Path

import pytest

from rnnsearch.evaluation.compare import run_compare
from rnnsearch.evaluation.replicates import welch
from rnnsearch.textio import InputError

from .conftest import dag_copy, run

# Reference values from scipy 1.17.1: stats.ttest_ind(a, b, equal_var=False) gives t of mean(a) − mean(b).
WELCH = [(([1, 2, 3, 4, 5], [2, 4, 6, 8, 10]), (-1.8973665961010275, 5.882352941176471, 0.10753119493062728)),
         (([24.1, 23.8, 24.6], [24.3, 24.0, 23.5]), (0.7071067811865498, 4.0, 0.5185185185185172))]


@pytest.mark.parametrize("samples,expected", WELCH)
def test_welch_matches_scipy(samples, expected):
    t, df, p = expected
    r = welch(*samples)  # t of mean(b) − mean(a)
    assert (r["t"], r["df"], r["p"]) == pytest.approx((-t, df, p), rel=1e-10)
    assert welch([1.0, 1.0], [1.0, 1.0])["p"] == 1.0  # no spread: equal means no evidence, unequal ones certain
    assert welch([1.0, 1.0], [2.0, 2.0])["p"] == 0.0


def _replicate(root, model, r, bleu, nll_scale):
    score = {"bleu_tok_all": bleu, "sacrebleu_all": bleu - 1, "bleu_tok_nounk": bleu + 2, "sacrebleu_signature": "sig",
             "by_length": [{"bucket": "1-10", "sentences": 5, "bleu": bleu + 1},
                           {"bucket": "11+", "sentences": 3, "bleu": None}]}
    (root / "scores" / model).mkdir(parents=True, exist_ok=True)
    (root / "scores" / model / f"replicate{r}.json").write_text(json.dumps(score))
    folder = root / "models" / model / f"replicate{r}"
    folder.mkdir(parents=True)
    (folder / "train_stats.json").write_text(json.dumps({"seed": 1233 + r, "updates": 300, "seconds": 60.0 * r,
                                                         "device": "cpu", "threads": 1, "git": "abc"}))
    rows = [f"{u}\t{10 * nll_scale / u}\t{nll_scale * (3 - u / 200)}\t{bleu}" for u in (100, 200, 300)]
    (folder / "validation.tsv").write_text("update\tdev_nll\tdev_nll_per_word\tdev_bleu\n" + "\n".join(rows) + "\n")


def test_compare_writes_the_table_json_and_figure(tmp_path):
    for r, (a, b) in enumerate([(20.0, 21.0), (21.0, 22.5), (22.0, 21.5)], start=1):
        _replicate(tmp_path / "results", "fp32", r, a, 1.0)
        _replicate(tmp_path / "results", "bf16", r, b, 1.1)
    result = run_compare("fp32", "bf16", 3, str(tmp_path / "out"), str(tmp_path / "results"))
    rows = {r["metric"]: r for r in result["rows"]}
    assert rows["BLEU All (tokenized)"]["a"] == [20.0, 21.0, 22.0]
    assert rows["BLEU All (tokenized)"]["diff"] == pytest.approx(21.6666667 - 21.0)
    assert rows["BLEU, source 1-10 words (5 sentences)"]["mean_b"] == pytest.approx(22.6666667)
    assert not any("11+" in name for name in rows)  # a bucket without sentences has no BLEU to compare
    assert rows["best dev NLL per word"]["mean_b"] == pytest.approx(1.1 * 1.5)
    assert rows["training seconds per update"]["mean_a"] == pytest.approx(0.4)
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "| BLEU All (tokenized) | 21.00 ± 1.00 (n=3) | 21.67 ± 0.76 (n=3) | +0.67 | 0.92 | 3.7 | 0.414 |" in md
    assert "seeds 1234, 1235, 1236" in md
    assert (tmp_path / "out" / "dev_nll.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "out" / "comparison.json").read_text())["curves"]["bf16"]["2"][0]["update"] == 100


def test_compare_needs_two_finished_replicates(tmp_path):
    for r in (1, 2):
        _replicate(tmp_path, "fp32", r, 20.0, 1.0)
        _replicate(tmp_path, "bf16", r, 20.0, 1.0)
    with pytest.raises(InputError, match=r"replicates: 1; a comparison needs at least 2"):
        run_compare("fp32", "bf16", 1, str(tmp_path / "out"), str(tmp_path))
    with pytest.raises(InputError, match=r"scores/fp32/replicate3.json: missing; replicate 3 of fp32"):
        run_compare("fp32", "bf16", 3, str(tmp_path / "out"), str(tmp_path))
    (tmp_path / "models" / "bf16" / "replicate2" / "validation.tsv").unlink()
    with pytest.raises(InputError, match=r"bf16/replicate2/validation.tsv: missing"):
        run_compare("fp32", "bf16", 2, str(tmp_path / "out"), str(tmp_path))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_compare_rule_reads_the_runs_replicates_and_runs_alone(tiny_dag: Path, tmp_path: Path):
    """`snakemake results/compare/<a>_vs_<b>/comparison.md` on a finished run of two replicates: only the
    comparison runs, and its BLEU are the replicates' scores."""
    ws = dag_copy(tiny_dag, tmp_path / "ws")
    target = "results/compare/rnnsearch-30_vs_rnnsearch-50/comparison.md"
    plan = run(["snakemake", "-n", target], ws).stdout
    assert re.search(r"^compare\s+1$", plan, re.M) and not re.search(r"^(train|translate|score)\s", plan, re.M), plan
    run(["snakemake", "--cores", "1", target], ws)
    result = json.loads((ws / target).with_name("comparison.json").read_text())
    bleu = {r["metric"]: r for r in result["rows"]}["BLEU All (tokenized)"]
    for side, model in (("a", "rnnsearch-30"), ("b", "rnnsearch-50")):
        scores = [json.loads((ws / f"results/scores/{model}/replicate{r}.json").read_text()) for r in (1, 2)]
        assert bleu[side] == [s["bleu_tok_all"] for s in scores]
    assert (ws / target).with_name("dev_nll.png").stat().st_size > 0
