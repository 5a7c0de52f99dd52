"""Text as users have it: a byte-order mark, CRLF, decomposed accents (NFD), duplicate YAML keys, and a whole
document on one line."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from rnnsearch import config as cfg
from rnnsearch.data.corpus.local import run_local_corpus
from rnnsearch.data.text import run_tokenize
from rnnsearch.decoding.user import pieces

from .forks import rnnsearch
from .test_resume import data as data  # noqa: F401 (the shared fixtures)
from .test_resume import reference as reference  # noqa: F401

FRENCH = ["Le café est très chaud.", "Où est la gare ?", "Élève, répète : « déjà vu »."]


def _translate(checkpoint: Path, stdin: bytes, *args: str) -> subprocess.CompletedProcess:
    return rnnsearch("translate", "--checkpoint", checkpoint, *args, stdin=stdin, text=False)


@pytest.mark.slow
def test_bom_and_crlf_give_the_same_translations(data: Path, reference: Path):
    lines = (data / "dev.en").read_text().splitlines()[:3]
    plain = _translate(reference, ("\n".join(lines) + "\n").encode())
    windows = _translate(reference, b"\xef\xbb\xbf" + ("\r\n".join(lines) + "\r\n").encode())
    assert plain.returncode == windows.returncode == 0
    assert plain.stdout == windows.stdout and len(plain.stdout.splitlines()) == 3


@pytest.mark.slow
def test_nfc_and_nfd_input_give_the_same_translations(data: Path, reference: Path, tmp_path: Path):
    lines = [line.replace("the", "thé") for line in (data / "dev.en").read_text().splitlines()[:3]]
    nfc = _translate(reference, "\n".join(unicodedata.normalize("NFC", x) for x in lines).encode())
    nfd = _translate(reference, "\n".join(unicodedata.normalize("NFD", x) for x in lines).encode())
    assert nfc.returncode == nfd.returncode == 0
    assert nfc.stdout == nfd.stdout
    assert unicodedata.is_normalized("NFC", nfc.stdout.decode())


def _corpus(folder: Path, form: str, bom: bool) -> Path:
    folder.mkdir()
    for split in ("train", "dev", "test"):
        (folder / f"{split}.en").write_text("\n".join(["The coffee is hot."] * 3) + "\n")
        text = "\n".join(unicodedata.normalize(form, x) for x in FRENCH) + "\n"
        (folder / f"{split}.fr").write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    return folder


def test_nfd_and_bom_corpora_tokenize_as_the_nfc_one(tmp_path: Path):
    outputs = {}
    for name, form, bom in (("nfc", "NFC", False), ("nfd", "NFD", True)):
        src = _corpus(tmp_path / name, form, bom)
        stats = run_local_corpus({s: str(src / s) for s in ("train", "dev", "test")}, "en", "fr", src / "raw")
        run_tokenize(src / "raw/train.fr", src / "train.tok.fr", "fr", False)
        outputs[name] = (src / "train.tok.fr").read_bytes()
        assert stats["train"]["unicode_normalised"] == (3 if form == "NFD" else 0)
    assert outputs["nfd"] == outputs["nfc"]
    assert "café" in outputs["nfc"].decode().split()  # one token, not "cafe" + a combining accent


def test_unicode_none_keeps_the_text_as_it_is(tmp_path: Path):
    src = _corpus(tmp_path / "c", "NFD", False)
    run_local_corpus({s: str(src / s) for s in ("train", "dev", "test")}, "en", "fr", src / "raw", unicode="none")
    assert (src / "raw/test.fr").read_text() == "\n".join(unicodedata.normalize("NFD", x) for x in FRENCH) + "\n"


def test_a_duplicate_key_fails_before_any_work_naming_key_file_and_lines(tmp_path: Path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("decode:\n  beam: 5\n  batch_size: 8\n  beam: 6\n")
    with pytest.raises(cfg.ConfigError, match=rf"^{overlay}:4: key 'beam' given twice \(first on line 2\)"):
        cfg.load_params(["params.yaml", overlay])


def test_long_lines_are_split_at_sentence_punctuation():
    words = ("a b c . d e f g ! h i " * 3).split()
    got = pieces(words, 6)
    assert [" ".join(p) for p in got] == ["a b c .", "d e f g !", "h i a b c .", "d e f g !", "h i a b c .",
                                          "d e f g !", "h i"]
    assert pieces(list("abcdefghij"), 4) == [list("abcd"), list("efgh"), list("ij")]  # no punctuation: at 4
    assert pieces([], 4) == []


@pytest.mark.slow
def test_a_5000_word_line_among_short_ones_is_translated_piecewise(data: Path, reference: Path, tmp_path: Path):
    short = (data / "dev.en").read_text().splitlines()[:2]
    long = " ".join((" ".join(short) + " ") for _ in range(200)).split()[:5000]
    stdin = "\n".join([short[0], " ".join(long), short[1]]) + "\n"
    proc = _translate(reference, stdin.encode(), "--max-src-len", "100")
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode().split("\n")
    assert len(out) == 4 and out[3] == ""  # one output line per input line
    alone = _translate(reference, ("\n".join(short) + "\n").encode()).stdout.decode().splitlines()
    assert [out[0], out[2]] == alone  # the short lines are translated as they are on their own
    assert len(out[1].split()) > 1000
    assert "1 of 3 lines longer than --max-src-len 100 tokens: split at sentence punctuation and translated piece " \
           "by piece: line 2" in proc.stderr.decode()


def test_the_tokenize_stage_reads_bom_and_nfd_as_nfc(tmp_path: Path):
    """Extra test sets reach the tokenize stage straight from the user's files."""
    text = "\n".join(FRENCH) + "\n"
    (tmp_path / "nfc.fr").write_text(text)
    (tmp_path / "nfd.fr").write_bytes(b"\xef\xbb\xbf" + unicodedata.normalize("NFD", text).encode())
    for name in ("nfc", "nfd"):
        run_tokenize(tmp_path / f"{name}.fr", tmp_path / f"{name}.tok", "fr", False)
    assert (tmp_path / "nfd.tok").read_bytes() == (tmp_path / "nfc.tok").read_bytes()
    run_tokenize(tmp_path / "nfd.fr", tmp_path / "kept.tok", "fr", False, unicode="none")
    assert (tmp_path / "kept.tok").read_bytes() != (tmp_path / "nfc.tok").read_bytes()


