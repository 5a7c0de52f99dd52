"""Shortlist vocabularies (§4.1): the K most frequent words of each language; every other word → [UNK].

File format (`vocab.<lang>.tsv`): one entry per line, `id<TAB>word<TAB>count`, ids 0..K+2: first the
specials (<pad>, </s>, [UNK]), then the shortlist by decreasing frequency (ties broken alphabetically, so
the file is deterministic). Counts are those of the training text.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

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
    ranked = sorted((w for w in counts if w not in SPECIALS), key=lambda w: (-counts[w], w))[:size]
    return Vocab(list(SPECIALS) + ranked, [0, 0, 0] + [counts[w] for w in ranked])


def coverage(vocab: Vocab, counts: Counter) -> float:
    """Share of running words that the shortlist covers (1 − [UNK] rate)."""
    total = sum(counts.values())
    return sum(c for w, c in counts.items() if w in vocab) / total if total else 1.0


def run_vocab(src_train: str, tgt_train: str, src_out: str, tgt_out: str, size_src: int, size_tgt: int,
              stats_out: str | None = None) -> dict:
    """Stage 4: build both shortlists from the tokenized training text."""
    stats = {}
    for text, out, size, side in ((src_train, src_out, size_src, "src"), (tgt_train, tgt_out, size_tgt, "tgt")):
        counts = count_words(read_lines(text))
        vocab = build_vocab(counts, size)
        vocab.save(out)
        stats[side] = {"types": len(counts), "shortlist": len(vocab) - len(SPECIALS),
                       "coverage": round(coverage(vocab, counts), 5)}
    if stats_out:
        write_json_atomic(stats_out, stats)
    return stats
