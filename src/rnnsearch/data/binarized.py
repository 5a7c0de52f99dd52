"""Stage 4b: a training set as token ids on disk, memory-mapped by every training process.

The layout of fairseq's `MMapIndexedDataset`, for sentence pairs. For a prefix such as `results/data/bin/train50`:

* `train50.src.bin`, `train50.tgt.bin`: every sentence's ids (`Vocab.encode`: </s> included), one after the
  other, in the smallest unsigned type that holds the shortlist (uint16 below 65,536 words);
* `train50.idx`: a .npy of int64 offsets, shape (2, N + 1): sentence i of side s is `ids[s][o[s, i]:o[s, i + 1]]`;
* `train50.json`: the header, written last: the format, pair count, dtype, each file's size, and for each side the
  sha256 of its shortlist and of its text (with the text's size and mtime), and the stage's time.

Training maps the arrays (`numpy.memmap`): before the first update it reads the header and the shortlists; a
minibatch reads its own sentences' ids; processes on one machine share the pages. A header whose shortlist or
text differs from the files training is given stops training, naming both files.
"""

from __future__ import annotations

import hashlib
import os
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from rnnsearch.data.vocab import Vocab, spm_path
from rnnsearch.textio import BOM, InputError, atomic_path, read_json, read_parallel, write_json_atomic

FORMAT = "rnnsearch-binarized-pairs/1"
SIDES = ("src", "tgt")
_TYPECODES = {"uint8": "B", "uint16": "H", "uint32": "I"}  # array typecodes of numpy's unsigned types (Linux)


@dataclass
class TokenPairs:
    """Sentence pairs as flat id arrays (in memory or memory-mapped): pair i is
    (ids[0][offsets[0, i]:offsets[0, i + 1]], ids[1][offsets[1, i]:offsets[1, i + 1]])."""

    ids: tuple[np.ndarray, np.ndarray]  # (source ids, target ids), each flat
    offsets: np.ndarray  # (2, N + 1) int64

    def __len__(self) -> int:
        return self.offsets.shape[1] - 1

    def lengths(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Source and target lengths (</s> included) of the pairs `idx`, as two int64 arrays."""
        o = self.offsets
        return o[0, idx + 1] - o[0, idx], o[1, idx + 1] - o[1, idx]

    def pair(self, i: int) -> tuple[list[int], list[int]]:
        o = self.offsets
        return (self.ids[0][o[0, i]:o[0, i + 1]].tolist(), self.ids[1][o[1, i]:o[1, i + 1]].tolist())

    @classmethod
    def from_lists(cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]]) -> "TokenPairs":
        """In memory, from id lists (the text encoded by `Vocab.encode`)."""
        if len(src) != len(tgt):
            raise ValueError("source and target corpora differ in length")
        sides = [(np.fromiter((t for s in side for t in s), dtype=np.int64),
                  np.concatenate([[0], np.cumsum([len(s) for s in side], dtype=np.int64)])) for side in (src, tgt)]
        return cls((sides[0][0], sides[1][0]), np.stack([sides[0][1], sides[1][1]]))


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


def text_lines(path: Path, digest) -> Iterator[str]:
    """The lines of a UTF-8 text as `textio.read_lines` reads them (no BOM, no '\\r'), streamed, each line's bytes
    fed to `digest`."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            digest.update(raw)
            if lineno == 1:
                raw = raw.removeprefix(BOM.encode("utf-8"))
            try:
                yield raw.decode("utf-8").rstrip("\n").rstrip("\r")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}:{lineno}: invalid UTF-8 at byte {e.start} of the line") from None


def _write_side(text: Path, vocab: Vocab, out: Path, dtype: str) -> tuple[array, dict]:
    """Encodes `text` line by line into `out` (atomically); returns the offsets and the side's header."""
    digest, offsets, buf = hashlib.sha256(), array("q", [0]), array(_TYPECODES[dtype])
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        for line in text_lines(text, digest):
            ids = vocab.encode(line.split())
            buf.extend(ids)
            offsets.append(offsets[-1] + len(ids))
            if len(buf) >= 1 << 20:
                buf.tofile(f)
                del buf[:]
        buf.tofile(f)
    st = text.stat()
    return offsets, {"text": str(text), "text_sha256": digest.hexdigest(), "text_bytes": st.st_size,
                     "text_mtime_ns": st.st_mtime_ns, "tokens": offsets[-1], "bin_bytes": out.stat().st_size}


