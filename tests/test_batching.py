"""App. B.2's minibatches (sorted blocks of 20 × 80) and the token-budget option: coverage, sizes, resume."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch

from rnnsearch.data.batching import PaperBatches
from rnnsearch.data.binarized import TokenPairs


def corpus(n: int = 1000, seed: int = 0):
    rng = random.Random(seed)
    src = [[3] * rng.randint(1, 50) + [1] for _ in range(n)]
    tgt = [[4] * rng.randint(1, 50) + [1] for _ in range(n)]
    return src, tgt


def one_epoch(batches: PaperBatches) -> list[list[int]]:
    out = []
    for b in batches:
        if batches.epoch == 1:  # b is the first batch of the next epoch
            return out
        out.append(b.index)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("tokens", [0, 600])
def test_an_epoch_sees_every_pair_once_in_bounded_batches(tokens):
    src, tgt = corpus()
    batches = PaperBatches(TokenPairs.from_lists(src, tgt), batch_size=40, sort_k=5, seed=1, batch_tokens=tokens)
    epoch = one_epoch(batches)
    assert sorted(itertools.chain(*epoch)) == list(range(len(src)))
    for idx in epoch:
        if tokens:  # rows × longest sentence (either side) within the budget, unless one sentence alone exceeds it
            longest = max(max(len(src[i]), len(tgt[i])) for i in idx)
            assert len(idx) * longest <= tokens or len(idx) == 1
        else:
            assert len(idx) <= 40
    if not tokens:
        assert len(epoch) == 25  # 1000 pairs / 40
    else:
        assert len(epoch) > 25  # long sentences travel in small batches


def test_batches_within_a_block_are_length_sorted():
    src, tgt = corpus()
    batches = PaperBatches(TokenPairs.from_lists(src, tgt), batch_size=40, sort_k=5, seed=1)
    block = batches._block()
    lengths = [sorted(len(tgt[i]) for i in b) for b in block]
    spans = sorted((ls[0], ls[-1]) for ls in lengths)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # the sorted block was cut into disjoint ranges


@pytest.mark.parametrize("tokens", [0, 600])
def test_a_restored_iterator_continues_with_the_same_batches(tokens):
    src, tgt = corpus()
    a = PaperBatches(TokenPairs.from_lists(src, tgt), 40, 5, seed=2, batch_tokens=tokens)
    it = iter(a)
    for _ in range(37):
        next(it)
    state, position = a.state(), a.position
    expected = [next(it).index for _ in range(20)]
    b = PaperBatches(TokenPairs.from_lists(src, tgt), 40, 5, seed=2, batch_tokens=tokens)
    b.restore(state)
    assert b.position == position
    it_b = iter(b)
    assert [next(it_b).index for _ in range(20)] == expected


def test_position_counts_epochs():
    src, tgt = corpus(400)
    batches = PaperBatches(TokenPairs.from_lists(src, tgt), 40, 5, seed=3, batch_tokens=500)
    positions = []
    for _ in iter(batches):
        positions.append(batches.position)
        if len(positions) > 200:
            break
    assert positions == sorted(positions)
    assert any(abs(p - 1.0) < 1e-9 for p in positions) and positions[-1] > 1.0


def todays_order(src, tgt, batch_size, sort_k, seed, batch_tokens, epochs):
    """The minibatches (pair positions) of the first `epochs` epochs as the code before binarization made them:
    a shuffled list of ints, each block sorted by (target, source) length with `sorted`, cut, shuffled."""
    out = []
    for epoch in range(epochs):
        order = list(range(len(src)))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        for offset in range(0, len(src), batch_size * sort_k):
            idx = sorted(order[offset : offset + batch_size * sort_k], key=lambda i: (len(tgt[i]), len(src[i])))
            if not batch_tokens:
                batches = [idx[k : k + batch_size] for k in range(0, len(idx), batch_size)]
            else:
                batches, current, longest = [], [], 0
                for i in idx:
                    n = max(len(src[i]), len(tgt[i]))
                    if current and (len(current) + 1) * max(longest, n) > batch_tokens:
                        batches.append(current)
                        current, longest = [], 0
                    current.append(i)
                    longest = max(longest, n)
                batches.append(current)
            random.Random(f"{seed}/{epoch}/{offset}").shuffle(batches)
            out += batches
    return out


@pytest.mark.parametrize("tokens", [0, 600])
def test_the_minibatches_are_todays(tokens):
    """The order of pairs, blocks and minibatches is the one trainings before the binarize stage saw (so their
    checkpoints resume to the same parameters)."""
    src, tgt = corpus(900)
    want = todays_order(src, tgt, 40, 5, 7, tokens, epochs=3)
    it = iter(PaperBatches(TokenPairs.from_lists(src, tgt), 40, 5, seed=7, batch_tokens=tokens))
    assert [next(it).index for _ in range(len(want))] == want


def write_text(path, sentences):
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")


@pytest.fixture(scope="module")
def text_and_binarized(tmp_path_factory):
    """A word corpus (some words outside the shortlists), its shortlists and its binarized files."""
    from rnnsearch.data.binarized import run_binarize
    from rnnsearch.data.vocab import Vocab

    d, rng = tmp_path_factory.mktemp("binarized"), random.Random(3)
    words = [f"w{k}" for k in range(400)]
    for side in ("src", "tgt"):
        write_text(d / f"train.{side}", [rng.choices(words, k=rng.randint(1, 50)) for _ in range(1000)])
        Vocab(["<pad>", "</s>", "[UNK]"] + words[:300], [0, 0, 0] + [1] * 300).save(d / f"vocab.{side}.tsv")
    run_binarize(d / "train.src", d / "train.tgt", d / "vocab.src.tsv", d / "vocab.tgt.tsv", str(d / "bin/train"))
    return d


@pytest.mark.parametrize("tokens", [0, 600])
def test_batches_from_the_binarized_files_equal_batches_from_the_text(text_and_binarized, tokens):
    from rnnsearch.data.binarized import load, training_pairs
    from rnnsearch.data.vocab import Vocab

    d = text_and_binarized
    texts, vocab_paths = (d / "train.src", d / "train.tgt"), (d / "vocab.src.tsv", d / "vocab.tgt.tsv")
    mapped = load(d / "bin/train", texts, vocab_paths)
    assert isinstance(mapped.ids[0], np.memmap) and mapped.ids[0].dtype == np.uint16  # 303 ids
    in_memory = training_pairs(texts, tuple(map(Vocab.load, vocab_paths)), vocab_paths, None)
    a, b = (PaperBatches(p, 40, 5, seed=4, batch_tokens=tokens) for p in (mapped, in_memory))
    ita, itb, after = iter(a), iter(b), []
    for step in range(200):  # blocks of 200 pairs, 5 an epoch (more minibatches with a budget): into a third epoch
        x, y = next(ita), next(itb)
        assert x.index == y.index and all(torch.equal(getattr(x, f), getattr(y, f))
                                          for f in ("x", "lengths", "y_in", "y_out")), f"batch {step}"
        assert a.state() == b.state()
        if step == 57:  # a checkpoint's position: resumed on another mapping of the files
            c = PaperBatches(load(d / "bin/train", texts, vocab_paths), 40, 5, seed=4, batch_tokens=tokens)
            c.restore(a.state())
        after += [x.index] if step > 57 else []
    assert a.epoch >= 2
    itc = iter(c)
    assert [next(itc).index for _ in after] == after


def test_binarize_refuses_texts_of_different_lengths_and_writes_nothing(tmp_path):
    import re

    from rnnsearch.data.binarized import run_binarize
    from rnnsearch.data.vocab import Vocab
    from rnnsearch.textio import InputError

    write_text(tmp_path / "t.src", [["a", "b"]] * 3)
    write_text(tmp_path / "t.tgt", [["a"]] * 2)
    Vocab(["<pad>", "</s>", "[UNK]", "a", "b"], [0, 0, 0, 1, 1]).save(tmp_path / "v.tsv")
    want = f"{tmp_path / 't.tgt'} has 2 lines but {tmp_path / 't.src'} has more: parallel files must align"
    with pytest.raises(InputError, match=re.escape(want)):
        run_binarize(tmp_path / "t.src", tmp_path / "t.tgt", tmp_path / "v.tsv", tmp_path / "v.tsv",
                     str(tmp_path / "bin/t"))
    assert list((tmp_path / "bin").iterdir()) == []
