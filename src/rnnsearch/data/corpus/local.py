"""`data.source: local`: a user's own sentence-aligned raw text, any language pair.

Each split is a prefix: `train: data/europarl` reads `data/europarl.<src>` and `data/europarl.<tgt>`, line i
of one translating line i of the other. Read by rule, never silently shifted:

* different line counts: an error naming both files and their counts;
* invalid UTF-8: an error naming the file and line (`data.source: wmt14` drops such pairs and counts them instead);
* a leading byte-order mark: dropped; Unicode normalised to `data.unicode` (NFC by default: "é" written as "e" and
  a combining accent becomes one code point, as the tokenizer and the vocabulary expect), the lines it changed
  counted;
* a pair with an empty side (after trimming): dropped and counted;
* control characters (other than tab): replaced by a space, counted;
* a missing final newline is fine; `.gz` files are read as they are.

The files are streamed (a 40-million-pair corpus is never held in memory). Writes `{split}.{src}` and
`{split}.{tgt}` (raw text, one sentence per line) and `corpus.json` with the counts; nothing is renamed into place
unless every split was read without error.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import logging
import re
from pathlib import Path
from typing import IO, Iterable, Iterator

from rnnsearch.data.corpus.source import Source, section
from rnnsearch.textio import BOM, InputError, atomic_path, normalise, write_json_atomic

log = logging.getLogger("rnnsearch.corpus")

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u0085\u2028\u2029]")
SPLITS = ("train", "dev", "test")


def open_bytes(path: Path) -> IO[bytes]:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: file not found")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_pairs(src_path: Path, tgt_path: Path) -> Iterator[tuple[int, bytes, bytes]]:
    """(line number, source line, target line) as bytes without the newline; different line counts are an
    InputError naming both files and both counts."""
    with open_bytes(src_path) as a, open_bytes(tgt_path) as b:
        for i, (x, y) in enumerate(itertools.zip_longest(a, b), 1):
            if x is None or y is None:
                rest = 1 + sum(1 for _ in (b if x is None else a))
                n_src, n_tgt = (i - 1, i - 1 + rest) if x is None else (i - 1 + rest, i - 1)
                raise InputError(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}: they must be "
                                 f"line-aligned")
            yield i, x.rstrip(b"\n").rstrip(b"\r"), y.rstrip(b"\n").rstrip(b"\r")


def clean_pairs(src_path: Path, tgt_path: Path, out_src: IO[str], out_tgt: IO[str], invalid_utf8: str = "error",
                unicode: str = "NFC", squeeze: bool = True) -> dict:
    """Stream the pairs of two aligned files through the rules above into `out_src`/`out_tgt`; returns the counts.
    `invalid_utf8`: "error" (name the file and line) or "drop" (drop the pair, count it)."""
    return clean_stream(iter_pairs(src_path, tgt_path), src_path, tgt_path, out_src, out_tgt, invalid_utf8, unicode,
                        squeeze)


def _decode(pair: tuple[bytes, bytes], names: tuple, i: int, invalid_utf8: str) -> tuple[str, str] | None:
    """Both sides as text; None (drop the pair) or an InputError naming the side's file and line if one is not
    UTF-8."""
    texts = []
    for data, name in zip(pair, names):
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError as e:
            if invalid_utf8 == "drop":
                return None
            raise InputError(f"{name}:{i}: invalid UTF-8 at byte {e.start} of the line") from None
    return texts[0], texts[1]


def clean_stream(pairs: Iterable[tuple[int, bytes, bytes]], src_name, tgt_name, out_src: IO[str], out_tgt: IO[str],
                 invalid_utf8: str = "error", unicode: str = "NFC", squeeze: bool = True) -> dict:
    """`clean_pairs` over (line number, source bytes, target bytes) from anywhere (files, SGM segments).
    `squeeze`: runs of spaces and tabs become one space (False keeps a test set's text as released)."""
    counts = dict(lines=0, pairs=0, dropped_empty=0, dropped_invalid_utf8=0, control_characters_replaced=0,
                  unicode_normalised=0, src_words=0, tgt_words=0)
    for i, x, y in pairs:
        counts["lines"] = i
        texts = _decode((x, y), (src_name, tgt_name), i, invalid_utf8)
        if texts is None:
            counts["dropped_invalid_utf8"] += 1
            continue
        s, t = (text.removeprefix(BOM) for text in texts) if i == 1 else texts
        s2, t2 = normalise(s, unicode), normalise(t, unicode)
        counts["unicode_normalised"] += (s2 != s) + (t2 != t)
        s3, t3 = _CONTROL.sub(" ", s2), _CONTROL.sub(" ", t2)
        counts["control_characters_replaced"] += (s3 != s2) + (t3 != t2)
        s3, t3 = (" ".join(s3.split()), " ".join(t3.split())) if squeeze else (s3.strip(), t3.strip())
        if not s3 or not t3:
            counts["dropped_empty"] += 1
            continue
        out_src.write(s3 + "\n")
        out_tgt.write(t3 + "\n")
        counts["pairs"] += 1
        counts["src_words"] += len(s3.split())
        counts["tgt_words"] += len(t3.split())
    if not counts["pairs"]:
        raise InputError(f"{src_name} and {tgt_name}: no sentence pair left (every pair has an empty side or "
                         "invalid UTF-8)")
    return counts


@contextlib.contextmanager
def split_writers(out_dir: Path, split: str, src: str, tgt: str, stack: contextlib.ExitStack):
    """Text handles on temporary files that become `{split}.{src}`/`{split}.{tgt}` when `stack` closes cleanly."""
    handles = []
    for lang in (src, tgt):
        tmp = stack.enter_context(atomic_path(Path(out_dir) / f"{split}.{lang}"))
        handles.append(stack.enter_context(open(tmp, "w", encoding="utf-8", newline="\n")))
    yield handles


def run_local_corpus(local: dict, src: str, tgt: str, out_dir: str, unicode: str = "NFC") -> dict:
    """Check and copy every split into `out_dir` (nothing is renamed into place unless all are good); returns the
    counts per split."""
    out = Path(out_dir)
    paths = {split: (Path(f"{local[split]}.{src}"), Path(f"{local[split]}.{tgt}")) for split in SPLITS}
    for split, pair in paths.items():
        for p in pair:
            if not p.exists():
                raise InputError(f"'data.local.{split}': {p} not found (a split is a prefix: <prefix>.{src}, <prefix>.{tgt})")
    stats = {}
    with contextlib.ExitStack() as stack:
        for split, (src_path, tgt_path) in paths.items():
            with split_writers(out, split, src, tgt, stack) as (fs, ft):
                stats[split] = clean_pairs(src_path, tgt_path, fs, ft, unicode=unicode, squeeze=split != "test")
            stats[split].update(source=str(src_path), target=str(tgt_path))
            log.info("%s: %d pairs from %s (%d dropped with an empty side, %d control characters replaced, %d lines "
                     "normalised to %s)", split, stats[split]["pairs"], local[split], stats[split]["dropped_empty"],
                     stats[split]["control_characters_replaced"], stats[split]["unicode_normalised"], unicode)
        write_json_atomic(out / "corpus.json", stats)
    return stats


def corpus(data: dict, seed: int, fetched: str | None, out_dir: str) -> dict:
    """Stage 1 for `data.source: local`: the user's files of `data.local`."""
    return run_local_corpus(data["local"], data["src"], data["tgt"], out_dir, data["unicode"])


SOURCE = Source("local", corpus, section(
    "data.source: local: each split a path prefix, <prefix>.<src> and <prefix>.<tgt>, raw text",
    **{split: {"type": "string", "minLength": 1} for split in SPLITS}),
    inputs=lambda data: [f"{data['local'][s]}.{lang}" for s in SPLITS for lang in (data["src"], data["tgt"])])
