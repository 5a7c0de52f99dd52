"""data.source: local: a user's own line-aligned text, read by rule (never silently shifted)."""

from __future__ import annotations

import json

import pytest

from rnnsearch import config as cfg
from rnnsearch.cli import main
from rnnsearch.data.corpus.local import run_local_corpus
from rnnsearch.textio import InputError

from .conftest import REPO


def write(path, text: str | bytes) -> None:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))


@pytest.fixture
def files(tmp_path):
    for split in ("train", "dev", "test"):
        write(tmp_path / f"{split}.en", "A house .\n\nThe  cat\tsleeps .\nA\x07bell rings .\nNo end")
        write(tmp_path / f"{split}.fr", "Une maison .\nVide ?\nLe chat dort .\nUne cloche sonne .\nSans fin")
    return tmp_path


def local(d) -> dict:
    return {split: str(d / split) for split in ("train", "dev", "test")}


def test_pairs_are_cleaned_and_counted(files, tmp_path):
    stats = run_local_corpus(local(files), "en", "fr", tmp_path / "out")
    assert (tmp_path / "out/train.en").read_text().splitlines() == ["A house .", "The cat sleeps .", "A bell rings .",
                                                                    "No end"]
    assert (tmp_path / "out/train.fr").read_text().splitlines()[1] == "Le chat dort ."  # stays aligned
    assert stats["train"] == {**stats["train"], "lines": 5, "pairs": 4, "dropped_empty": 1,
                              "control_characters_replaced": 1}
    assert json.loads((tmp_path / "out/corpus.json").read_text()) == stats


def test_misaligned_or_undecodable_files_are_errors_naming_them(files, tmp_path):
    write(files / "dev.fr", "Une maison .\n")
    with pytest.raises(InputError, match=r"dev.en has 5 lines but .*dev.fr has 1: they must be line-aligned"):
        run_local_corpus(local(files), "en", "fr", tmp_path / "out")
    write(files / "dev.fr", b"Une maison .\nVide\nLe chat \xe9\nx\ny\n")
    with pytest.raises(InputError, match=r"dev.fr:3: invalid UTF-8"):
        run_local_corpus(local(files), "en", "fr", tmp_path / "out")
    with pytest.raises(InputError, match=r"'data.local.test': .*nowhere.en not found"):
        run_local_corpus({**local(files), "test": str(tmp_path / "nowhere")}, "en", "fr", tmp_path / "out")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())  # nothing unless all are good


def test_the_corpus_stage_reads_local_files_from_params(files, tmp_path):
    overlay = tmp_path / "local.yaml"
    overlay.write_text(f"data: {{source: local, local: {{train: {files}/train, dev: {files}/dev, test: {files}/test}}}}\n"
                       "aer: {gold: none}\n")
    assert main(["corpus", "--params", str(REPO / "params.yaml"), "--params", str(overlay), "--out-dir",
                 str(tmp_path / "raw")]) == 0
    assert (tmp_path / "raw/test.fr").read_text().count("\n") == 4
    bad = cfg.merge(cfg.load_yaml(REPO / "params.yaml"), {"data": {"source": "local"}, "aer": {"gold": "none"}})
    with pytest.raises(cfg.ConfigError, match=r"'data.local': data.source is 'local' but no data.local is given \(train, dev, test\)"):
        cfg.validate(bad)
    with pytest.raises(cfg.ConfigError, match=r"'aer.gold': 'synthetic' links exist only for data.source: synthetic"):
        cfg.validate(cfg.merge(bad, {"data": {"local": local(files)}, "aer": {"gold": "synthetic"}}))


def test_real_europarl_sample_with_its_empty_lines(shared_data, tmp_path):
    prefix = shared_data / "europarl_v7_samples" / "cs124sampleB"
    stats = run_local_corpus({"train": str(prefix), "dev": str(prefix), "test": str(prefix)}, "en", "fr", tmp_path)
    s = stats["train"]
    assert s["lines"] == 20000 and s["dropped_empty"] >= 1 and s["pairs"] == s["lines"] - s["dropped_empty"]
    assert len((tmp_path / "train.en").read_text(encoding="utf-8").splitlines()) == s["pairs"]


def test_the_data_report_says_why_the_corpus_stage_dropped_pairs(files, tmp_path):
    """The corpus row's "why" was empty where corpus.json said dropped_empty."""
    from rnnsearch.data.data_report import _steps

    stats = run_local_corpus(local(files), "en", "fr", tmp_path / "out")
    clean = {"pairs_in": 4, "pairs": 4, "dropped_empty": 0, "dropped_long": 0, "dropped_ratio": 0, "src_words": 12,
             "tgt_words": 12}
    row = _steps(stats, [clean], {})[0]
    assert row["step"] == "corpus (raw training text)" and row["dropped"] == 1 and row["detail"] == "empty side 1"


def test_the_length_histograms_say_what_they_do_not_draw(tmp_path):
    """lengths.png draws 0-100 tokens: WMT's long tail is counted in the title rather than cut silently."""
    from rnnsearch.data.data_report import _cut, _plot

    h = {"train.en": {5: 10, 120: 2, 300: 1}, "train.fr": {6: 12, 140: 1}, "dev.en": {5: 3}, "dev.fr": {7: 3},
         "test.en": {5: 3}, "test.fr": {6: 3}}
    assert _cut(h, "train", ("en", "fr")) == "\nnot drawn: over 100 tokens (en 3, fr 1), up to 300"
    assert _cut(h, "dev", ("en", "fr")) == ""
    _plot(h, "en", "fr", str(tmp_path / "lengths.png"))
    assert (tmp_path / "lengths.png").stat().st_size > 1000