@pytest.mark.slow
def test_a_sentence_typed_on_a_terminal_is_answered_before_the_next(data: Path, reference: Path):
    """`rnnsearch translate` with a terminal on stdin (a pseudo-terminal here): a hint on stderr, then each line's
    translation printed as soon as the line is typed, not when input ends."""
    lines = (data / "dev.en").read_text().splitlines()[:2]
    expected = _translate(reference, ("\n".join(lines) + "\n").encode()).stdout.decode().splitlines()
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "rnnsearch.cli", "translate", "--checkpoint", str(reference)],
                            stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(follower)
    try:
        for line, translation in zip(lines, expected):
            os.write(leader, (line + "\n").encode())
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            assert ready, f"no translation of {line!r} within 120 s of typing it"
            assert proc.stdout.readline().decode().rstrip("\n") == translation
        os.write(leader, b"\x04")  # Ctrl-D
        assert proc.wait(timeout=60) == 0
        assert "type a sentence and Enter" in proc.stderr.read().decode()
    finally:
        proc.kill()
        os.close(leader)


@pytest.mark.slow
def test_a_reader_that_goes_away_ends_translate_quietly(data: Path, reference: Path, tmp_path: Path):
    """`rnnsearch translate --input F | head -1`, as a shell runs it: the reader closes the pipe after one line while
    translate still writes (200 lines: four chunks; 50 lines: one chunk, written in more than one piece, which raced
    the reader). translate ends with exit status 141 (SIGPIPE's, as a shell reports a Unix tool's) or 0, and head's
    line is the whole first translation. On 200 lines nothing is said on stderr; on 50, written whole before head
    closed the pipe, translate's own notes on its translations may follow (this test's barely trained model reaches
    the output limit, depending on how many threads trained it), and nothing else. Three runs each."""
    dev = (data / "dev.en").read_text().splitlines()
    for count in (200, 50):
        text = tmp_path / f"{count}.en"
        text.write_text("\n".join((dev * (count // len(dev) + 1))[:count]) + "\n")
        first = _translate(reference, b"", "--input", str(text)).stdout.decode().splitlines()[0]
        pipeline = (f"'{sys.executable}' -m rnnsearch.cli translate --checkpoint '{reference}' --input '{text}' "
                    f"| head -1; echo \"status ${{PIPESTATUS[0]}}\" >&2")
        for _ in range(3):
            p = subprocess.run(["bash", "-c", pipeline], capture_output=True, text=True, timeout=300)
            *said, status = p.stderr.splitlines()
            notes = [line for line in said if "rnnsearch.translate WARNING" in line and " lines whose translation" in line]
            assert status in ("status 0", "status 141") and said == (notes if count == 50 else []), (count, p.stderr)
            assert p.stdout == first + "\n", (count, p.stdout)
