"""Replicates: the statistics over seeds (mean, sd, Welch's t-test) and Table 1 / Figure 2 built from them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rnnsearch.evaluation.plots import _curve, bleu_by_length_table
from rnnsearch.evaluation.replicates import mean_sd, shown, student_t_sf2, welch_p
from rnnsearch.evaluation.tables import table1, table2
from rnnsearch.evaluation.replicates import each_replicate
from rnnsearch.settings import ScoreConfig


@pytest.mark.parametrize("t, df, p", [(12.7062, 1, 0.05), (2.776445, 4, 0.05), (2.228139, 10, 0.05),
                                      (3.169273, 10, 0.01), (1.959964, 1e6, 0.05), (0.0, 3, 1.0)])
def test_student_t_tail_matches_the_tables(t: float, df: float, p: float):
    assert student_t_sf2(t, df) == pytest.approx(p, rel=1e-5)


def test_welch_t_test_of_two_small_samples():
    # a = 1..3, b = 4..6: t = -3 / sqrt(2/3), df = 4 (equal variances and sizes)
    assert welch_p([1, 2, 3], [4, 5, 6]) == pytest.approx(student_t_sf2(3 / (2 / 3) ** 0.5, 4))
    assert welch_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.021311641128756, rel=1e-6)  # scipy.stats.ttest_ind
    with pytest.raises(ValueError):
        welch_p([1.0], [2.0, 3.0])


def test_mean_and_sample_sd():
    assert mean_sd([70.0, 80.0, 75.0]) == (75.0, 5.0)
    assert mean_sd([70.0]) == (70.0, None) and shown(70.0, None) == "70.00" and shown(75, 5) == "75.00 ± 5.00"


def test_patterns_expand_to_every_replicate_in_model_order():
    assert each_replicate(["s/a/replicate{replicate}.json", "s/b/replicate{replicate}.json"], 2) == \
        ["s/a/replicate1.json", "s/a/replicate2.json", "s/b/replicate1.json", "s/b/replicate2.json"]
    assert each_replicate(["plain.json"], 3) == ["plain.json"]


def _score(model: str, seed: int, bleu: float) -> dict:
    return {"model": model, "arch": "rnnsearch", "seed": seed, "bleu_tok_all": bleu, "bleu_tok_nounk": bleu + 5,
            "sacrebleu_all": bleu - 1, "sacrebleu_nounk": None, "nounk_sentences": 10, "sentences": 20,
            "sacrebleu_signature": "sig", "tokenized_bleu_definition": "tok",
            "by_length": [{"bucket": "1-10", "lo": 1, "hi": 10, "sentences": 5, "bleu": bleu, "ci_low": bleu - 1,
                           "ci_high": bleu + 1},
                          {"bucket": "11+", "lo": 11, "hi": None, "sentences": 5, "bleu": bleu / 2,
                           "ci_low": None, "ci_high": None}]}


def test_table1_gives_mean_sd_bootstrap_and_welch_over_three_replicates():
    groups = {"base": [_score("base", 1 + r, b) for r, b in enumerate([10.0, 12.0, 11.0])],
              "att": [_score("att", 1 + r, b) for r, b in enumerate([70.0, 74.0, 72.0])]}
    p = {("att", 0): 0.001, ("att", 1): 0.004, ("att", 2): 0.002}
    numbers, display, notes = table1(groups, p, 1000)
    att = numbers.set_index("Model").loc["att"]
    assert att["Replicates"] == 3 and att["All (tokenized BLEU)"] == 72.0 and att["All (tokenized BLEU) sd"] == 2.0
    assert att["p vs base"] == 0.004  # the largest of the per-replicate bootstraps
    assert att["Welch p vs base"] == pytest.approx(welch_p([70, 74, 72], [10, 12, 11]))
    assert pd.isna(att["No UNK (sacreBLEU)"]) and display.set_index("Model").loc["att", "No UNK (sacreBLEU)"] == "–"
    assert display.set_index("Model").loc["att", "All (tokenized BLEU)"] == "72.00 ± 2.00"
    assert any("Welch" in n for n in notes)
    assert any("The test is two-sided" in n and "1/1001 = 0.0010" in n and "has p = 1." in n for n in notes)
    one, shown_one, _ = table1({m: runs[:1] for m, runs in groups.items()})
    assert "Welch p vs base" not in one and "Replicates" not in shown_one  # one replicate: the paper's table
    assert shown_one.set_index("Model").loc["att", "All (tokenized BLEU)"] == "70.00"


def test_a_metric_missing_from_older_score_files_shows_a_dash(monkeypatch):
    """A Table 1 metric added after some scores were written (docs/contributing.md): those scores have no such key,
    and their cells show "–" (a KeyError before), in Table 1 and in every replicate's row."""
    from rnnsearch.evaluation import tables

    monkeypatch.setitem(tables.BLEU_COLUMNS, "All (new metric)", "new_metric_all")
    groups = {"base": [_score("base", 1, 10.0)], "att": [{**_score("att", 1, 70.0), "new_metric_all": 0.5}]}
    numbers, display, _ = table1(groups)
    shown_by_model = display.set_index("Model")["All (new metric)"]
    assert shown_by_model["base"] == "–" and shown_by_model["att"] == "0.50"
    rows = tables.table1_replicates(groups, {}).set_index("Model")["All (new metric)"]
    assert pd.isna(rows["base"]) and rows["att"] == 0.5


