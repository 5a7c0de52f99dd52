"""WMT SGM test sets (newstest2012/2013/2014 `*-src.*.sgm`, `*-ref.*.sgm`): the `<seg>` texts in file order.

Robust to the quirks of the real releases: upper-case tags, attributes in any order, wrappers such as `<h1>` and
`<p>` around segments, documents whose segment ids do not start at 1, a `<seg>` split over several lines (its
line breaks become spaces), and the five XML entities and numeric character references (other `&` text, e.g.
"AT&T", is left as it is, as the releases write it). Leading and trailing spaces of a segment are dropped;
spaces inside are kept. An opening `<seg` without its closing tag is an error naming the file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

from rnnsearch.textio import InputError

# a segment's text never holds another opening <seg: an unclosed one is left unmatched (and reported at its line)
_SEG = re.compile(r"<seg\b[^>]*>((?:(?!<seg\b).)*?)</seg\s*>", re.IGNORECASE | re.DOTALL)
_OPEN = re.compile(r"<seg\b", re.IGNORECASE)
_ENTITY = re.compile(r"&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def _unescape(text: str) -> str:
    def one(m: re.Match) -> str:
        name = m.group(1)
        if name in _NAMED:
            return _NAMED[name]
        return chr(int(name[2:], 16) if name[1] in "xX" else int(name[1:]))

    return _ENTITY.sub(one, text)


def read_sgm(path: str | Path) -> list[str]:
    """The segments of an SGM file, in file order."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: invalid UTF-8") from None
    segments, matched = [], set()
    for m in _SEG.finditer(text):
        matched.add(m.start())
        segments.append(_unescape(re.sub(r"\s*\n\s*", " ", m.group(1)).strip()))
    for m in _OPEN.finditer(text):
        if m.start() not in matched:
            raise InputError(f"{path}:{text.count(chr(10), 0, m.start()) + 1}: <seg> without its closing </seg>")
    if not segments:
        raise InputError(f"{path}: no <seg> segments (not an SGM test set?)")
    return segments
