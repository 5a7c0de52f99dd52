"""Preparing the training text at scale: shard (scatter), clean, gather; and the ≤30 / ≤50 training sets.

The raw training pairs are cut into `prepare.shards` contiguous shards of equal line counts, so that a cluster
tokenizes them in parallel (one Snakemake job per shard and language); each tokenized shard pair is cleaned, and
the clean shards are concatenated back in order. Every step streams its files and writes through a temporary name.

Cleaning drops, and counts, the pairs that

* have an empty side,
* have a side longer than `prepare.max_len` tokens (0: no limit),
* have a length ratio (longer side / shorter side, in tokens) above `prepare.max_ratio` (0: no limit),

the rules of Moses' clean-corpus-n.perl, which the WMT systems of the paper's time ran before training.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from rnnsearch.data.corpus.local import iter_pairs
from rnnsearch.textio import InputError, atomic_path, count_lines, write_json_atomic


def shard_bounds(n_lines: int, n_shards: int) -> list[tuple[int, int]]:
    """[start, end) line ranges of `n_shards` contiguous shards whose sizes differ by at most one line."""
    base, extra = divmod(n_lines, n_shards)
    bounds, start = [], 0
    for i in range(n_shards):
        end = start + base + (i < extra)
        bounds.append((start, end))
        start = end
    return bounds


def run_shard(src: str, tgt: str, out_src: list[str], out_tgt: list[str]) -> dict:
    """Cut a line-aligned pair of files into len(out_src) shards (the scatter step)."""
    if len(out_src) != len(out_tgt) or not out_src:
        raise InputError(f"shard: give as many --out-src as --out-tgt files (got {len(out_src)} and {len(out_tgt)})")
    n = count_lines(src)
    bounds = shard_bounds(n, len(out_src))
    with contextlib.ExitStack() as stack:
        handles = []
        for paths in (out_src, out_tgt):
            handles.append([stack.enter_context(open(stack.enter_context(atomic_path(p)), "wb")) for p in paths])
        shard = 0
        for i, x, y in iter_pairs(src, tgt):  # checks that the two files align
            while i > bounds[shard][1]:
                shard += 1
            handles[0][shard].write(x + b"\n")
            handles[1][shard].write(y + b"\n")
    return {"lines": n, "shards": [e - s for s, e in bounds]}


def clean_reason(n_src: int, n_tgt: int, max_len: int, max_ratio: float) -> str | None:
    """Why a pair of n_src and n_tgt tokens is dropped ("empty", "long", "ratio"), or None if it is kept."""
    if not n_src or not n_tgt:
        return "empty"
    if max_len and max(n_src, n_tgt) > max_len:
        return "long"
    if max_ratio and max(n_src, n_tgt) / min(n_src, n_tgt) > max_ratio:
        return "ratio"
    return None


def run_clean(src: str, tgt: str, out_src: str, out_tgt: str, max_len: int, max_ratio: float,
              stats: str | None = None) -> dict:
    """Clean one tokenized shard pair by the rules above; the counts go to the JSON file `stats`."""
    counts = {"pairs_in": 0, "pairs": 0, "dropped_empty": 0, "dropped_long": 0, "dropped_ratio": 0,
              "src_words": 0, "tgt_words": 0, "max_len": max_len, "max_ratio": max_ratio}
    with atomic_path(out_src) as ts, atomic_path(out_tgt) as tt, \
            open(ts, "w", encoding="utf-8", newline="\n") as fs, open(tt, "w", encoding="utf-8", newline="\n") as ft:
        for i, x, y in iter_pairs(src, tgt):
            counts["pairs_in"] = i
            a, b = x.decode("utf-8"), y.decode("utf-8")
            na, nb = len(a.split()), len(b.split())
            reason = clean_reason(na, nb, max_len, max_ratio)
            if reason:
                counts[f"dropped_{reason}"] += 1
            else:
                fs.write(a + "\n")
                ft.write(b + "\n")
                counts["pairs"] += 1
                counts["src_words"] += na
                counts["tgt_words"] += nb
    if stats:
        write_json_atomic(stats, counts)
    return counts


def run_filter(src: str, tgt: str, out_src: str, out_tgt: str, max_len: int, stats: str | None = None) -> dict:
    """Stage 3: keep the pairs whose both sides have 1..max_len tokens (the paper's RNN*-30 / RNN*-50 sets)."""
    kept = run_clean(src, tgt, out_src, out_tgt, max_len, 0)
    counts = {"max_len": max_len, "pairs_in": kept["pairs_in"], "pairs_kept": kept["pairs"],
              "src_words": kept["src_words"], "tgt_words": kept["tgt_words"]}
    if stats:
        write_json_atomic(stats, counts)
    return counts


def run_gather(inputs: list[str], output: str) -> int:
    """Concatenate the shards in the order given (the gather step). Returns the number of bytes written."""
    with atomic_path(output) as tmp, open(tmp, "wb") as out:
        for path in inputs:
            if not Path(path).exists():
                raise InputError(f"{path}: file not found")
            with open(path, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
        return out.tell()
