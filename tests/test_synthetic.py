"""The embedded corpus: deterministic, long enough, and carrying the phenomena the paper's argument needs."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import sacrebleu

from rnnsearch.data.corpus import synthetic
from rnnsearch.data.corpus.lexicon import Adjective, Lexicon, Noun
from rnnsearch.data.corpus.synthetic import Grammar, detokenize_fr
from rnnsearch.data.text import tokenize_lines

SIZES = dict(n_nouns=400, n_adjectives=100, n_verbs=80, n_names=150)


@pytest.fixture(scope="module")
def corpus():
    return synthetic.generate(7, n_train=6000, n_dev=100, n_test=1000, max_len=60, **SIZES)


def test_same_seed_same_corpus_other_seed_other_corpus(corpus):
    again = synthetic.generate(7, n_train=6000, n_dev=100, n_test=1000, max_len=60, **SIZES)
    assert again == corpus
    other = synthetic.generate(8, n_train=6000, n_dev=100, n_test=1000, max_len=60, **SIZES)
    assert other["test"][:50] != corpus["test"][:50]


def test_test_set_covers_every_length_bucket_and_is_held_out(corpus):
    lengths = [len(s.split()) for s in tokenize_lines([en for en, _ in corpus["test"]], "en")]
    assert min(lengths) == 1 and max(lengths) >= 60
    per_bucket = Counter(min((n - 1) // 10, 5) for n in lengths if n <= 60)
    assert all(per_bucket[b] >= 100 for b in range(6)), per_bucket
    train_src = {en for en, _ in corpus["train"]}
    assert not train_src & {en for en, _ in corpus["test"] + corpus["dev"]}


def test_vocabulary_has_a_few_thousand_words_and_a_rare_tail(corpus):
    tok = tokenize_lines([fr for _, fr in corpus["train"]], "fr")
    counts = Counter(w for line in tok for w in line.split())
    assert len(counts) > 1000
    top = sum(c for _, c in counts.most_common(500)) / sum(counts.values())
    assert 0.85 < top < 0.99, top  # a 500-word shortlist leaves a real [UNK] rate


def test_adjectives_follow_the_noun_in_reverse_order_and_agree():
    lex = Lexicon(nouns=[Noun(("area",), ("zone",), "f")],
                  adjectives=[Adjective("european", "européen", False), Adjective("economic", "économique", False)],
                  verbs=[], names=["Paris"])
    grammar = Grammar(lex)
    rng = random.Random(0)
    seen = set()
    for _ in range(400):
        en, fr, _, number = grammar.noun_phrase(rng, depth=1)
        if en[-3:] == ["european", "economic", "area"]:
            seen.add(" ".join(fr))
            assert fr[-3:] == ["zone", "économique", "européenne"]  # reordered, feminine agreement
            assert fr[0] in ("la", "une", "cette", "ma")
        if en[-3:] == ["european", "economic", "areas"]:
            assert fr[-3:] == ["zones", "économiques", "européennes"]
            assert number == "pl" and fr[0] in ("les", "des", "ces", "mes")
    assert seen


def test_one_to_many_and_many_to_one_translations():
    lex = Lexicon(nouns=[Noun(("post", "office"), ("poste",), "f"), Noun(("potato",), ("pomme", "de", "terre"), "f")],
                  adjectives=[Adjective("red", "rouge", False)], verbs=[], names=["Paris"])
    grammar = Grammar(lex)
    rng = random.Random(1)
    seen = Counter()
    for _ in range(200):
        en, fr, _, _ = grammar.noun_phrase(rng, depth=1)
        text_en, text_fr = " ".join(en), " ".join(fr)
        if "post office" in text_en:  # many-to-one
            seen["compound"] += 1
            assert "poste" in text_fr and "office" not in text_fr
        if "potato" in text_en:  # one-to-many
            seen["multiword"] += 1
            assert "pomme de terre" in text_fr or "pommes de terre" in text_fr
    assert seen["compound"] and seen["multiword"]
    assert detokenize_fr(["de", "le", "arbre"]) == "De l'arbre"


def test_monotone_word_by_word_translation_does_not_solve_it(corpus):
    """A monotone word-for-word system (each source word → its most frequent target word at the same
    position) scores far below a trained model: reordering and fertility matter."""
    src = tokenize_lines([en for en, _ in corpus["train"]], "en")
    tgt = tokenize_lines([fr for _, fr in corpus["train"]], "fr")
    table: dict[str, Counter] = {}
    for s, t in zip(src, tgt):
        for a, b in zip(s.split(), t.split()):
            table.setdefault(a, Counter())[b] += 1
    test_src = tokenize_lines([en for en, _ in corpus["test"]], "en")
    test_ref = tokenize_lines([fr for _, fr in corpus["test"]], "fr")
    hyps = [" ".join(table[w].most_common(1)[0][0] if w in table else w for w in s.split()) for s in test_src]
    bleu = sacrebleu.corpus_bleu(hyps, [test_ref], tokenize="none", force=True).score
    assert bleu < 40, bleu  # measured 27 here; the default RNNsearch-50 reaches about 80 on this corpus
