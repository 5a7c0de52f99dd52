"""Stage 2: Moses tokenization (sacremoses, no lowercasing), streamed line by line (a shard of WMT'14 never sits
in memory) and written through a temporary name; detokenization for sacreBLEU."""

from __future__ import annotations

import html
import re
import sys

from sacremoses import MosesDetokenizer, MosesTokenizer

from rnnsearch.textio import BOM, InputError, atomic_path, normalise

_MOSES_ESCAPES = re.compile(r"&(amp|lt|gt|quot|apos|#124|#91|#93);")


def tokenize_lines(lines: list[str], lang: str, aggressive_dash: bool = False) -> list[str]:
    """Moses tokenization as the paper did it (§4.1); `escape=False` keeps '&' and apostrophes readable."""
    tok = MosesTokenizer(lang=lang)
    return [tok.tokenize(line, aggressive_dash_splits=aggressive_dash, escape=False, return_str=True)
            for line in lines]


def unescape_pretokenized(line: str) -> str:
    """Text that Moses already tokenized (the LIUM bitexts): undo its XML escapes (&apos; &quot; &amp; &#124; …),
    so the words match what `tokenize_lines` writes, and normalise the spaces."""
    return " ".join(_MOSES_ESCAPES.sub(lambda m: html.unescape(m.group(0)), line).split())


def detokenize_lines(lines: list[str], lang: str) -> list[str]:
    detok = MosesDetokenizer(lang=lang)
    return [detok.detokenize(line.split()) for line in lines]


def run_tokenize(inp: str, out: str, lang: str, aggressive_dash: bool, pretokenized: bool = False,
                 unicode: str = "NFC") -> int:
    """Stage 2: tokenize one file (or, `pretokenized`, only unescape it), streaming; a leading byte-order mark is
    dropped and the text normalised to `unicode` (an extra test set comes here straight from the user's files).
    Returns the number of lines."""
    tok = MosesTokenizer(lang=lang)
    n = 0
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f, _progress(inp) as bar:
        for n, line in enumerate(_text_lines(inp, unicode), 1):
            f.write((unescape_pretokenized(line) if pretokenized else
                     tok.tokenize(line, aggressive_dash_splits=aggressive_dash, escape=False, return_str=True)) + "\n")
            bar.update(1)
    return n


def _text_lines(path: str, unicode: str = "NFC"):
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            try:
                text = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8")
                yield normalise(text.removeprefix(BOM) if i == 1 else text, unicode)
            except UnicodeDecodeError as e:
                raise InputError(f"{path}:{i}: invalid UTF-8 at byte {e.start} of the line") from None


def _progress(path: str):
    """A line progress bar on a terminal (off in logs and under Snakemake's redirection)."""
    from tqdm import tqdm

    return tqdm(desc=str(path), unit=" lines", disable=None, leave=False, file=sys.stderr, mininterval=5)
