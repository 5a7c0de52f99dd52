"""The explorer page (results/explorer.html): its sentence scores are sacreBLEU's, its aggregates those of Figure 2's
CSV and of compare-mt's word-accuracy rule, its attention the translate stage's α in 8 bits; and in headless
Chromium, the tiny DAG's page shows a long sentence with every model's output, scores and heatmaps, sorted by the
difference of two models."""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rnnsearch.evaluation import explorer
from rnnsearch.textio import InputError

from .conftest import PIXEL, browser, on_screen, page_check


def page_data(path: Path) -> tuple[dict, np.ndarray]:
    """The JSON and the attention buffer a page carries (what its script unpacks)."""
    text = path.read_text(encoding="utf-8")
    blobs = {k: gzip.decompress(base64.b64decode(v)) for k, v in
             re.findall(r'<script type="application/octet-stream" id="(\w+)">([^<]*)</script>', text)}
    return json.loads(blobs["data"]), np.frombuffer(blobs["attention"], dtype=np.uint8)


def test_sentence_scores_are_sacrebleus():
    import sacrebleu

    hyps = ["le chat est noir .", "un chien", "", "la maison bleue de ma grand-mère"]
    refs = ["le chat noir est là .", "un chien", "quelque chose", "la maison de ma grand-mère est bleue"]
    bleu, chrf = explorer.sentence_scores(hyps, refs)
    assert bleu == [round(sacrebleu.sentence_bleu(h, [r]).score, 2) for h, r in zip(hyps, refs)]
    assert chrf == [round(sacrebleu.sentence_chrf(h, [r]).score, 2) for h, r in zip(hyps, refs)]
    assert bleu[1] == 100.0 and bleu[2] == 0.0


def test_word_accuracy_follows_compare_mts_matching_by_training_frequency():
    """An output word matches the next unmatched occurrence of it in the reference. Counted by hand; compare-mt
    0.2.10's FreqWordBucketer gives the same matches with these cutoffs (checked when this was written)."""
    counts = {"le": 20_000, "chat": 50, "noir": 5, "un": 2_000, ".": 30_000}
    refs = [["le", "chat", "noir", "."], ["le", "le", "chien"]]
    outs = [["le", "chat", "chat", "."], ["le", "chien", "chien", "gris"]]
    acc = explorer.word_accuracy(refs, outs, counts)
    # buckets: 1–9, 10–99, 100–999, 1,000–9,999, ≥ 10,000, outside the shortlist
    assert acc["ref"] == [1, 1, 0, 0, 4, 1]  # noir; chat; le ×3 and "."; chien
    assert acc["out"] == [0, 2, 0, 0, 3, 3]  # chat ×2; le ×2 and "."; chien ×2, gris
    assert acc["matched"] == [0, 1, 0, 0, 3, 1]  # the second "chat" and "chien" have nothing left to match
    assert acc["f"] == [0.0, round(2 / 3, 4), None, None, round(6 / 7, 4), 0.5]  # None: no word in the bucket
    assert explorer.frequency_labels()[-2:] == ["≥ 10,000", "outside the shortlist"]


def test_length_ratio_by_bucket():
    assert explorer.length_ratio([["a"] * 3, ["a"] * 5, []], [["b"] * 4, ["b"] * 5, ["b"]], [0, 1, 1], 3) == \
        [0.75, round(5 / 6, 4), None]


def _translations(d: Path, model: str, hyps: list[str], attention: bool, src_tok: list[str]) -> Path:
    folder = d / model
    folder.mkdir(parents=True)
    (folder / "test.hyp").write_text("".join(h + "\n" for h in hyps))
    (folder / "test.hyp.tok").write_text("".join(h + "\n" for h in hyps))
    alphas = {}
    if attention:
        rng = np.random.default_rng(0)
        for i, (h, s) in enumerate(zip(hyps, src_tok)):
            a = rng.random((len(h.split()) + 1, len(s.split()) + 1))
            alphas[str(i)] = (a / a.sum(1, keepdims=True)).astype(np.float16)
    np.savez(folder / "attention.npz", **alphas)
    (d / f"{model}.json").write_text(json.dumps({"model": model, "arch": model.split("-")[0], "by_length": [
        {"bucket": "1-3", "lo": 1, "hi": 3}, {"bucket": "4+", "lo": 4, "hi": None}]}))
    return folder


