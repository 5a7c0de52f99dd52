"""Shortlist vocabularies (§4.1): the K most frequent words of each language; every other word → [UNK].

File format (`vocab.<lang>.tsv`): one entry per line, `id<TAB>word<TAB>count`, ids 0..K+2: first the
specials (<pad>, </s>, [UNK]), then the shortlist by decreasing frequency (ties broken alphabetically, so
the file is deterministic). Counts are those of the training text.

`vocab.kind: sentencepiece` (an ablation against the paper's word shortlist) trains a SentencePiece unigram model
of K pieces per language on the same merged word counts, and saves it beside the TSV (`vocab.<lang>.spm`); the
TSV then lists the pieces. Such a vocabulary segments words into pieces in `encode` and joins them back into words
in `decode`, so the text files, BLEU and the rest of the pipeline stay word-level; only the model (and its
attention) sees pieces.
"""

from __future__ import annotations

import heapq
import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from rnnsearch.settings import VocabConfig
from rnnsearch.textio import InputError, atomic_path, read_lines, write_json_atomic

PAD_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "</s>", "[UNK]"
SPECIALS = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2


@dataclass
class Vocab:
    words: list[str]  # id → word (or piece), specials first
    counts: list[int]
    spm: bytes | None = None  # a SentencePiece model: `words` are its pieces

    def __post_init__(self):
        self.index = {w: i for i, w in enumerate(self.words)}
        self._sp = None
        if self.spm is not None:
            import sentencepiece

            self._sp = sentencepiece.SentencePieceProcessor(model_proto=self.spm)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        """Whether the model sees `word` without [UNK] (for subwords: every piece of it is known)."""
        if word in SPECIALS:
            return False
        return all(p in self.index for p in self.units([word])) if self._sp else word in self.index

    def units(self, tokens: Iterable[str]) -> list[str]:
        """What the model reads: the words themselves, or their SentencePiece pieces."""
        tokens = list(tokens)
        return self._sp.encode(" ".join(tokens), out_type=str) if self._sp is not None and tokens else tokens

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Ids of the words (pieces) followed by </s>; out-of-shortlist words map to [UNK]."""
        return [self.index.get(t, UNK_ID) for t in self.units(tokens)] + [EOS_ID]

    def decode(self, ids: Iterable[int], units: bool = False) -> list[str]:
        """Words up to (not including) </s>, padding skipped; pieces are joined into words unless `units`."""
        out = []
        for i in ids:
            if i == EOS_ID:
                break
            if i != PAD_ID:
                out.append(self.words[i])
        if self._sp is None or units:
            return out
        return "".join(out).replace("\u2581", " ").split()  # SentencePiece marks a word start with ▁

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            for i, (w, c) in enumerate(zip(self.words, self.counts)):
                f.write(f"{i}\t{w}\t{c}\n")
        spm = spm_path(path)
        if self.spm is None:
            spm.unlink(missing_ok=True)  # a word shortlist now: no stale model beside it
        else:
            with atomic_path(spm) as tmp:
                tmp.write_bytes(self.spm)

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
        spm = spm_path(path)
        return cls(words, counts, spm.read_bytes() if spm.exists() else None)


def spm_path(vocab_path: str | Path) -> Path:
    """Where a subword vocabulary keeps its SentencePiece model: vocab.<lang>.spm beside vocab.<lang>.tsv."""
    return Path(vocab_path).with_suffix(".spm")


def count_words(lines: Iterable[str]) -> Counter:
    counts: Counter = Counter()
    for line in lines:
        counts.update(line.split())
    return counts


def build_vocab(counts: Counter, size: int) -> Vocab:
    """The `size` most frequent words (the paper: 30,000 per language) plus the three specials."""
    return shortlist(sorted(counts.items()), size)[0]


def coverage(vocab: Vocab, counts: Counter) -> float:
    """Share of running words that the shortlist covers (1 − [UNK] rate)."""
    total = sum(counts.values())
    return sum(c for w, c in counts.items() if w in vocab) / total if total else 1.0


def run_count(input: str, output: str) -> dict:
    """Word counts of one tokenized file (a shard), as `word<TAB>count` lines sorted by word: the input of the
    streaming merge in `run_vocab`."""
    counts = count_words(read_lines(input))
    with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
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


def shortlist(counts: Iterable[tuple[str, int]], size: int) -> tuple[Vocab, dict]:
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


def train_sentencepiece(counts: Iterable[tuple[str, int]], size: int, seed: int) -> tuple[Vocab, dict]:
    """A SentencePiece unigram model of `size` pieces trained on (word, count) pairs (its TSV input: memory grows
    with the word types, not the corpus), as a Vocab; and the totals of the stream."""
    import sentencepiece

    totals = {"types": 0, "tokens": 0}

    def words():
        for w, c in counts:
            if w not in SPECIALS:
                totals["types"] += 1
                totals["tokens"] += c
                yield f"{w}\t{c}"

    model = io.BytesIO()
    sentencepiece.set_random_generator_seed(seed)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=words(), input_format="tsv", model_writer=model, vocab_size=size + 1, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
        num_threads=1, minloglevel=2)  # one thread and the seed: the same model on every run
    if not totals["types"]:
        raise InputError("sentencepiece: no words to train on")
    sp = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    kept = [i for i in range(sp.get_piece_size()) if not (sp.is_unknown(i) or sp.is_control(i))]
    return Vocab(list(SPECIALS) + [sp.id_to_piece(i) for i in kept],
                 [0, 0, 0] + [round(-sp.get_score(i) * 1000) for i in kept], model.getvalue()), totals


def run_vocab(src: list[str], tgt: list[str], out_src: str, out_tgt: str, vocab: VocabConfig,
              stats: str | None = None, seed: int = 0) -> dict:
    """Stage 4: both vocabularies, from tokenized training text or from per-shard `.counts` files (merged as
    streams: memory grows with the shortlist size, not with the corpus). `kind`: shortlist (the paper) or
    sentencepiece (a subword model of that many pieces; the TSV's counts column holds −1000 × each piece's log-probability)."""
    kind, found = vocab.kind, {}
    for inputs, out, size, side in ((src, out_src, vocab.src_size, "src"), (tgt, out_tgt, vocab.tgt_size, "tgt")):
        if kind == "sentencepiece":
            words, totals = train_sentencepiece(merge_counts(list(inputs)), size, seed)
            totals["covered"] = sum(c for w, c in merge_counts(list(inputs)) if w in words)
        else:
            words, totals = shortlist(merge_counts(list(inputs)), size)
        words.save(out)
        found[side] = {"kind": kind, "types": totals["types"], "shortlist": len(words) - len(SPECIALS),
                       "tokens": totals["tokens"],
                       "coverage": round(totals["covered"] / totals["tokens"], 5) if totals["tokens"] else 1.0}
    if stats:
        write_json_atomic(stats, found)
    return found
