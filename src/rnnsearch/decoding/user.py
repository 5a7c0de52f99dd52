"""`rnnsearch translate --checkpoint M [--input F] [--output F]`: a user's own raw sentences, one per line.

Input as users have it: a leading byte-order mark is dropped, CRLF line ends are read as LF, and every line is
normalised to NFC (accents composed, as in the training text), and its punctuation as the tokenize stage's
(`--no-normalize-punctuation` for a model trained with tokenize.normalize_punctuation off), before Moses
tokenization. Output is NFC UTF-8
with `\\n`, one line per input line, in input order:
- an empty (or blank) input line gives an empty output line;
- a line of more than `max_src_len` tokens is split into pieces at sentence punctuation (. ! ? ; :), or at
  `max_src_len` tokens where there is none, translated piece by piece and joined;
- lines are read and decoded `CHUNK` at a time and each chunk's translations are written as soon as it is done,
  so memory does not grow with the input and a stopped run keeps what it finished (on stdout; `--output` is
  written atomically at the end).
At the end, stderr names the lines that were split, the lines whose translation was cut at the output limit
(a × source length + b) and the lines with no word of the source vocabulary.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from rnnsearch.data.vocab import EOS_ID, UNK_ID, Vocab
from rnnsearch.textio import BOM, InputError, atomic_path, normalise

log = logging.getLogger("rnnsearch.translate")

CHUNK = 64  # input lines decoded together (length-sorted inside), then written
SENTENCE_END = frozenset(".!?;:")


@dataclass(frozen=True)
class UserOptions:
    beam: int = 12
    max_len_a: float = 1.5
    max_len_b: int = 10
    length_norm: bool = True
    n_best: int = 1
    max_src_len: int = 150
    src_lang: str = "en"
    tgt_lang: str = "fr"
    batch_size: int = 32
    normalize_punctuation: bool = True  # as the pipeline's tokenize stage (tokenize.normalize_punctuation)


@dataclass
class Notes:
    """Input line numbers worth telling the user about."""

    split: list[int] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)

    def report(self, lines: int, opts: UserOptions) -> None:
        for found, what in ((self.split, f"longer than --max-src-len {opts.max_src_len} tokens: split at sentence "
                                         "punctuation and translated piece by piece"),
                            (self.cut, f"whose translation reached the output limit ({opts.max_len_a:g} × source "
                                       f"length + {opts.max_len_b} words) and may be cut short"),
                            (self.unknown, "without a single word of the model's source vocabulary")):
            if found:
                shown = ", ".join(map(str, found[:20])) + (", …" if len(found) > 20 else "")
                log.warning("%d of %d lines %s: line %s", len(found), lines, what, shown)


def read_user_lines(path: str) -> Iterator[str]:
    """The lines of `path` (or stdin for "-"), one at a time: BOM dropped, CR LF read as LF, NFC; invalid UTF-8
    is an InputError naming the line."""
    name = "<stdin>" if path == "-" else path
    if path != "-" and not Path(path).exists():
        raise InputError(f"{path}: file not found")
    stdin = getattr(sys.stdin, "buffer", None) or io.BytesIO(sys.stdin.read().encode())  # (a test's StringIO)
    with contextlib.nullcontext(stdin) if path == "-" else open(path, "rb") as stream:
        for i, raw in enumerate(stream, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{name}:{i}: invalid UTF-8 at byte {e.start} of the line") from None
            yield normalise(text.removeprefix(BOM) if i == 1 else text, "NFC").rstrip("\n").rstrip("\r")


def pieces(tokens: list[str], limit: int) -> list[list[str]]:
    """`tokens` in pieces of at most `limit`, each ending at the last sentence punctuation it holds (or at
    `limit` tokens where it holds none)."""
    out = []
    while len(tokens) > limit:
        cut = max((k + 1 for k, t in enumerate(tokens[:limit]) if t in SENTENCE_END), default=limit)
        out.append(tokens[:cut])
        tokens = tokens[cut:]
    return out + [tokens] if tokens else out


class UserTranslator:
    """A trained model and its vocabularies, translating chunks of raw lines."""

    def __init__(self, checkpoint: str, opts: UserOptions, src_vocab: str | None, tgt_vocab: str | None):
        from rnnsearch.checkpoint import (
            check_vocabs,
            load_checkpoint,
            model_of,
            vocabs_of,
        )

        state = load_checkpoint(checkpoint)  # read once: weights and vocabularies
        self.model, _ = model_of(state, checkpoint)
        self.sv, self.tv = vocabs_of(state, checkpoint) if "vocab" in state or not (src_vocab and tgt_vocab) else (
            Vocab.load(src_vocab), Vocab.load(tgt_vocab))
        if src_vocab or tgt_vocab:  # given files must be the ones the model was trained with
            given = {side: (f, Vocab.load(f)) for side, f in (("src", src_vocab), ("tgt", tgt_vocab)) if f}
            check_vocabs(state, checkpoint, **given)
        self.opts, self.notes = opts, Notes()

    def translate(self, lines: list[str], first: int) -> list[list[tuple]]:
        """Per line (numbered from `first`), its n-best translations, best first, each as (detokenized text,
        source units, output units, α or None, log-probability); an empty line gets [("", …)]."""
        from rnnsearch.data.text import detokenize_lines, tokenize_lines
        from rnnsearch.decoding.search import translate_nbest

        o, sv = self.opts, self.sv
        tokens = [t.split() for t in tokenize_lines(lines, o.src_lang, normalize_punctuation=o.normalize_punctuation)]
        parts = [pieces(t, o.max_src_len) for t in tokens]  # (line, piece) → tokens
        flat = [sv.encode(p) for ps in parts for p in ps]
        nbest = iter(translate_nbest(self.model, flat, beam=o.beam, batch_size=o.batch_size, max_len_a=o.max_len_a,
                                     max_len_b=o.max_len_b, length_norm=o.length_norm, n_best=o.n_best))
        out = []
        for k, ps in enumerate(parts):
            line_no, found = first + k, [next(nbest) for _ in ps]
            if not ps:
                out.append([("", [], [], None, 0.0)])
                continue
            self._note(line_no, ps, found)
            rows = []
            for r in range(min(len(h) for h in found)):  # the r-th best of every piece, joined
                hyps = [h[r] for h in found]
                words = [w for h in hyps for w in self.tv.decode(h.tokens)]
                text = detokenize_lines([" ".join(words)], o.tgt_lang)[0]
                single = len(ps) == 1
                rows.append((normalise(text), sv.units(ps[0]) + ["</s>"] if single else [],
                             self.tv.decode(hyps[0].tokens, units=True) + ["</s>"] if single else [],
                             hyps[0].alpha if single else None, sum(h.score for h in hyps)))
            out.append(rows)
        return out

    def _note(self, line_no: int, ps: list[list[str]], found: list) -> None:
        if len(ps) > 1:
            self.notes.split.append(line_no)
        o = self.opts  # the search ends every output at a × source length (</s> included) + b words at most
        limits = [int(len(self.sv.encode(p)) * o.max_len_a) + o.max_len_b for p in ps]
        if any(len(h[0].tokens) >= limit for h, limit in zip(found, limits)):
            self.notes.cut.append(line_no)
        if all(i in (UNK_ID, EOS_ID) for p in ps for i in self.sv.encode(p)):
            self.notes.unknown.append(line_no)


def translate_user(checkpoint: str, input: str, output: str | None, opts: UserOptions, src_vocab: str | None,
                   tgt_vocab: str | None, alignment: bool, heatmap_dir: str | None) -> None:
    """Translations on stdout (or in `output`), one per input line, in order; with `alignment` each α as text
    on stderr, with `heatmap_dir` as PNGs."""
    if opts.n_best > opts.beam:
        raise InputError(f"--n-best {opts.n_best} needs --beam of at least {opts.n_best} (got {opts.beam})")
    translator = UserTranslator(checkpoint, opts, src_vocab, tgt_vocab)
    lines = read_user_lines(input)
    with atomic_path(output) if output else _stdout() as target, \
            (open(target, "w", encoding="utf-8", newline="\n") if output else _stdout_text()) as sink:
        n = 0
        while chunk := [line for _, line in zip(range(CHUNK), lines)]:
            for k, nbest in enumerate(translator.translate(chunk, n + 1)):
                _emit(sink, n + k + 1, nbest, opts, checkpoint, alignment, heatmap_dir)
            sink.flush()
            n += len(chunk)
    translator.notes.report(n, opts)


def _emit(sink, i: int, nbest: list[tuple], opts: UserOptions, checkpoint: str, alignment: bool,
          heatmap_dir: str | None) -> None:
    if opts.n_best > 1:
        for text, _, out, _, score in nbest:
            sink.write(f"{i - 1} ||| {text} ||| {score:.4f} ||| {score / (len(out) - 1 or 1):.4f}\n")
    else:
        sink.write(nbest[0][0] + "\n")
    text, src, out, alpha, _ = nbest[0]
    if (alignment or heatmap_dir) and alpha is None and src:
        raise InputError(f"{checkpoint}: this model has no alignment model (RNNencdec): no alignments")
    if alpha is None:  # an empty line, or one translated in pieces: no single alignment to show
        return
    if alignment:
        from rnnsearch.decoding.translate import alignment_text

        print(f"[{i}]\n{alignment_text(alpha, src, out)}", file=sys.stderr)
    if heatmap_dir:
        from rnnsearch.evaluation.plots import alignment_figure

        alignment_figure(alpha.numpy(), src, out, f"sentence {i}", Path(heatmap_dir) / f"alignment_{i}.png")


class _stdout:
    """Context managers standing in for atomic_path/open when the translations go to stdout."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class _stdout_text(_stdout):
    def __enter__(self):
        return sys.stdout