def run_binarize(src: str, tgt: str, src_vocab: str, tgt_vocab: str, out: str) -> dict:
    """The binarize stage: `src`/`tgt` (a tokenized training set) encoded with the shortlists into `out`.*."""
    start, files = time.perf_counter(), paths(out)
    vocabs = {"src": (Path(src_vocab), Vocab.load(src_vocab)), "tgt": (Path(tgt_vocab), Vocab.load(tgt_vocab))}
    dtype = id_dtype(max(len(v) for _, v in vocabs.values()))
    files["header"].parent.mkdir(parents=True, exist_ok=True)
    files["header"].unlink(missing_ok=True)  # no header beside half-written arrays
    header = {"format": FORMAT, "dtype": dtype}
    offsets = {}
    for side, text in zip(SIDES, (Path(src), Path(tgt))):
        offsets[side], header[side] = _write_side(text, vocabs[side][1], files[side], dtype)
        header[side].update(vocab=str(vocabs[side][0]), vocab_sha256=vocab_sha256(vocabs[side][0]),
                            vocab_size=len(vocabs[side][1]))
    pairs = [len(offsets[s]) - 1 for s in SIDES]
    if pairs[0] != pairs[1]:
        raise InputError(f"{src} has {pairs[0]} lines but {tgt} has {pairs[1]}: parallel files must align line by "
                         "line")
    with atomic_path(files["idx"]) as tmp, open(tmp, "wb") as f:
        np.save(f, np.stack([np.frombuffer(offsets[s], dtype=np.int64) for s in SIDES]))
    header.update(pairs=pairs[0], idx_bytes=files["idx"].stat().st_size,
                  seconds=round(time.perf_counter() - start, 3))
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
                                             and _sha256(text) != h["text_sha256"]):
            raise InputError(f"{where}: stale against {text} (made from a text of {h['text_bytes']} bytes, sha256 "
                             f"{h['text_sha256'][:12]}…, which it no longer is); rerun the binarize stage")
        if files[side].stat().st_size != h["bin_bytes"]:
            raise InputError(f"{files[side]}: {files[side].stat().st_size} bytes, {where} says {h['bin_bytes']}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load(prefix: str | Path, texts: tuple[str, str], vocabs: tuple[str, str]) -> TokenPairs:
    """The binarized set at `prefix`, memory-mapped, after checking it against the texts and shortlists."""
    files = paths(prefix)
    for f in files.values():
        if not f.exists():
            raise InputError(f"{f}: file not found (the binarize stage writes it)")
    header = read_json(files["header"])
    _check(header, files, texts, vocabs)
    offsets = np.load(files["idx"], mmap_mode="r")
    if offsets.shape != (2, header["pairs"] + 1):
        raise InputError(f"{files['idx']}: offsets of shape {offsets.shape}, {files['header']} says "
                         f"{header['pairs']} pairs")
    ids = tuple(np.memmap(files[s], dtype=header["dtype"], mode="r") if header[s]["tokens"] else
                np.zeros(0, header["dtype"]) for s in SIDES)
    return TokenPairs(ids, offsets)


def training_pairs(train: tuple[str, str], vocabs: tuple[Vocab, Vocab], vocab_paths: tuple[str, str],
                   binarized: str | None) -> TokenPairs:
    """The training set: the binarize stage's files at `binarized`, memory-mapped (checked against the text and
    the shortlists), or without them the text, read and encoded in memory."""
    if binarized:
        return load(binarized, train, vocab_paths)
    src, tgt = read_parallel(*train)
    return TokenPairs.from_lists([vocabs[0].encode(s.split()) for s in src], [vocabs[1].encode(t.split()) for t in tgt])
