"""Stage 4b: a training set as token ids on disk, memory-mapped by every training process.

The layout of fairseq's `MMapIndexedDataset`, for sentence pairs. For a prefix such as `results/data/bin/train50`:

* `train50.src.bin`, `train50.tgt.bin`: every sentence's ids (`Vocab.encode`: </s> included), one after the
  other, in the smallest unsigned type that holds the shortlist (uint16 below 65,536 words);
* `train50.idx`: int64 offsets, (N + 1) rows of (source, target): sentence i of side s is
  `ids[s][o[i, s]:o[i + 1, s]]` (pair-major: a pair's offsets lie side by side, on one page);
* `train50.json`: the header, written last: the format, pair count, dtype, each file's size, and for each side the
  sha256 of its shortlist and of its text (with the text's size and mtime), and the stage's time.

The stage reads both texts line by line, in step, and writes the three files as it goes: its memory does not grow
with the corpus.

Training maps the arrays (`numpy.memmap`): before the first update it reads the header and the shortlists; a
minibatch reads its own sentences' ids; processes on one machine share the pages. A header whose shortlist or
text differs from the files training is given stops training, naming both files.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from rnnsearch.data.vocab import Vocab, spm_path
from rnnsearch.textio import (InputError, atomic_path, iter_lines, leftover_temporaries, read_json, read_parallel,
                              write_json_atomic)

FORMAT = "rnnsearch-binarized-pairs/2"
SIDES = ("src", "tgt")


@dataclass
class TokenPairs:
    """Sentence pairs as flat id arrays (in memory or memory-mapped): pair i is
    (ids[0][offsets[i, 0]:offsets[i + 1, 0]], ids[1][offsets[i, 1]:offsets[i + 1, 1]])."""

    ids: tuple[np.ndarray, np.ndarray]  # (source ids, target ids), each flat
    offsets: np.ndarray  # (N + 1, 2) int64

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def lengths(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Source and target lengths (</s> included) of the pairs `idx`, as two int64 arrays."""
        start, end = self.offsets[idx], self.offsets[idx + 1]  # (len(idx), 2) each
        return end[:, 0] - start[:, 0], end[:, 1] - start[:, 1]

    def pair(self, i: int) -> tuple[list[int], list[int]]:
        (s0, t0), (s1, t1) = self.offsets[i], self.offsets[i + 1]
        return self.ids[0][s0:s1].tolist(), self.ids[1][t0:t1].tolist()

    @classmethod
    def from_lists(cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]]) -> "TokenPairs":
        """In memory, from id lists (the text encoded by `Vocab.encode`)."""
        if len(src) != len(tgt):
            raise ValueError("source and target corpora differ in length")
        sides = [(np.fromiter((t for s in side for t in s), dtype=np.int64),
                  np.concatenate([[0], np.cumsum([len(s) for s in side], dtype=np.int64)])) for side in (src, tgt)]
        return cls((sides[0][0], sides[1][0]), np.stack([sides[0][1], sides[1][1]], axis=1))


def id_dtype(vocab_size: int) -> str:
    """The smallest unsigned type that holds ids 0 … vocab_size − 1."""
    return next(name for name, bits in (("uint8", 8), ("uint16", 16), ("uint32", 32)) if vocab_size <= 1 << bits)


def paths(prefix: str | Path) -> dict[str, Path]:
    prefix = str(prefix)
    return {"src": Path(prefix + ".src.bin"), "tgt": Path(prefix + ".tgt.bin"), "idx": Path(prefix + ".idx"),
            "header": Path(prefix + ".json")}


def vocab_sha256(path: str | Path) -> str:
    """The shortlist's identity: its TSV and, for subwords, its SentencePiece model."""
    digest = hashlib.sha256(Path(path).read_bytes())
    if spm_path(path).exists():
        digest.update(spm_path(path).read_bytes())
    return digest.hexdigest()


def _encoded_pairs(texts: tuple[Path, Path], vocabs: tuple[Vocab, Vocab], digests: tuple) -> Iterator[tuple]:
    """Both texts read in step, line by line: each pair's ids (`Vocab.encode`, </s> included)."""
    missing = object()
    lines = itertools.zip_longest(*(iter_lines(t, d) for t, d in zip(texts, digests)), fillvalue=missing)
    for lineno, (s, t) in enumerate(lines, 1):
        if s is missing or t is missing:
            short, long = texts if s is missing else texts[::-1]
            raise InputError(f"{short} has {lineno - 1} lines but {long} has more: parallel files must align line "
                             "by line")
        yield vocabs[0].encode(s.split()), vocabs[1].encode(t.split())


