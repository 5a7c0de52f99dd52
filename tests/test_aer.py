"""Alignment error rate: the formula on a hand-worked example, hard links from α, both gold formats, errors that
name the file and line, and the synthetic corpus's gold links."""

from __future__ import annotations

import numpy as np
import pytest

from rnnsearch.data.corpus import synthetic
from rnnsearch.data.text import tokenize_lines
from rnnsearch.evaluation.aer import alignment_scores, hard_links, read_gold
from rnnsearch.textio import InputError


def test_aer_precision_recall_on_a_worked_example():
    S = {(1, 1), (2, 3)}
    P = S | {(3, 2), (3, 3)}
    A = {(1, 1), (3, 2), (2, 2)}  # one sure hit, one possible hit, one miss
    r = alignment_scores([A], [(S, P)])
    assert r["precision"] == pytest.approx(2 / 3)  # |A∩P| / |A|
    assert r["recall"] == pytest.approx(1 / 2)  # |A∩S| / |S|
    assert r["aer"] == pytest.approx(1 - (1 + 2) / (3 + 2))
    assert alignment_scores([S], [(S, P)])["aer"] == 0.0


def test_hard_links_take_the_argmax_and_drop_the_source_eos():
    alpha = np.array([[0.7, 0.2, 0.1],  # word 1 → source 1
                      [0.1, 0.5, 0.4],  # word 2 → source 2 (0.4 on source 3 = </s>)
                      [0.1, 0.1, 0.8],  # word 3 → source </s>: no link
                      [0.3, 0.3, 0.4]])  # target </s> row: never a link
    assert hard_links(alpha) == {(1, 1), (2, 2)}
    assert hard_links(alpha, threshold=0.2) == {(1, 1), (2, 1), (2, 2)}


def test_both_gold_formats_read_the_same_links(tmp_path):
    (tmp_path / "g.naacl").write_text("1 1 1 S\n1 2 2 P\n1 0 3 S\n2 1 2\n")
    (tmp_path / "g.talp").write_text("1-1 2p2\n1-2\n")
    a = read_gold(tmp_path / "g.naacl", "naacl", [2, 1], [3, 2])
    b = read_gold(tmp_path / "g.talp", "talp", [2, 1], [3, 2])
    assert a == b == [({(1, 1)}, {(1, 1), (2, 2)}), ({(1, 2)}, {(1, 2)})]


@pytest.mark.parametrize("text, fmt, message", [
    ("1 1 1 S\n1 3 1 S\n", "naacl", r"g:2: source position 3 is beyond the sentence's 2 words"),
    ("1 1 1 S\n3 1 1 S\n", "naacl", r"g:2: sentence position 3 is beyond the sentence's 2 words"),
    ("1 1 x S\n", "naacl", r"g:1: target position 'x' is not a number"),
    ("1 1 1 Q\n", "naacl", r"g:1: expected 'sentence source-position target-position \[S\|P\]'"),
    ("1-1\n", "talp", r"g: 1 lines, but the test set has 2 sentences"),
    ("1-1\n1:1\n", "talp", r"g:2: '1:1' is neither 'i-j' \(sure\) nor 'ipj' \(possible\)"),
    ("1-1\n1-4\n", "talp", r"g:2: target position 4 is beyond"),
])
def test_malformed_gold_files_name_the_file_and_line(tmp_path, text, fmt, message):
    (tmp_path / "g").write_text(text)
    with pytest.raises(InputError, match=message):
        read_gold(tmp_path / "g", fmt, [2, 1], [3, 2])


def test_synthetic_gold_links_fit_the_tokenized_test_set(tmp_path):
    corpus = synthetic.generate(5, 10, 10, 200, 300, 60, 40, 50, 40, 1.4)
    synthetic.write_corpus(corpus, tmp_path)
    src = tokenize_lines([en for en, _ in corpus["test"]], "en")
    ref = tokenize_lines([fr for _, fr in corpus["test"]], "fr")
    gold = read_gold(tmp_path / "test.align", "naacl", [len(s.split()) for s in src], [len(r.split()) for r in ref])
    assert len(gold) == 200 and all(S for S, _ in gold)
    # nearly every French word has a gold link; the exceptions are articles with no English word ("des")
    for (S, P), r in zip(gold, ref):
        words = r.split()
        unaligned = {words[j - 1].lower() for j in set(range(1, len(words) + 1)) - {j for _, j in P}}
        assert unaligned <= {"des", "de", "d'"}, unaligned
