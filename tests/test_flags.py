"""Command-line values that cannot work are refused before any work, naming the flag and the accepted range; help
says what every option does; translating your own sentences prepares them as the training text was."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import torch

from rnnsearch.cli import build_parser
from rnnsearch.commands import stage_code

from .conftest import REPO
from .forks import rnnsearch
from .test_resume import data as data  # noqa: F401 (the shared fixtures)
from .test_resume import reference as reference  # noqa: F401


@pytest.mark.parametrize("flag, value, accepted", [
    ("--max-src-len", "0", "an integer of at least 1"), ("--max-src-len", "-3", "an integer of at least 1"),
    ("--n-best", "0", "an integer of at least 1"), ("--beam", "0", "an integer of at least 1"),
    ("--max-len-a", "-1", "a number of at least 0.0"), ("--max-len-b", "-2", "an integer of at least 0")])
def test_translate_refuses_values_that_cannot_work(reference: Path, flag: str, value: str, accepted: str):  # noqa: F811
    """--max-src-len 0 looped for ever, --n-best 0 ended in a traceback, --beam 0 blamed --n-best."""
    p = rnnsearch("translate", "--checkpoint", reference, flag, value, stdin="the house .\n", timeout=60)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert f"rnnsearch translate: error: argument {flag}: expected {accepted}, got {value}" in p.stderr
    assert "usage: rnnsearch translate" in p.stderr and "--n-best" not in p.stderr.splitlines()[-1].replace(flag, "")


@pytest.mark.parametrize("value", ["0", "-3"])
def test_train_refuses_a_replicate_below_one(value: str, tmp_path: Path):
    p = rnnsearch("train", "--model", "rnnsearch-50", "--replicate", value, *(x for f in (
        "--src-train", "--tgt-train", "--src-dev", "--tgt-dev", "--src-vocab", "--tgt-vocab") for x in (f, "x")),
        "--out-dir", tmp_path / "out")
    assert p.returncode == 2 and f"argument --replicate: expected an integer of at least 1, got {value}" in p.stderr
    assert not (tmp_path / "out").exists()


def test_every_option_of_every_stage_says_what_it_does():
    parser = build_parser()
    stages = parser._subparsers._group_actions[0].choices
    silent = [f"{name} {a.option_strings[0]}" for name, sub in stages.items() for a in sub._actions
              if a.option_strings and not (a.help or "").strip()]
    assert silent == []
    assert parser.description.endswith(".") and "each one" not in parser.description
    help_text = stages["translate"].format_help()
    assert "(default: 12)" in help_text and "(default: 150)" in help_text and "(default: None)" not in help_text
    lines = [a.help for a in stages["translate"]._actions if a.option_strings]
    assert len(lines) == len(set(lines)), "two options share one help line"
    assert isinstance(stages["translate"].formatter_class(prog="x"), argparse.HelpFormatter)


def test_an_unknown_option_gets_the_stages_usage():
    p = rnnsearch("translate", "--checkpoint", "m.pt", "--beem", "3")
    assert p.returncode == 2 and p.stderr.startswith("usage: rnnsearch translate")
    assert "unrecognized arguments: --beem 3 (rnnsearch translate --help lists its options)" in p.stderr


def test_no_source_file_of_a_stage_is_empty():
    """DVC warned `'src/rnnsearch/__init__.py' is empty` once per stage that lists it."""
    files = {f for name in ("train", "translate", "corpus", "report") for f in stage_code(name)}
    assert "src/rnnsearch/__init__.py" in files
    assert [f for f in files if (REPO / f).stat().st_size == 0] == []


def test_split_lines_get_a_per_token_score_and_an_alignment_per_piece(data: Path, reference: Path):  # noqa: F811
    line = " ; ".join((data / "dev.en").read_text().splitlines()[:3])
    p = rnnsearch("translate", "--checkpoint", reference, "--max-src-len", "4", "--n-best", "2", "--beam", "2",
                  "--alignment", stdin=f"{line}\n\n")
    assert p.returncode == 0, p.stderr
    rows = [r.split(" ||| ") for r in p.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "1"]  # Moses' sentence numbers; the empty line gives one row
    for _, text, score, per_token in rows[:2]:
        assert float(score) < float(per_token) < 0 and len(text.split()) > 1  # summed over pieces, then per token
    assert rows[2][1:] == ["", "0.0000", "0.0000"]
    pieces = int(p.stderr.split("piece 1 of ")[1].split("]")[0])
    assert pieces > 1 and all(f"[line 1, piece {k} of {pieces}]" in p.stderr for k in range(1, pieces + 1))
    grid = p.stderr.split("[line 1, piece 1 of")[1].split("\n[line ")[0]
    assert re.search(r"^\s+1 = \S", grid, re.M) and not re.search(r"^\s+0 = ", grid, re.M)  # columns from 1
    assert "α_ij from: ' ' 0.0, '.' 0.1," in grid and "'@' 0.9" in grid  # the shades' legend
    assert "line 1" in p.stderr.split("split at sentence punctuation")[1]  # the warning numbers lines from 1 too


def _with_text(reference: Path, tmp_path: Path, **text) -> Path:  # noqa: F811
    state = torch.load(reference, weights_only=True)
    state["config"]["text"] = {**state["config"]["text"], **text}
    out = tmp_path / f"model-{'-'.join(map(str, text.values()))}.pt"
    torch.save(state, out)
    return out


def test_user_translate_prepares_text_as_the_checkpoint_records(data: Path, reference: Path, tmp_path: Path):  # noqa: F811
    """The train stage records data.src/tgt, data.unicode and tokenize.normalize_punctuation in the checkpoint;
    full-width letters reach an NFKC model as the ASCII words it knows, and an NFC model as unknown words."""
    text = torch.load(reference, weights_only=True)["config"]["text"]
    assert text == {"src_lang": "en", "tgt_lang": "fr", "unicode": "NFC", "normalize_punctuation": True}
    line = (data / "dev.en").read_text().splitlines()[0]
    wide = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in line)  # full-width forms
    nfkc = _with_text(reference, tmp_path, unicode="NFKC")
    plain = rnnsearch("translate", "--checkpoint", nfkc, stdin=line + "\n").stdout
    folded = rnnsearch("translate", "--checkpoint", nfkc, stdin=wide + "\n")
    assert folded.stdout == plain and "source vocabulary" not in folded.stderr
    nfc = rnnsearch("translate", "--checkpoint", reference, stdin=wide + "\n")
    assert "1 of 1 lines without a single word of the model's source vocabulary" in nfc.stderr

    from rnnsearch.decoding.user import UserOptions, UserTranslator

    swapped = _with_text(reference, tmp_path, src_lang="fr", tgt_lang="en", normalize_punctuation=False)
    opts = UserTranslator(str(swapped), UserOptions(), None, None).opts
    assert (opts.src_lang, opts.tgt_lang, opts.normalize_punctuation) == ("fr", "en", False)
    given = UserTranslator(str(swapped), UserOptions(src_lang="de"), None, None).opts
    assert given.src_lang == "de"  # a flag wins over the checkpoint


def test_user_translate_refuses_params_it_would_ignore(reference: Path):  # noqa: F811
    p = rnnsearch("translate", "--checkpoint", reference, "--params", REPO / "params.yaml", stdin="the house .\n")
    assert p.returncode == 2 and p.stdout == ""
    assert "--params is for the pipeline's translate stage (with --out-dir)" in p.stderr


def test_heatmap_dir_at_a_file_and_a_non_checkpoint_are_clear_errors(reference: Path, tmp_path: Path):  # noqa: F811
    (tmp_path / "maps").write_text("a file")
    p = rnnsearch("translate", "--checkpoint", reference, "--heatmap-dir", tmp_path / "maps", stdin="the house .\n")
    assert p.returncode == 2 and f"--heatmap-dir {tmp_path / 'maps'}: not a directory" in p.stderr
    p = rnnsearch("translate", "--checkpoint", tmp_path / "maps", stdin="the house .\n")
    assert p.returncode == 2 and "not an rnnsearch checkpoint (not a file written by torch.save)" in p.stderr
    assert "weights_only" not in p.stderr and "Traceback" not in p.stderr
