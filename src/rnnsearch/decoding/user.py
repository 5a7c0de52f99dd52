"""`rnnsearch translate --checkpoint M [--input F] [--output F]`: a user's own raw sentences, one per line.

Input as users have it: a leading byte-order mark is dropped, CRLF line ends are read as LF, and every line is
prepared as the training text was, by the settings the checkpoint records (data.src, data.tgt, data.unicode,
tokenize.normalize_punctuation; NFC, en→fr and normalised punctuation for a checkpoint without them), before
Moses tokenization. Output is NFC UTF-8 with `\\n`, one line per input line, in input order:
- an empty (or blank) input line gives an empty output line;
- a line of more than `max_src_len` tokens is split into pieces at sentence punctuation (. ! ? ; :), or at
  `max_src_len` tokens where there is none, translated piece by piece and joined (its n-best score is the sum
  over the pieces; its alignment, one per piece);
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
from dataclasses import dataclass, field, replace
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
    length_penalty: float = 0.0  # GNMT's α and β (rnnsearch.decoding.search): either replaces length_norm
    coverage_penalty: float = 0.0
    n_best: int = 1
    max_src_len: int = 150
    src_lang: str | None = None  # None: the checkpoint's data.src (en for a checkpoint without it)
    tgt_lang: str | None = None
    batch_size: int = 32
    normalize_punctuation: bool | None = None  # None: the checkpoint's tokenize.normalize_punctuation
    unicode: str = "NFC"  # the checkpoint's data.unicode

    def of_checkpoint(self, text: dict) -> "UserOptions":
        """These options with what they leave open taken from the training text's settings (`text`, the
        checkpoint's config["text"]; empty for a checkpoint written before it was recorded)."""
        return replace(self, src_lang=self.src_lang or text.get("src_lang", "en"),
                       tgt_lang=self.tgt_lang or text.get("tgt_lang", "fr"), unicode=text.get("unicode", "NFC"),
                       normalize_punctuation=text.get("normalize_punctuation", True)
                       if self.normalize_punctuation is None else self.normalize_punctuation)


@dataclass(frozen=True)
class Row:
    """One of a line's n-best translations: its text, each piece's (source units, output units, α or None), the
    summed log-probability and the number of output tokens (</s> of every piece included)."""

    text: str
    pieces: list[tuple[list[str], list[str], object]]
    score: float
    length: int

    @property
    def per_word(self) -> float:
        """Log-probability per output token: what length-normalised beam search ranks by (0 for an empty line)."""
        return self.score / self.length if self.length else 0.0


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


def read_user_lines(path: str, form: str = "NFC") -> Iterator[str]:
    """The lines of `path` (or stdin for "-"), one at a time: BOM dropped, CR LF read as LF, in Unicode form
    `form` (data.unicode); invalid UTF-8 is an InputError naming the line."""
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
            yield normalise(text.removeprefix(BOM) if i == 1 else text, form).rstrip("\n").rstrip("\r")


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
        from rnnsearch.checkpoint import check_vocabs, load_checkpoint, model_of, vocabs_of

        state = load_checkpoint(checkpoint)  # read once: weights and vocabularies
        self.model, config = model_of(state, checkpoint)
        self.sv, self.tv = vocabs_of(state, checkpoint) if "vocab" in state or not (src_vocab and tgt_vocab) else (
            Vocab.load(src_vocab), Vocab.load(tgt_vocab))
        if src_vocab or tgt_vocab:  # given files must be the ones the model was trained with
            given = {side: (f, Vocab.load(f)) for side, f in (("src", src_vocab), ("tgt", tgt_vocab)) if f}
            check_vocabs(state, checkpoint, **given)
        self.opts, self.notes = opts.of_checkpoint(config.get("text", {})), Notes()

    def translate(self, lines: list[str], first: int) -> list[list[Row]]:
        """Per line (numbered from `first`), its n-best translations, best first; an empty line gets one empty
        Row."""
        from rnnsearch.data.text import tokenize_lines
        from rnnsearch.decoding.search import translate_nbest

        o, sv = self.opts, self.sv
        tokens = [t.split() for t in tokenize_lines(lines, o.src_lang, normalize_punctuation=o.normalize_punctuation)]
        parts = [pieces(t, o.max_src_len) for t in tokens]  # (line, piece) → tokens
        flat = [sv.encode(p) for ps in parts for p in ps]
        gnmt = dict(length_penalty=o.length_penalty, coverage_penalty=o.coverage_penalty)
        nbest = iter(translate_nbest(self.model, flat, beam=o.beam, batch_size=o.batch_size, max_len_a=o.max_len_a,
                                     max_len_b=o.max_len_b, length_norm=o.length_norm and not any(gnmt.values()),
                                     n_best=o.n_best, **gnmt))
        out = []
        for k, ps in enumerate(parts):
            found = [next(nbest) for _ in ps]
            if not ps:
                out.append([Row("", [], 0.0, 0)])
                continue
            self._note(first + k, ps, found)
            out.append([self._row(ps, [h[r] for h in found]) for r in range(min(len(h) for h in found))])
        return out

    def _row(self, ps: list[list[str]], hyps: list) -> Row:
        """The r-th best of every piece of a line (`hyps`), joined."""
        from rnnsearch.data.text import detokenize_lines

        words = [w for h in hyps for w in self.tv.decode(h.tokens)]
        text = detokenize_lines([" ".join(words)], self.opts.tgt_lang)[0]
        units = [(self.sv.units(p) + ["</s>"], self.tv.decode(h.tokens, units=True) + ["</s>"], h.alpha)
                 for p, h in zip(ps, hyps)]
        return Row(normalise(text), units, sum(h.score for h in hyps), sum(len(h.tokens) for h in hyps))

    def _note(self, line_no: int, ps: list[list[str]], found: list) -> None:
        if len(ps) > 1:
            self.notes.split.append(line_no)
        o = self.opts  # the search ends every output at a × source length (</s> included) + b words at most
        limits = [int(len(self.sv.encode(p)) * o.max_len_a) + o.max_len_b for p in ps]
        if any(len(h[0].tokens) >= limit for h, limit in zip(found, limits)):
            self.notes.cut.append(line_no)
        if all(i in (UNK_ID, EOS_ID) for p in ps for i in self.sv.encode(p)):
            self.notes.unknown.append(line_no)


