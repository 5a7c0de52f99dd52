"""Shortlist vocabularies (§4.1): the K most frequent words of each language; every other word → [UNK].

File format (`vocab.<lang>.tsv`): one entry per line, `id<TAB>word<TAB>count`, ids 0..K+2: first the
specials (<pad>, </s>, [UNK]), then the shortlist by decreasing frequency (ties broken alphabetically, so
the file is deterministic). Counts are those of the training text.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from .textio import InputError, atomic_path, read_lines, write_json_atomic

PAD_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "</s>", "[UNK]"
SPECIALS = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2


@dataclass
class Vocab:
    words: list[str]  # id → word, specials first
    counts: list[int]

    def __post_init__(self):
        self.index = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index and word not in SPECIALS

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Word ids followed by </s>; out-of-shortlist words map to [UNK]."""
        return [self.index.get(t, UNK_ID) for t in tokens] + [EOS_ID]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to (not including) </s>; padding is skipped."""
        out = []
        for i in ids:
            if i == EOS_ID:
                break
            if i != PAD_ID:
                out.append(self.words[i])
        return out

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            for i, (w, c) in enumerate(zip(self.words, self.counts)):
                f.write(f"{i}\t{w}\t{c}\n")

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        words, counts = [], []
        for lineno, line in enumerate(read_lines(path), 1):
            parts = line.split("\t")
            if len(parts) != 3 or not parts[0].isdigit() or int(parts[0]) != lineno - 1 or not parts[2].isdigit():
                raise InputError(f"{path}:{lineno}: expected 'id<TAB>word<TAB>count' with id {lineno - 1}, got {line[:80]!r}")
            words.append(parts[1])
            counts.append(int(parts[2]))
        if tuple(words[:3]) != SPECIALS:
            raise InputError(f"{path}: the first three entries must be {', '.join(SPECIALS)}")
        return cls(words, counts)


def count_words(lines: Iterable[str]) -> Counter:
    counts: Counter = Counter()
    for line in lines:
        counts.update(line.split())
    return counts


def build_vocab(counts: Counter, size: int) -> Vocab:
    """The `size` most frequent words (the paper: 30,000 per language) plus the three specials."""
    return _shortlist(sorted(counts.items()), size)[0]


def coverage(vocab: Vocab, counts: Counter) -> float:
    """Share of running words that the shortlist covers (1 − [UNK] rate)."""
    total = sum(counts.values())
    return sum(c for w, c in counts.items() if w in vocab) / total if total else 1.0


def run_count(text: str, out: str) -> dict:
    """Word counts of one tokenized file (a shard), as `word<TAB>count` lines sorted by word: the input of the
    streaming merge in `run_vocab`."""
    counts = count_words(read_lines(text))
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for w, c in sorted(counts.items()):
            f.write(f"{w}\t{c}\n")
    return {"types": len(counts), "tokens": sum(counts.values())}


def _sorted_counts(path: str) -> Iterator[tuple[str, int]]:
    """(word, count) in word order from a `.counts` file (streamed) or a tokenized text (counted here)."""
    if not str(path).endswith(".counts"):
        yield from sorted(count_words(read_lines(path)).items())
        return
    previous = None
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            word, _, count = line.rstrip("\n").rpartition("\t")
            if not word or not count.isdigit() or (previous is not None and word <= previous):
                raise InputError(f"{path}:{lineno}: expected 'word<TAB>count' lines in increasing word order, "
                                 f"got {line[:80]!r}")
            previous = word
            yield word, int(count)


def merge_counts(paths: list[str]) -> Iterator[tuple[str, int]]:
    """The per-shard counts summed, in word order, holding one line per shard in memory."""
    word, total = None, 0
    for w, c in heapq.merge(*(_sorted_counts(p) for p in paths)):
        if w != word:
            if word is not None:
                yield word, total
            word, total = w, 0
        total += c
    if word is not None:
        yield word, total


def _shortlist(counts: Iterable[tuple[str, int]], size: int) -> tuple[Vocab, dict]:
    """The `size` most frequent words of a (word, count) stream, ties broken alphabetically, in O(size) memory;
    and the totals of the stream."""
    totals = {"types": 0, "tokens": 0}

    def counted():
        for w, c in counts:
            if w in SPECIALS:
                continue
            totals["types"] += 1
            totals["tokens"] += c
            yield w, c

    ranked = heapq.nsmallest(size, counted(), key=lambda wc: (-wc[1], wc[0]))
    vocab = Vocab(list(SPECIALS) + [w for w, _ in ranked], [0, 0, 0] + [c for _, c in ranked])
    totals["covered"] = sum(c for _, c in ranked)
    return vocab, totals


def run_vocab(src_inputs: list[str], tgt_inputs: list[str], src_out: str, tgt_out: str, size_src: int, size_tgt: int,
              stats_out: str | None = None) -> dict:
    """Stage 4: both shortlists, from tokenized training text or from per-shard `.counts` files (merged as
    streams: memory grows with the shortlist size, not with the corpus)."""
    stats = {}
    for inputs, out, size, side in ((src_inputs, src_out, size_src, "src"), (tgt_inputs, tgt_out, size_tgt, "tgt")):
        vocab, totals = _shortlist(merge_counts(list(inputs)), size)
        vocab.save(out)
        stats[side] = {"types": totals["types"], "shortlist": len(vocab) - len(SPECIALS), "tokens": totals["tokens"],
                       "coverage": round(totals["covered"] / totals["tokens"], 5) if totals["tokens"] else 1.0}
    if stats_out:
        write_json_atomic(stats_out, stats)
    return stats
