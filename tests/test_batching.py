"""App. B.2's minibatches (sorted blocks of 20 × 80) and the token-budget option: coverage, sizes, resume."""

from __future__ import annotations

import itertools
import random

import pytest

from rnnsearch.data.batching import PaperBatches


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
    batches = PaperBatches(src, tgt, batch_size=40, sort_k=5, seed=1, batch_tokens=tokens)
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
    batches = PaperBatches(src, tgt, batch_size=40, sort_k=5, seed=1)
    block = batches._block()
    lengths = [sorted(len(tgt[i]) for i in b) for b in block]
    spans = sorted((ls[0], ls[-1]) for ls in lengths)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # the sorted block was cut into disjoint ranges


@pytest.mark.parametrize("tokens", [0, 600])
def test_a_restored_iterator_continues_with_the_same_batches(tokens):
    src, tgt = corpus()
    a = PaperBatches(src, tgt, 40, 5, seed=2, batch_tokens=tokens)
    it = iter(a)
    for _ in range(37):
        next(it)
    state, position = a.state(), a.position
    expected = [next(it).index for _ in range(20)]
    b = PaperBatches(src, tgt, 40, 5, seed=2, batch_tokens=tokens)
    b.restore(state)
    assert b.position == position
    it_b = iter(b)
    assert [next(it_b).index for _ in range(20)] == expected


def test_position_counts_epochs():
    src, tgt = corpus(400)
    batches = PaperBatches(src, tgt, 40, 5, seed=3, batch_tokens=500)
    positions = []
    for _ in iter(batches):
        positions.append(batches.position)
        if len(positions) > 200:
            break
    assert positions == sorted(positions)
    assert any(abs(p - 1.0) < 1e-9 for p in positions) and positions[-1] > 1.0