def _write(texts: tuple[Path, Path], vocabs: tuple[Vocab, Vocab], files: dict[str, Path], dtype: str) -> dict:
    """The ids of both sides and the offsets, streamed into temporary files renamed onto `files` at the end;
    returns each side's header entry and the pair count."""
    digests, code = (hashlib.sha256(), hashlib.sha256()), np.dtype(dtype).char  # "B", "H", "I": array's codes
    bufs, offsets, ends, pairs = (array(code), array(code)), array("q", [0, 0]), [0, 0], 0
    with contextlib.ExitStack() as stack:
        tmp = {k: stack.enter_context(atomic_path(files[k])) for k in (*SIDES, "idx")}
        outs = [stack.enter_context(open(tmp[k], "wb")) for k in (*SIDES, "idx")]
        for pair in _encoded_pairs(texts, vocabs, digests):
            for k, ids in enumerate(pair):
                bufs[k].extend(ids)
                ends[k] += len(ids)
            offsets.extend(ends)
            pairs += 1
            if len(offsets) >= 1 << 18:
                _flush((*bufs, offsets), outs)
        _flush((*bufs, offsets), outs, close=True)
        sizes = [Path(tmp[k]).stat().st_size for k in (*SIDES, "idx")]
    sides = {}
    for k, (side, text) in enumerate(zip(SIDES, texts)):
        st = text.stat()
        sides[side] = {"text": str(text), "text_sha256": digests[k].hexdigest(), "text_bytes": st.st_size,
                       "text_mtime_ns": st.st_mtime_ns, "tokens": ends[k], "bin_bytes": sizes[k]}
    return {**sides, "pairs": pairs, "idx_bytes": sizes[2]}


def _flush(bufs: Sequence[array], outs: Sequence, close: bool = False) -> None:
    """Each buffer appended to its file (and emptied); an error of the write (a full disk) names that file, so
    that its atomic_path, not another's, reports it."""
    for buf, out in zip(bufs, outs):
        try:
            buf.tofile(out)
            if close:
                out.close()
        except OSError as e:
            raise OSError(e.errno, e.strerror, out.name) from None
        del buf[:]


def run_binarize(src: str, tgt: str, src_vocab: str, tgt_vocab: str, out: str) -> dict:
    """The binarize stage: `src`/`tgt` (a tokenized training set) encoded with the shortlists into `out`.*."""
    start, files = time.perf_counter(), paths(out)
    vocab_paths = (Path(src_vocab), Path(tgt_vocab))
    vocabs = (Vocab.load(src_vocab), Vocab.load(tgt_vocab))
    dtype = id_dtype(max(map(len, vocabs)))
    files["header"].parent.mkdir(parents=True, exist_ok=True)
    files["header"].unlink(missing_ok=True)  # no header beside half-written arrays
    for tmp in (t for f in files.values() for t in leftover_temporaries(f)):  # of a killed run of these outputs
        tmp.unlink(missing_ok=True)
    header = {"format": FORMAT, "dtype": dtype, **_write((Path(src), Path(tgt)), vocabs, files, dtype)}
    for side, path, vocab in zip(SIDES, vocab_paths, vocabs):
        header[side].update(vocab=str(path), vocab_sha256=vocab_sha256(path), vocab_size=len(vocab))
    header["seconds"] = round(time.perf_counter() - start, 3)
    write_json_atomic(files["header"], header)
    return header


