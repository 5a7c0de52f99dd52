"""`data.source: local`: a user's own sentence-aligned raw text, any language pair.

Each split is a prefix: `train: data/europarl` reads `data/europarl.<src>` and `data/europarl.<tgt>`, line i
of one translating line i of the other. Read by rule, never silently shifted:

* different line counts, or invalid UTF-8: an error naming the file (and line);
* a pair with an empty side (after trimming): dropped and counted;
* control characters (other than tab): replaced by a space, counted;
* a missing final newline is fine.

Writes `{split}.{src}` and `{split}.{tgt}` (raw text, one sentence per line) and `corpus.json` with the counts.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from ..textio import InputError, read_lines, write_json_atomic, write_lines_atomic

log = logging.getLogger("rnnsearch.corpus")

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u0085\u2028\u2029]")
SPLITS = ("train", "dev", "test")


def clean_pairs(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str], dict]:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise InputError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: they must be line-aligned")
    out_src, out_tgt, empty, control = [], [], 0, 0
    for s, t in zip(src, tgt):
        s2, t2 = _CONTROL.sub(" ", s), _CONTROL.sub(" ", t)
        control += (s2 != s) + (t2 != t)
        s2, t2 = " ".join(s2.split()), " ".join(t2.split())  # runs of spaces and tabs → one space
        if not s2 or not t2:
            empty += 1
            continue
        out_src.append(s2)
        out_tgt.append(t2)
    if not out_src:
        raise InputError(f"{src_path} and {tgt_path}: no sentence pair left (every pair has an empty side)")
    return out_src, out_tgt, {"lines": len(src), "pairs": len(out_src), "dropped_empty": empty,
                              "control_characters_replaced": control}


def run_local_corpus(local: dict, src: str, tgt: str, out_dir: str) -> dict:
    """Check every split, then copy them into `out_dir` (nothing is written unless all are good); returns the
    counts per split."""
    out = Path(out_dir)
    paths = {split: (Path(f"{local[split]}.{src}"), Path(f"{local[split]}.{tgt}")) for split in SPLITS}
    for split, pair in paths.items():
        for p in pair:
            if not p.exists():
                raise InputError(f"'data.local.{split}': {p} not found (a split is a prefix: <prefix>.{src}, <prefix>.{tgt})")
    cleaned, stats = {}, {}
    for split, (src_path, tgt_path) in paths.items():
        *cleaned[split], stats[split] = clean_pairs(src_path, tgt_path)
        stats[split].update(source=str(src_path), target=str(tgt_path))
        log.info("%s: %d pairs from %s (%d dropped with an empty side, %d control characters replaced)", split,
                 stats[split]["pairs"], local[split], stats[split]["dropped_empty"],
                 stats[split]["control_characters_replaced"])
    for split, (s, t) in cleaned.items():
        write_lines_atomic(out / f"{split}.{src}", s)
        write_lines_atomic(out / f"{split}.{tgt}", t)
    write_json_atomic(out / "corpus.json", stats)
    return stats
