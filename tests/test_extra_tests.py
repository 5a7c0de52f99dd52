"""extra_tests: more test sets, translated by every model from raw text with the decode settings and scored
with sacreBLEU and chrF (results/tables/extra_tests.md)."""

from __future__ import annotations

import json

import pytest

from rnnsearch.evaluation.score import run_extra_scores
from rnnsearch.textio import InputError

from .conftest import dag_copy, run


@pytest.mark.slow
def test_the_main_test_set_as_an_extra_one_gives_the_same_translations_and_bleu(tiny_dag, tmp_path):
    """Raw text through `rnnsearch translate --output` (its own tokenization and batching) must give what the
    pipeline's translate stage gives on the tokenized test set, and the same sacreBLEU. Adding a test set runs
    its jobs only. An entry that decodes a model with GNMT's penalties ranks the extra set's translations so too."""
    gnmt = {"arch": "rnnsearch", "train_max_len": 50, "decodes": "rnnsearch-50",
            "decode": {"length_norm": False, "length_penalty": 0.6, "coverage_penalty": 5.0}}
    ws = dag_copy(tiny_dag, tmp_path, {"extra_tests": {"again": "results/data/raw/test"}, "models": {"gnmt": gnmt}})
    p = run(["snakemake", "--cores", "2", "results/tables/extra_tests.md",
             "results/translations/gnmt/replicate1/test.hyp"], ws)
    ran = p.stdout + p.stderr
    assert "rule train:" not in ran and ran.count("rule translate:") == 1, ran[-3000:]  # gnmt's, replicate 1
    table = json.loads((ws / "results/tables/extra_tests.json").read_text())
    assert (ws / "results/extra/again/gnmt.hyp").read_text() != (ws / "results/extra/again/rnnsearch-50.hyp").read_text()
    for model in ("rnnsearch-50", "rnnencdec-50", "gnmt"):
        extra = (ws / f"results/extra/again/{model}.hyp").read_text()
        assert extra == (ws / f"results/translations/{model}/replicate1/test.hyp").read_text()
        if model != "gnmt":  # scored with the main test set's other jobs, not asked for here
            score = json.loads((ws / f"results/scores/{model}/replicate1.json").read_text())
            assert table["scores"][model]["again"]["bleu"] == round(score["sacrebleu_all"], 2)
    assert "| rnnsearch-50 |" in (ws / "results/tables/extra_tests.md").read_text()


def test_misaligned_files_are_named(tmp_path):
    (tmp_path / "hyp").write_text("a\nb\n")
    (tmp_path / "ref").write_text("a\n")
    with pytest.raises(InputError, match=r"hyp has 2 lines but .*ref has 1"):
        run_extra_scores([("t", "m", str(tmp_path / "hyp"), str(tmp_path / "ref"))], str(tmp_path))
