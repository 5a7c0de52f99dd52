"""Minibatches as in App. B.2: shuffle once, traverse sequentially, and every `sort_k` updates take the next
`batch_size × sort_k` pairs, sort them by length and split them into `sort_k` minibatches (the paper: 20 × 80).
Sorting by length within a block keeps padding low without changing which sentences an epoch sees.

With a token budget (`batch_tokens` > 0) the sorted block is cut instead into minibatches of at most
`batch_tokens` padded words on their longer side (rows × longest sentence), so short sentences travel in large
batches and long ones in small: a block then gives as many minibatches as it needs.
"""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from rnnsearch.data.binarized import TokenPairs
from rnnsearch.data.vocab import PAD_ID


@dataclass
class Batch:
    x: torch.Tensor  # (B, Tx) source ids, </s>-terminated, PAD-padded
    lengths: torch.Tensor  # (B,) real source lengths (with </s>)
    y_in: torch.Tensor  # (B, Ty) decoder inputs [y_0=PAD, y_1, …, y_{Ty−1}]
    y_out: torch.Tensor  # (B, Ty) targets [y_1, …, y_Ty=</s>], PAD-padded
    index: list[int]  # positions of these pairs in the corpus

    def to(self, device) -> "Batch":
        return Batch(self.x.to(device), self.lengths, self.y_in.to(device), self.y_out.to(device), self.index)

    def share(self, rank: int, size: int) -> tuple["Batch", float]:
        """Process `rank`'s part of this minibatch among `size` data-parallel processes: rows rank, rank + size, …
        (the rows are sorted by length, so every share gets short and long ones), padded to its own longest.

        Returns the share and its weight in the loss: 1, or 0 for a process left without a row (a minibatch of
        fewer rows than processes), which then runs one row whose gradient counts for nothing."""
        rows = list(range(rank, self.x.size(0), size))
        weight = 1.0 if rows else 0.0
        rows = rows or [0]
        lengths = self.lengths[rows]
        y_out = self.y_out[rows]
        ty = int((y_out != PAD_ID).sum(1).max())
        return Batch(self.x[rows, : int(lengths.max())], lengths, self.y_in[rows, :ty], y_out[:, :ty],
                     [self.index[i] for i in rows]), weight

    @property
    def target_words(self) -> int:
        return int((self.y_out != PAD_ID).sum())

    @property
    def source_words(self) -> int:
        return int(self.lengths.sum())


def pad(seqs: Sequence[Sequence[int]]) -> torch.Tensor:
    out = torch.full((len(seqs), max(len(s) for s in seqs)), PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def make_batch(src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], index: list[int]) -> Batch:
    """src/tgt are id lists that already end in </s>."""
    y_out = pad(tgt)
    y_in = torch.cat([torch.full((len(tgt), 1), PAD_ID, dtype=torch.long), y_out[:, :-1]], dim=1)
    return Batch(pad(src), torch.tensor([len(s) for s in src]), y_in, y_out, index)


class PaperBatches:
    """Endless iterator over minibatches in the paper's order.

    The order is a pure function of (seed, epoch, block start), so the position (epoch, block start, batch
    within the block) is all a checkpoint needs to resume at exactly the next minibatch.
    """

    def __init__(self, pairs: TokenPairs, batch_size: int, sort_k: int, seed: int, batch_tokens: int = 0):
        if not len(pairs):
            raise ValueError("the training corpus is empty")
        self.pairs, self.batch_size, self.sort_k, self.seed = pairs, batch_size, sort_k, seed
        self.batch_tokens = batch_tokens
        self.epoch, self.offset, self.in_block = 0, 0, 0  # the next batch to yield
        self._order_epoch, self._order = -1, np.zeros(0, np.uint32)

    def _shuffled(self) -> np.ndarray:
        """Epoch `epoch`'s order: `random.shuffle` of 0 … N − 1, in 4 bytes a pair (not a list of ints)."""
        order = array("I", range(len(self.pairs)))
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return np.frombuffer(order, dtype=np.uint32)

    def _block(self) -> list[list[int]]:
        """The minibatches of the block that starts at `offset` in epoch `epoch`."""
        if self._order_epoch != self.epoch:  # data shuffled once per epoch, then traversed sequentially
            self._order, self._order_epoch = self._shuffled(), self.epoch
        block = self._order[self.offset : self.offset + self.batch_size * self.sort_k].astype(np.int64)
        src_len, tgt_len = self.pairs.lengths(block)
        by_length = np.lexsort((src_len, tgt_len))  # by target, then source length; stable, as sorted() was
        batches = self._split(block[by_length].tolist(), np.maximum(src_len, tgt_len)[by_length].tolist())
        random.Random(f"{self.seed}/{self.epoch}/{self.offset}").shuffle(batches)
        return batches

    def _split(self, idx: list[int], longer: list[int]) -> list[list[int]]:
        """`idx` (sorted) cut into minibatches; `longer`: each pair's longer side."""
        if not self.batch_tokens:
            return [idx[k : k + self.batch_size] for k in range(0, len(idx), self.batch_size)]
        batches, current, longest = [], [], 0
        for i, n in zip(idx, longer):
            if current and (len(current) + 1) * max(longest, n) > self.batch_tokens:
                batches.append(current)
                current, longest = [], 0
            current.append(i)
            longest = max(longest, n)
        return batches + [current]

    def __iter__(self) -> Iterator[Batch]:
        while True:
            batches = self._block()
            while self.in_block < len(batches):
                idx = batches[self.in_block]
                self.in_block += 1
                src, tgt = zip(*map(self.pairs.pair, idx))
                yield make_batch(src, tgt, idx)
            self.in_block = 0
            self.offset += self.batch_size * self.sort_k
            if self.offset >= len(self.pairs):
                self.epoch, self.offset = self.epoch + 1, 0

    def state(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset, "in_block": self.in_block}

    def restore(self, state: dict) -> None:
        self.epoch, self.offset, self.in_block = state["epoch"], state["offset"], state["in_block"]

    @property
    def position(self) -> float:
        """Epochs done, as a fraction (for Table 2's 'Epochs')."""
        done = self.offset + sum(len(b) for b in self._block()[: self.in_block])
        return self.epoch + min(done, len(self.pairs)) / len(self.pairs)


def sequential_batches(src: list[list[int]], tgt: list[list[int]], batch_size: int) -> Iterator[Batch]:
    """Length-sorted batches over a whole set, for evaluation; `Batch.index` restores the order."""
    order = sorted(range(len(src)), key=lambda i: len(src[i]))
    for k in range(0, len(order), batch_size):
        idx = order[k : k + batch_size]
        yield make_batch([src[i] for i in idx], [tgt[i] for i in idx], idx)