def test_table2_means_the_learning_statistics():
    stats = [{"model": "m", "updates": 100, "epochs": 1.0 + r, "hours": 0.1, "train_nll": 3.0, "dev_nll": 10.0 + 2 * r,
              "dev_bleu": 50.0, "selected_update": 100, "device": "cpu", "early_stopped": r == 1,
              "parameters": 7} for r in range(2)]
    numbers, display, _ = table2({"m": stats})
    assert numbers["Dev NLL"][0] == 11.0 and numbers["Epochs sd"][0] == pytest.approx(0.5 ** 0.5)
    assert display["Early stop"][0] == "1 of 2" and display["Updates"][0] == "100 ± 0"


def test_figure2_curve_is_the_mean_with_a_band_across_replicates():
    df = bleu_by_length_table([_score("att", 1, 70.0), _score("att", 2, 74.0)])
    assert list(df["replicate"]) == [1, 1, 2, 2] and list(df["seed"]) == [1, 1, 2, 2]
    x, mean, low, high = _curve(df)
    assert list(mean) == [72.0, 36.0] and list(high - mean) == pytest.approx([2 * 2 ** 0.5, 2 ** 0.5])
    x, mean, low, high = _curve(bleu_by_length_table([_score("att", 1, 70.0)]))
    assert low is None  # one replicate: the bootstrap interval, absent for the open bucket here


def test_the_figure_beside_figure2_draws_each_measure_by_length_with_a_band_across_replicates(tmp_path, monkeypatch):
    """alignment_by_length: a panel per measure, a curve per model (the mean over replicates, ± 1 sd shaded
    with two), a model without attention in the repetition panel only, a score without measures left out."""
    from rnnsearch.evaluation import plots

    def measured(model, r, dropped):
        s = _score(model, r, 70.0)
        shares = [{"bucket": b["bucket"], "dropped": dropped, "attended_again": None if dropped is None else 0.1,
                   "repetition": 0.02 * r} for b in s["by_length"]]
        return {**s, "alignment": {"all": shares[0], "by_length": shares}}

    drawn = []
    real_plot = plots.plt.Axes.plot
    monkeypatch.setattr(plots.plt.Axes, "plot", lambda ax, x, y, *a, **k: drawn.append((k.get("color"),
                        k.get("label"), list(y))) or real_plot(ax, x, y, *a, **k))
    scores = [measured("att", 1, 0.05), measured("att", 2, 0.07), measured("base", 1, None), _score("old", 1, 1.0)]
    plots.alignment_by_length(scores, {"att": "rnnsearch", "base": "rnnencdec", "old": "rnnsearch"},
                              tmp_path / "fig")
    assert (tmp_path / "fig.png").stat().st_size > 1000 and (tmp_path / "fig.pdf").exists()
    labels = [label for _, label, _ in drawn]
    assert labels.count("att") == 3 and labels.count("base") == 1 and "old" not in labels
    assert len({c for c, label, _ in drawn if label == "att"}) == 1  # one colour a model, in every panel
    assert {c for c, label, _ in drawn if label == "att"} != {c for c, label, _ in drawn if label == "base"}
    assert [y for _, label, y in drawn if label == "att"][0] == pytest.approx([6.0, 6.0])  # mean of 5 % and 7 %


def test_tables_stage_refuses_lists_of_different_lengths(tmp_path: Path):
    from rnnsearch.evaluation.tables import run_tables
    from rnnsearch.textio import InputError

    (tmp_path / "s.json").write_text(json.dumps(_score("m", 1, 1.0)))
    with pytest.raises(InputError, match="give a score and translations per model and replicate"):
        run_tables([str(tmp_path / "s.json")] * 2, [str(tmp_path / "s.json")], [], "ref", ScoreConfig([10], 0), 1,
                   str(tmp_path))
    with pytest.raises(InputError, match="0 --train-stats: .* and the statistics of each training"):
        run_tables([str(tmp_path / "s.json")], [], ["h"], "ref", ScoreConfig([10], 0), 1, str(tmp_path))
