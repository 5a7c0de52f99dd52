"""rnnsearch.evaluation.coverage: dropped and attended-again source words from α, repetition against the
reference, and their shares by source-length bucket."""

from __future__ import annotations

import numpy as np
import pytest

from rnnsearch.evaluation.coverage import alignment_measures, attention_counts, repetition_counts


def test_total_attention_below_half_is_dropped_above_one_and_a_half_attended_again():
    """Columns: three source words and </s> (left out); rows: generated words. Totals 0.2, 1.0, 2.0."""
    alpha = np.array([[0.1, 0.5, 0.4, 0.0],
                      [0.1, 0.5, 0.4, 0.0],
                      [0.0, 0.0, 1.2, 0.8]], dtype=np.float16)
    assert attention_counts(alpha) == (3, 1, 1)


def test_repetition_counts_ngrams_beyond_the_reference():
    """'a b a b a b' against 'a b': unigrams a 3, b 3 (1 each allowed: 4 too many); bigrams 'a b' 3 (2), 'b a' 2
    (1); trigrams 'a b a' 2 (1), 'b a b' 2 (1); 4-grams 'a b a b' 2 (1), 'b a b a' 1 (0): 10 of 18."""
    assert repetition_counts("a b a b a b".split(), "a b".split()) == (10, 18)
    assert repetition_counts("the cat and the dog".split(), "the cat and the dog".split()) == (0, 14)


def test_measures_by_source_length_sum_the_counts_of_each_bucket():
    src = ["w " * 3, "w " * 12, "w " * 14]
    hyp = ["a b a b", "x y", "x y"]
    ref = ["a b", "x y", "x y"]
    alphas = {"0": np.array([[1.0, 0, 0, 0], [1.0, 0, 0, 0]]),  # word 1 twice, words 2 and 3 dropped
              "1": np.full((3, 13), 1 / 13), "2": np.full((3, 15), 1 / 15)}  # every word about 0.2: dropped
    bins = [("1-10", 1, 10), ("11+", 11, None)]
    m = alignment_measures([s.strip() for s in src], hyp, ref, alphas, bins)
    short, long = m["by_length"]
    assert short["sentences"] == 1 and short["source_words"] == 3
    assert short["dropped"] == pytest.approx(2 / 3) and short["attended_again"] == pytest.approx(1 / 3)
    assert short["repetition"] == pytest.approx(3 / 10)  # 'a b a b' against 'a b': a, b and 'a b' once too often
    assert long["sentences"] == 2 and long["dropped"] == 1.0 and long["attended_again"] == 0.0
    assert m["all"]["source_words"] == 3 + 12 + 14 and m["all"]["dropped"] == pytest.approx((2 + 26) / 29)
    blind = alignment_measures([s.strip() for s in src], hyp, ref, None, bins)  # a model without attention
    assert m["all"]["repetition"] == pytest.approx(3 / 16)  # 'x y' against 'x y' twice: 0 of 3 each
    assert blind["all"]["dropped"] is None and blind["all"]["repetition"] == m["all"]["repetition"]