def test_the_page_carries_every_sentence_score_and_8_bit_attention(tmp_path: Path):
    src = ["a b", "a b c d e", "c"]
    ref = ["x y", "x y z w v", "z"]
    for name, lines in (("src", src), ("ref", ref)):
        (tmp_path / name).write_text("".join(x + "\n" for x in lines))
    (tmp_path / "vocab.tsv").write_text("0\t<pad>\t0\n1\t</s>\t0\n2\t[UNK]\t0\n3\tx\t120\n4\ty\t7\n")
    pd.DataFrame({"model": ["rnnencdec-50"] * 2 + ["rnnsearch-50"] * 2, "replicate": [1] * 4,
                  "bucket": ["1-3", "4+"] * 2, "bleu": [10.5, 3.25, 80.0, None]}).to_csv(tmp_path / "fig2.csv")
    dirs = {"rnnencdec-50": _translations(tmp_path, "rnnencdec-50", ["x", "x y z", "q"], False, src),
            "rnnsearch-50": _translations(tmp_path, "rnnsearch-50", ["x y", "x y z w v", "z z"], True, src)}
    out = tmp_path / "explorer.html"
    test = explorer.TestText(*(str(tmp_path / f) for f in ("src", "ref", "src", "ref")))
    args = ([str(tmp_path / f"{m}.json") for m in dirs], {m: str(d) for m, d in dirs.items()}, test,
            str(tmp_path / "vocab.tsv"), str(tmp_path / "fig2.csv"), str(out))
    explorer.run_explorer(*args)
    data, alpha = page_data(out)
    assert data["src"] == src and data["bucket"] == [0, 1, 0] and data["buckets"] == ["1-3", "4+"]
    encdec, search = data["models"]
    assert (encdec["name"], search["name"]) == ("RNNencdec-50", "RNNsearch-50") and encdec["attention"] is None
    assert search["bleu"][1] == 100.0 and search["bleu_by_length"] == [80.0, None]  # Figure 2's CSV, replicate 1
    assert encdec["bleu_by_length"] == [10.5, 3.25] and encdec["word_accuracy"]["ref"] == [2, 0, 2, 0, 0, 4]
    with np.load(dirs["rnnsearch-50"] / "attention.npz") as npz:
        for i in range(3):
            offset, rows, cols, units = search["attention"][i]
            stored = alpha[offset: offset + rows * cols].reshape(rows, cols) / 255
            assert units is None and np.abs(stored - npz[str(i)].astype(np.float32)).max() <= 0.5 / 255 + 1e-3
    (dirs["rnnsearch-50"] / "test.hyp").write_text("x\n")  # a translation of other lines: named, nothing written
    out.unlink()
    with pytest.raises(InputError, match=r"rnnsearch-50/test.hyp has 1 lines but .*ref has 3"):
        explorer.run_explorer(*args)
    assert not out.exists()


def test_the_tiny_dags_explorer_in_a_browser(tiny_dag: Path, tmp_path: Path):
    """The default run's page: a long sentence with every model's output, scores and the attention models'
    heatmaps; the list sorted by RNNsearch-50 − RNNencdec-50 puts the largest first; the page's BLEU by length is
    Figure 2's CSV."""
    page = tiny_dag / "results/explorer.html"
    data, _ = page_data(page)
    curve = pd.read_csv(tiny_dag / "results/figures/bleu_by_length.csv")
    for m in data["models"]:
        rows = curve[(curve["model"] == m["key"]) & (curve["replicate"] == 1)]
        assert m["bleu_by_length"] == [None if pd.isna(x) else x for x in rows["bleu"]]
    assert "(results/explorer.html)" not in (tiny_dag / "results/report.md").read_text() and \
        "[the explorer](explorer.html)" in (tiny_dag / "results/report.md").read_text()
    chrome = browser()
    if chrome is None:
        pytest.skip("no chromium on this machine (.ci/run installs Debian's chromium)")
    lengths = [len(s.split()) for s in data["src_tok"]]
    line = lengths.index(max(lengths)) + 1
    url = f"{page.as_uri()}#a=rnnsearch-50&b=rnnencdec-50&sort=diff&s={line}"
    dom = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=30000",
                          "--dump-dom", url], capture_output=True, text=True, timeout=300).stdout
    body = dom[dom.index("<body"):]
    assert re.search(r'<body[^>]*data-state="ready"', body), body[:500]
    shown = body[body.index('<div id="sentence">'):body.index("<h2>Sentences</h2>")]
    assert f"Sentence {line} ({max(lengths)} source words)" in body
    for m in data["models"]:  # each output, its BLEU and chrF; a heatmap of the right shape for each attention model
        row = re.search(rf'<tr data-model="{m["key"]}">(.*?)</tr>', shown).group(1)
        assert f"BLEU {m['bleu'][line - 1]:.2f}" in row and f"chrF {m['chrf'][line - 1]:.2f}" in row
        assert re.sub(r"<[^>]+>", "", row).startswith(m["name"] + html.escape(m["hyp_tok"][line - 1], quote=False).strip())
        grid = re.search(rf'<table class="heatmap" data-model="{m["key"]}" data-rows="(\d+)" data-cols="(\d+)"', shown)
        assert (grid is not None) == (m["attention"] is not None)
        if grid:
            rows, cols = m["attention"][line - 1][1:3]
            assert (int(grid.group(1)), int(grid.group(2))) == (rows, cols)
    listed = [int(x) for x in re.findall(r'<tr data-line="(\d+)">', body)]
    search, encdec = (next(m for m in data["models"] if m["key"] == k) for k in ("rnnsearch-50", "rnnencdec-50"))
    diff = [search["bleu"][i - 1] - encdec["bleu"][i - 1] for i in listed]
    assert len(listed) == min(100, len(data["src"])) and diff[0] == max(search["bleu"][i] - encdec["bleu"][i]
                                                                          for i in range(len(data["src"])))
    assert diff == sorted(diff, reverse=True)


