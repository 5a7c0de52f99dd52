"""BLEU: tokenized BLEU equals an independent multi-bleu.perl computation; buckets sum n-gram statistics; on real
text (newstest2014) the scorer agrees with the sacrebleu command."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rnnsearch.data.text import tokenize_lines
from rnnsearch.data.vocab import build_vocab
from rnnsearch.evaluation.score import (
    bleu_by_length,
    buckets,
    no_unk_ids,
    sacre_bleu,
    tokenized_bleu,
)

HYPS = ["le chat est sur le tapis .", "il y a un chat sur le tapis", "la maison bleue", "je ne sais pas ."]
REFS = ["le chat est assis sur le tapis .", "il y a un chat sur le tapis .", "la maison est bleue", "je ne sais pas ."]


def multi_bleu(hyps: list[str], refs: list[str]) -> float:
    """multi-bleu.perl for one reference: clipped n-gram precisions summed over the corpus, brevity penalty."""
    match, total = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for h, r in zip(hyps, refs):
        h, r = h.split(), r.split()
        hyp_len += len(h)
        ref_len += len(r)
        for n in range(1, 5):
            hc = Counter(tuple(h[i : i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
            match[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            total[n - 1] += max(len(h) - n + 1, 0)
    if min(match) == 0:
        return 0.0
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(match, total)) / 4)


def test_tokenized_bleu_equals_multi_bleu():
    assert tokenized_bleu(HYPS, REFS).score == pytest.approx(multi_bleu(HYPS, REFS), abs=1e-6)
    assert tokenized_bleu(REFS, REFS).score == pytest.approx(100.0)


def test_sacrebleu_has_a_signature_and_tokenizes_itself():
    score, sig = sacre_bleu(["Le chat, il dort."], ["Le chat, il dort."])
    assert score == pytest.approx(100.0) and "tok:13a" in sig and "version:" in sig


def test_length_buckets_partition_the_test_set_and_sum_statistics():
    src = ["a " * n for n in (3, 12, 25, 9)]
    rows = bleu_by_length(src, HYPS, REFS, [10, 20])
    assert [r["bucket"] for r in rows] == ["1-10", "11-20", "21+"]
    assert [r["sentences"] for r in rows] == [2, 1, 1]
    first = rows[0]
    assert first["bleu"] == pytest.approx(multi_bleu([HYPS[0], HYPS[3]], [REFS[0], REFS[3]]), abs=1e-6)
    assert buckets([10]) == [(1, 10), (11, None)]


def test_no_unk_subset_needs_every_word_in_both_shortlists():
    src_vocab = build_vocab(Counter("a b c".split()), 2)  # shortlist: a, b
    tgt_vocab = build_vocab(Counter("x y".split()), 2)
    assert no_unk_ids(["a b", "a c", "b"], ["x", "x y", "z"], src_vocab, tgt_vocab) == [0]


def test_bucket_bleu_from_summed_statistics_and_bootstrap_interval():
    import numpy as np

    from rnnsearch.evaluation.score import (
        bleu_from_stats,
        bootstrap_interval,
        sentence_stats,
    )

    stats = sentence_stats(HYPS, REFS)
    assert stats.shape == (4, 10)
    assert bleu_from_stats(stats.sum(axis=0)) == pytest.approx(multi_bleu(HYPS, REFS), abs=1e-6)
    many = np.concatenate([stats] * 25)  # 100 sentences
    lo, hi = bootstrap_interval(many, 200, seed=1)
    point = bleu_from_stats(many.sum(axis=0))
    assert lo <= point <= hi and hi - lo > 0.5
    assert bootstrap_interval(many, 200, seed=1) == (lo, hi)  # seeded: reproducible
    rows = bleu_by_length(["a"] * 100, [h for h in HYPS] * 25, REFS * 25, [10], bootstrap=200, seed=1)
    assert rows[0]["ci_low"] <= rows[0]["bleu"] <= rows[0]["ci_high"] and rows[1]["ci_low"] is None


def test_real_text_sacrebleu_matches_the_sacrebleu_command(shared_data, tmp_path):
    """newstest2014 (the paper's test set): the reference scores 100 against itself, and a perturbed copy gets
    from the scorer exactly what the `sacrebleu` command prints, with the same signature."""
    ref = (shared_data / "newstest2014" / "newstest2014.fr").read_text(encoding="utf-8").splitlines()
    assert len(ref) == 3003
    assert sacre_bleu(ref, ref)[0] == pytest.approx(100.0, abs=1e-9)
    rng = random.Random(0)
    hyp = []
    for line in ref:  # drop some words, swap neighbours: a plausible system output
        words = [w for w in line.split() if rng.random() > 0.15]
        if len(words) > 3 and rng.random() < 0.5:
            k = rng.randrange(len(words) - 1)
            words[k], words[k + 1] = words[k + 1], words[k]
        hyp.append(" ".join(words))
    (tmp_path / "ref").write_text("\n".join(ref) + "\n", encoding="utf-8")
    (tmp_path / "hyp").write_text("\n".join(hyp) + "\n", encoding="utf-8")
    cli = Path(sys.executable).parent / "sacrebleu"
    out = json.loads(subprocess.run([str(cli), str(tmp_path / "ref"), "-i", str(tmp_path / "hyp"), "-m", "bleu"],
                                    capture_output=True, text=True, check=True).stdout)
    score, signature = sacre_bleu(hyp, ref)
    assert 20 < score < 90 and round(score, 1) == float(out["score"])
    assert signature == out["signature"]
    # tokenized BLEU (the paper era's multi-bleu on Moses tokens) against `sacrebleu -tok none`
    ref_tok, hyp_tok = tokenize_lines(ref, "fr"), tokenize_lines(hyp, "fr")
    (tmp_path / "ref.tok").write_text("\n".join(ref_tok) + "\n", encoding="utf-8")
    (tmp_path / "hyp.tok").write_text("\n".join(hyp_tok) + "\n", encoding="utf-8")
    out_tok = json.loads(subprocess.run([str(cli), str(tmp_path / "ref.tok"), "-i", str(tmp_path / "hyp.tok"), "-m",
                                         "bleu", "-tok", "none"], capture_output=True, text=True, check=True).stdout)
    assert round(tokenized_bleu(hyp_tok, ref_tok).score, 1) == float(out_tok["score"])
    assert tokenized_bleu(hyp_tok, ref_tok).score == pytest.approx(multi_bleu(hyp_tok, ref_tok), abs=1e-6)


def test_table3_of_the_report_takes_figures_long_min_len():
    """report.py had 30 words hard-coded: on Multi30k (long_min_len 25) the heading stood over an empty table."""
    from rnnsearch.evaluation.report import table3

    src = ["w " * 26, "w " * 5, "w " * 28, "w " * 3]
    ref = ["r1", "r2", "r3", "r4"]
    lines = table3(src, ref, {"m": ["h1", "h2", "h3", "h4"]}, 25)
    assert [x for x in lines if x.startswith("**Sentence")] == ["**Sentence 1** (26 words)", "**Sentence 3** (28 words)"]
    assert "- m: h3" in lines
    assert lines[2].startswith("The first 2 test sentences of 25 or more source words, in the order of the test file")
    lines = table3(src, ref, {"m": ["h1", "h2", "h3", "h4"]}, 40, k=2)
    assert "No test sentence has 40 or more source words (`figures.long_min_len`); the 2 longest instead, with each model's output as scored." in lines
    assert [x for x in lines if x.startswith("**Sentence")] == ["**Sentence 1** (26 words)", "**Sentence 3** (28 words)"]


def test_a_system_of_the_baselines_bleu_gets_p_one_and_the_note_says_how_to_read_p():
    """Two systems both at 0.00 BLEU showed p = 0.0099 (sacreBLEU's floor, 1/(n+1)), read as a significant
    difference."""
    from rnnsearch.evaluation.tables import paired_bootstrap

    refs = [f"the cat number {i} sleeps on the mat" for i in range(30)]
    nothing = ["x y z"] * 30
    p = paired_bootstrap(["base", "same", "good"], [nothing, list(nothing), refs], refs, 100)
    assert p["same"] == 1.0 and p["good"] == pytest.approx(1 / 101)


def test_figures_and_tables_show_the_papers_names_and_a_users_own_keys():
    from rnnsearch.evaluation.names import paper_name

    assert [paper_name(k, a) for k, a in (("rnnencdec-30", "rnnencdec"), ("rnnsearch-50", "rnnsearch"),
                                          ("rnnsearch-50-star", "rnnsearch"))] == \
        ["RNNencdec-30", "RNNsearch-50", "RNNsearch-50*"]
    # a user's own model keeps its key; so does a paper key set to another architecture (the name would lie)
    assert paper_name("luong-50", "luong") == "luong-50" and paper_name("rnnsearch-50", "rnnencdec") == "rnnsearch-50"
    assert paper_name("my-rnnsearch-50", "rnnsearch") == "my-rnnsearch-50"
