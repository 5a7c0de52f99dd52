"""Stage 2: Moses punctuation normalisation and tokenization (sacremoses, no lowercasing), streamed line by line
(a shard of WMT'14 never sits in memory) and written through a temporary name; detokenization for sacreBLEU.

Punctuation normalisation (`tokenize.normalize_punctuation`, as the WMT baselines ran Moses'
normalize-punctuation.perl before tokenizer.perl) maps typographic punctuation to the ASCII forms the tokenizer
and detokenizer know: ’ ‘ ´ → ', « » “ ” „ → ", – → -, — → " - ", … → ..., and tidies spaces around brackets,
before `:`/`;`/`%` and no-break spaces. Without it, `l’annexe` is tokenized `l ’ annexe` and detokenized with two
stray spaces. Text that comes Moses-tokenized already (the LIUM bitexts) is normalised token by token, so its
tokenization stays as it is.
"""

from __future__ import annotations

import html
import re
import sys
from typing import Callable

from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer

from rnnsearch.textio import atomic_path, iter_lines, normalise, write_json_atomic

_MOSES_ESCAPES = re.compile(r"&(amp|lt|gt|quot|apos|#124|#91|#93);")
# A French elided word before a number (`d'1`): Moses tokenizes it `d ' 1` and detokenizes that as `d '1`.
_FR_ELISION = re.compile(r"\b(c|d|j|l|m|n|s|t|qu|jusqu|lorsqu|puisqu|quoiqu|presqu) '(?=\d)", re.IGNORECASE)


def punctuation_normaliser(lang: str, on: bool = True) -> Callable[[str], str]:
    """Moses' normalize-punctuation for `lang` (sacremoses' port), or the identity when `on` is false."""
    return MosesPunctNormalizer(lang=lang).normalize if on else (lambda line: line)


def tokenize_lines(lines: list[str], lang: str, aggressive_dash: bool = False,
                   normalize_punctuation: bool = True) -> list[str]:
    """Moses tokenization as the paper did it (§4.1), after punctuation normalisation; `escape=False` keeps '&' and
    apostrophes readable."""
    tok, norm = MosesTokenizer(lang=lang), punctuation_normaliser(lang, normalize_punctuation)
    return [tok.tokenize(norm(line), aggressive_dash_splits=aggressive_dash, escape=False, return_str=True)
            for line in lines]


def unescape_pretokenized(line: str) -> str:
    """Text that Moses already tokenized (the LIUM bitexts): undo its XML escapes (&apos; &quot; &amp; &#124; …),
    so the words match what `tokenize_lines` writes, and normalise the spaces."""
    return " ".join(_MOSES_ESCAPES.sub(lambda m: html.unescape(m.group(0)), line).split())


def normalise_tokens(tokenized: str, norm: Callable[[str], str]) -> str:
    """Punctuation normalisation of tokenized text, token by token, so that its tokenization stays as it is (a
    token may become two, `a—b` → `a - b`, or vanish, never merge with its neighbour)."""
    return " ".join(t for token in tokenized.split()
                    for t in (norm(token).split() if _may_normalise(token) else (token,)))


def _may_normalise(token: str) -> bool:
    """Whether punctuation normalisation can change a token on its own: it only rewrites non-ASCII characters,
    backquotes and quotes (a fast path for the many plain ASCII tokens)."""
    return not token.isascii() or "`" in token or "'" in token or '"' in token


def detokenize_lines(lines: list[str], lang: str) -> list[str]:
    """Moses detokenization (what sacreBLEU scores); in French an elided word before a number is joined to its
    apostrophe, where the detokenizer leaves a space (`d '1 cent` → `d'1 cent`)."""
    detok = MosesDetokenizer(lang=lang)
    out = [detok.detokenize(line.split()) for line in lines]
    return [_FR_ELISION.sub(r"\1'", line) for line in out] if lang == "fr" else out


def run_tokenize(input: str, output: str, lang: str, aggressive_dash: bool, pretokenized: bool = False,
                 unicode: str = "NFC", normalize_punctuation: bool = True, stats: str | None = None) -> int:
    """Stage 2: normalise the punctuation of one file and tokenize it (or, `pretokenized`, unescape it and
    normalise token by token), streaming; a leading byte-order mark is dropped and the text normalised to
    `unicode` (an extra test set comes here straight from the user's files). `stats`: a JSON of the lines and of
    the lines whose punctuation was normalised (for the data report). Returns the number of lines."""
    tok = MosesTokenizer(lang=lang)
    norm = punctuation_normaliser(lang) if normalize_punctuation else None  # None: nothing to count either
    n = changed = 0
    with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f, _progress(input) as bar:
        for n, line in enumerate(_text_lines(input, unicode), 1):
            if pretokenized:
                plain = unescape_pretokenized(line)
                text = normalise_tokens(plain, norm) if norm else plain
                changed += text != plain
            else:
                text = norm(line) if norm else line
                changed += text.split() != line.split()  # changes of spacing alone are the tokenizer's anyway
                text = tok.tokenize(text, aggressive_dash_splits=aggressive_dash, escape=False, return_str=True)
            f.write(text + "\n")
            bar.update(1)
    if stats:
        write_json_atomic(stats, {"lines": n, "normalize_punctuation": normalize_punctuation,
                                  "punctuation_normalised": changed})
    return n


def _text_lines(path: str, unicode: str = "NFC"):
    return (normalise(text, unicode) for text in iter_lines(path))


def _progress(path: str):
    """A line progress bar on a terminal (off in logs and under Snakemake's redirection)."""
    from tqdm import tqdm

    return tqdm(desc=str(path), unit=" lines", disable=None, leave=False, file=sys.stderr, mininterval=5)