def test_the_explorer_benchmark_measures_a_generated_set(tmp_path: Path):
    """bench-explorer at 40 sentences and one load: the page built by the stage's code, its size, and its load
    time where Chromium is installed."""
    from rnnsearch.bench.explorer_load import run_bench_explorer

    result = run_bench_explorer(40, 1, 7, str(tmp_path / "explorer.json"))
    assert json.loads((tmp_path / "explorer.json").read_text()) == result
    assert result["sentences"] == 40 and result["attention_models"] == 3 and result["page_bytes"] > 10_000
    assert (len(result["load_ms"]) == 1 and result["load_ms"][0] > 0) if browser() else result["load_ms"] == []


def test_the_explorer_opens_on_long_sentences_and_a_click_shows_the_sentence(tmp_path: Path):
    """bench-explorer's generated test set (300 sentences of newstest2014's lengths, five models) in a 1280 × 1000
    window and a 1000 × 700 one: the aggregates begin within the first 1,000 px (in the wider), every row of the first screen has
    at least 20 source words (the default view: the longest length bucket first, then A − B), and a click on the
    81st row, scrolled to, scrolls to its sentence and brings model A's heatmap, the first, wholly into view, 8 px
    clear of the window's bottom edge (the heading above it may scroll away where the outputs and the heatmap do not
    fit one screen). Positions to a pixel (conftest.PIXEL): what a person sees, whatever Chromium's rounding."""
    from rnnsearch.bench.explorer_load import MODELS, generate

    scores = generate(tmp_path, 300, 7)
    page = tmp_path / "explorer.html"
    d = str(tmp_path)
    test = explorer.TestText(f"{d}/test.en", f"{d}/test.fr", f"{d}/test.en", f"{d}/test.fr")
    explorer.run_explorer(scores, {m: f"{d}/{m}" for m in MODELS}, test, f"{d}/vocab.fr.tsv",
                          f"{d}/bleu_by_length.csv", str(page))
    for window in ((1280, 1000), (1000, 700)):  # at 1000 × 700, scrollIntoView left the heatmap 0.31 px outside
        (tmp_path / str(window[0])).mkdir()
        report = page_check(page, "explorer_check.js", tmp_path / str(window[0]), "</body>", window=window)
        assert report["error"] is None and report["state"] == "ready", report
        assert report["aggregates_top"] < 1000 or window[0] < 1280  # a narrower window wraps the list's rows
        assert len(report["first_screen_words"]) >= 5 and min(report["first_screen_words"]) >= 20, report
        assert report["heading"].startswith(f"Sentence {report['clicked_line']} (")
        assert report["heading_box"]["bottom"] <= report["height"] + PIXEL, report  # at the sentence, not above it
        assert report["first_heatmap"] == report["model_a"], report
        heatmap = report["first_heatmap_box"]
        assert on_screen(heatmap, report["height"]) and heatmap["bottom"] <= report["height"] - 8 + PIXEL, report
    # under the heatmap, each source word's total attention, dropped and attended-again words marked, as the
    # alignment table counts them (rnnsearch.evaluation.coverage) from the same α at full precision
    with np.load(tmp_path / report["model_a"] / "attention.npz") as npz:
        alpha = npz[str(report["clicked_line"] - 1)].astype(np.float64)
    total = alpha.sum(axis=0)
    assert len(report["totals"]) == alpha.shape[1], report["totals"]
    assert np.abs(np.array(report["totals"]) - total).max() <= 0.005 + alpha.shape[0] * 0.5 / 255
    kinds = ["dropped" if t < 0.5 else "again" if t > 1.5 else "" for t in total[:-1]] + [""]  # not its </s>
    near = [abs(t - 0.5) < 0.05 or abs(t - 1.5) < 0.05 for t in total]  # where 8-bit α may round across
    assert all(k == want or close for k, want, close in zip(report["total_kinds"], kinds, near)), report
    assert report["word_kinds"] == report["total_kinds"] and {"dropped", "again"} & set(report["total_kinds"])