def _check(header: dict, files: dict[str, Path], texts: tuple[str, str], vocabs: tuple[str, str]) -> None:
    """Stops (InputError naming both files) where the binarized set is not of these texts and shortlists."""
    where = files["header"]
    if header.get("format") != FORMAT:
        raise InputError(f"{where}: not a binarized training set of this version (format {header.get('format')!r}, "
                         f"expected {FORMAT!r}); rerun the binarize stage")
    for side, text, vocab in zip(SIDES, map(Path, texts), map(Path, vocabs)):
        h = header[side]
        if vocab_sha256(vocab) != h["vocab_sha256"]:
            raise InputError(f"{where}: made with the shortlist {h['vocab']}, which is not {vocab} (sha256 differs); "
                             "rerun the binarize stage with the shortlist training uses")
        if not text.exists():
            raise InputError(f"{text}: file not found")
        st = text.stat()
        if st.st_size != h["text_bytes"] or (st.st_mtime_ns != h["text_mtime_ns"]
                                             and _sha256(text) != h["text_sha256"]):  # touched, maybe changed
            raise InputError(f"{where}: stale against {text} (made from a text of {h['text_bytes']} bytes, sha256 "
                             f"{h['text_sha256'][:12]}…, which it no longer is); rerun the binarize stage")
        if files[side].stat().st_size != h["bin_bytes"]:
            raise InputError(f"{files[side]}: {files[side].stat().st_size} bytes, {where} says {h['bin_bytes']}")


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def load(prefix: str | Path, texts: tuple[str, str], vocabs: tuple[str, str]) -> TokenPairs:
    """The binarized set at `prefix`, memory-mapped, after checking it against the texts and shortlists."""
    files = paths(prefix)
    for f in files.values():
        if not f.exists():
            raise InputError(f"{f}: file not found (the binarize stage writes it)")
    header = read_json(files["header"])
    _check(header, files, texts, vocabs)
    if files["idx"].stat().st_size != 16 * (header["pairs"] + 1):
        raise InputError(f"{files['idx']}: {files['idx'].stat().st_size} bytes, {files['header']} says "
                         f"{header['pairs']} pairs ({16 * (header['pairs'] + 1)} bytes)")
    offsets = np.memmap(files["idx"], dtype=np.int64, mode="r", shape=(header["pairs"] + 1, 2))
    ids = tuple(np.memmap(files[s], dtype=header["dtype"], mode="r") if header[s]["tokens"] else
                np.zeros(0, header["dtype"]) for s in SIDES)
    for k, side in enumerate(SIDES):
        _check_offsets(offsets[:, k], header[side]["tokens"], side, files["idx"])
        _check_ids(files[side], header["dtype"], offsets[:, k], header[side]["vocab_size"], header[side]["vocab"])
    return TokenPairs(ids, offsets)


def _check_offsets(o: np.ndarray, tokens: int, side: str, idx: Path) -> None:
    """One side's offsets (the N + 1 rows of the index): from 0, never falling, none past the side's `tokens` ids,
    the last at it; else an InputError naming the index and the first row that breaks the rule."""
    damaged = "the index is damaged: rerun the binarize stage"
    past = np.flatnonzero(o > tokens)
    if o[0] != 0 or past.size:
        i = 0 if o[0] != 0 else int(past[0])
        raise InputError(f"{idx}: the {side} offset in row {i + 1} of {len(o)} is {int(o[i])}, outside the "
                         f"{side} side's ids (0 to {tokens}); {damaged}")
    falls = np.flatnonzero(o[1:] < o[:-1])
    if falls.size:
        i = int(falls[0])
        raise InputError(f"{idx}: the {side} offsets in rows {i + 1} and {i + 2} fall ({int(o[i])}, then "
                         f"{int(o[i + 1])}), where pair {i + 1} starts at one and ends at the next; {damaged}")
    if o[-1] != tokens:
        raise InputError(f"{idx}: the {side} offsets end at {int(o[-1])}, not at the side's {tokens} ids; {damaged}")


def _check_ids(path: Path, dtype: str, o: np.ndarray, size: int, vocab: str) -> None:
    """Every id of one side below its shortlist's `size`; else an InputError naming the file, the position and the
    pair of the first id that is not. The file is read in blocks, not through the training's memory map: its pages
    stay out of the process's resident memory (4M pairs: 0.4 GB of ids)."""
    start = 0
    with open(path, "rb") as f:
        while (block := np.fromfile(f, dtype=dtype, count=1 << 24)).size:
            if int(block.max()) >= size:
                pos = start + int(np.argmax(block >= size))
                pair = int(np.searchsorted(o, pos, side="right"))  # o[pair - 1] <= pos < o[pair]
                raise InputError(f"{path}: id {int(block[pos - start])} at position {pos} (pair {pair}) is not "
                                 f"below the {size} words of the shortlist {vocab}; the file is damaged: rerun the "
                                 "binarize stage")
            start += block.size


def training_pairs(train: tuple[str, str], vocabs: tuple[Vocab, Vocab], vocab_paths: tuple[str, str],
                   binarized: str | None) -> TokenPairs:
    """The training set: the binarize stage's files at `binarized`, memory-mapped (checked against the text and
    the shortlists), or without them the text, read and encoded in memory."""
    if binarized:
        return load(binarized, train, vocab_paths)
    src, tgt = read_parallel(*train)
    return TokenPairs.from_lists([vocabs[0].encode(s.split()) for s in src], [vocabs[1].encode(t.split()) for t in tgt])