@dataclass(frozen=True)
class UserText:
    """A user's sentences: where they come from (`input`, '-': stdin) and where their translations go (`output`,
    None: stdout); `alignment`: each α drawn as text on stderr; `heatmap_dir`: each α as a PNG there."""

    input: str = "-"
    output: str | None = None
    alignment: bool = False
    heatmap_dir: str | None = None


def translate_user(checkpoint: str, text: UserText, opts: UserOptions, src_vocab: str | None = None,
                   tgt_vocab: str | None = None) -> None:
    """Translations on stdout (or in `text.output`), one per input line, in order, and their alignments."""
    input, output, alignment, heatmap_dir = text.input, text.output, text.alignment, text.heatmap_dir
    if opts.n_best > opts.beam:
        raise InputError(f"--n-best {opts.n_best} needs --beam of at least {opts.n_best} (got {opts.beam})")
    if heatmap_dir and Path(heatmap_dir).exists() and not Path(heatmap_dir).is_dir():
        raise InputError(f"--heatmap-dir {heatmap_dir}: not a directory (a file of that name exists)")
    translator = UserTranslator(checkpoint, opts, src_vocab, tgt_vocab)
    if (alignment or heatmap_dir) and translator.model.attention is None:  # as the aer stage tells it
        raise InputError(f"{checkpoint}: this model has no alignment model (attention: none, as RNNencdec): "
                         "--alignment and --heatmap-dir need a model with attention")
    opts = translator.opts
    if opts.coverage_penalty and translator.model.attention is None:
        raise InputError(f"{checkpoint}: this model has no alignment model (attention: none, as RNNencdec): "
                         "--coverage-penalty sums a model's attention")
    if opts.beam == 1 and (opts.length_penalty or opts.coverage_penalty):
        raise InputError("--length-penalty and --coverage-penalty rank a beam's finished translations: they need "
                         "--beam 2 or more")
    lines = read_user_lines(input, opts.unicode)
    typed = input == "-" and sys.stdin.isatty()  # a person at a terminal: each line answered as it is typed
    if typed:
        print("rnnsearch translate: type a sentence and Enter; Ctrl-D ends", file=sys.stderr, flush=True)
    with atomic_path(output) if output else _stdout() as target, \
            (open(target, "w", encoding="utf-8", newline="\n") if output else _stdout_text()) as sink:
        n = 0
        while chunk := [line for _, line in zip(range(1 if typed else CHUNK), lines)]:
            for k, nbest in enumerate(translator.translate(chunk, n + 1)):
                _emit(sink, n + k + 1, nbest, opts, alignment, heatmap_dir)
            sink.flush()
            n += len(chunk)
    translator.notes.report(n, opts)


def _emit(sink, i: int, nbest: list[Row], opts: UserOptions, alignment: bool, heatmap_dir: str | None) -> None:
    """Line `i`'s translation (its n-best as Moses' `sentence ||| text ||| score ||| score per token`, the
    sentence numbered from 0 as Moses does), and the alignment of each of its pieces."""
    if opts.n_best > 1:
        for row in nbest:
            sink.write(f"{i - 1} ||| {row.text} ||| {row.score:.4f} ||| {row.per_word:.4f}\n")
    else:
        sink.write(nbest[0].text + "\n")
    pieces_ = nbest[0].pieces
    for k, (src, out, alpha) in enumerate(pieces_, 1):
        name = f"line {i}" + (f", piece {k} of {len(pieces_)}" if len(pieces_) > 1 else "")  # from 1, as a reader counts
        if alignment:
            print(f"[{name}]\n{alignment_text(alpha, src, out)}", file=sys.stderr)
        if heatmap_dir:
            from rnnsearch.evaluation.heatmap import alignment_figure

            suffix = f"_{k}" if len(pieces_) > 1 else ""
            alignment_figure(alpha.numpy(), src, out, name, Path(heatmap_dir) / f"alignment_{i}{suffix}.png")


class _stdout:
    """Context managers standing in for atomic_path/open when the translations go to stdout."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class _stdout_text(_stdout):
    def __enter__(self):
        return sys.stdout


SHADES = " .:-=+*#%@"  # α from 0 to 1, for alignments drawn as text


def alignment_text(alpha, src: list[str], hyp: list[str]) -> str:
    """α as a character grid: one row per generated word, one column per source word numbered from 1, the source
    words and the shades' legend below (' ' for α under 0.1, … '@' for 0.9 and over)."""
    width = max(map(len, hyp))
    lines = [" " * (width + 1) + " ".join(f"{j:>2}" for j in range(1, len(src) + 1))]
    for word, row in zip(hyp, alpha.tolist()):
        cells = " ".join(" " + SHADES[min(int(a * len(SHADES)), len(SHADES) - 1)] for a in row)
        lines.append(f"{word:>{width}} {cells}")
    lines += [f"{' ' * width} {j:>2} = {w}" for j, w in enumerate(src, 1)]
    legend = ", ".join(f"'{c}' {k / len(SHADES):.1f}" for k, c in enumerate(SHADES))
    return "\n".join(lines + [f"{' ' * width} α_ij from: {legend}"])
