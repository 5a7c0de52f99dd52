"""Stages 2 and 3: Moses tokenization (sacremoses, no lowercasing) and the ≤30 / ≤50 word training sets."""

from __future__ import annotations

from sacremoses import MosesDetokenizer, MosesTokenizer

from .textio import read_parallel, read_lines, write_json_atomic, write_lines_atomic


def tokenize_lines(lines: list[str], lang: str, aggressive_dash: bool = False) -> list[str]:
    """Moses tokenization as the paper did it (§4.1); `escape=False` keeps '&' and apostrophes readable."""
    tok = MosesTokenizer(lang=lang)
    return [tok.tokenize(line, aggressive_dash_splits=aggressive_dash, escape=False, return_str=True)
            for line in lines]


def detokenize_lines(lines: list[str], lang: str) -> list[str]:
    detok = MosesDetokenizer(lang=lang)
    return [detok.detokenize(line.split()) for line in lines]


def run_tokenize(inp: str, out: str, lang: str, aggressive_dash: bool) -> int:
    """Stage 2: tokenize one file. Returns the number of lines."""
    lines = tokenize_lines(read_lines(inp), lang, aggressive_dash)
    write_lines_atomic(out, lines)
    return len(lines)


def run_filter(src: str, tgt: str, out_src: str, out_tgt: str, max_len: int, stats_out: str | None = None) -> dict:
    """Stage 3: keep the pairs whose both sides have 1..max_len tokens (the paper's RNN*-30 / RNN*-50 sets)."""
    a, b = read_parallel(src, tgt)
    kept = [(x, y) for x, y in zip(a, b) if 0 < len(x.split()) <= max_len and 0 < len(y.split()) <= max_len]
    write_lines_atomic(out_src, [x for x, _ in kept])
    write_lines_atomic(out_tgt, [y for _, y in kept])
    stats = {"max_len": max_len, "pairs_in": len(a), "pairs_kept": len(kept),
             "src_words": sum(len(x.split()) for x, _ in kept), "tgt_words": sum(len(y.split()) for _, y in kept)}
    if stats_out:
        write_json_atomic(stats_out, stats)
    return stats
