"""Every stage through its CLI, on tiny data, without Snakemake: the files each writes and what is in them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rnnsearch.cli import main
from rnnsearch.runtime import cpu_name
from rnnsearch.textio import InputError, read_lines

from .conftest import REPO

PARAMS = ["--params", str(REPO / "params.yaml"), "--params", str(REPO / "tests" / "configs" / "tiny.yaml")]


def rnnsearch(*args: str) -> None:
    assert main([str(a) for a in args]) == 0, f"rnnsearch {' '.join(map(str, args))} failed"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Stages 1-9 in order in one folder (on the CPU unless this machine has a GPU: `device: auto`)."""
    return run_stages(tmp_path_factory.mktemp("stages"), PARAMS)


def run_stages(d: Path, params: list[str]) -> Path:
    """Runs stages 1-9 in order into `d` with the config files in `params` and returns `d`."""
    rnnsearch("corpus", *params, "--out-dir", d / "raw")
    for split in ("train", "dev", "test"):
        for lang in ("en", "fr"):
            rnnsearch("tokenize", *params, "--lang", lang, "--input", d / f"raw/{split}.{lang}",
                      "--output", d / f"tok/{split}.{lang}", "--log", d / f"logs/tok.{split}.{lang}.log")
    for n in (30, 50):
        rnnsearch("filter", "--max-len", n, "--src", d / "tok/train.en", "--tgt", d / "tok/train.fr",
                  "--out-src", d / f"train{n}.en", "--out-tgt", d / f"train{n}.fr", "--stats", d / f"train{n}.json")
    rnnsearch("vocab", *params, "--src", d / "tok/train.en", "--tgt", d / "tok/train.fr", "--out-src",
              d / "vocab.en.tsv", "--out-tgt", d / "vocab.fr.tsv", "--stats", d / "vocab.json")
    models = ["rnnencdec-30", "rnnsearch-50"]
    for m in models:
        n = 30 if m.endswith("30") else 50
        rnnsearch("train", *params, "--model", m, "--src-train", d / f"train{n}.en", "--tgt-train", d / f"train{n}.fr",
                  "--src-dev", d / "tok/dev.en", "--tgt-dev", d / "tok/dev.fr", "--src-vocab", d / "vocab.en.tsv",
                  "--tgt-vocab", d / "vocab.fr.tsv", "--out-dir", d / f"models/{m}")
        rnnsearch("translate", *params, "--checkpoint", d / f"models/{m}/model.pt", "--src", d / "tok/test.en",
                  "--ref", d / "tok/test.fr", "--src-vocab", d / "vocab.en.tsv", "--tgt-vocab", d / "vocab.fr.tsv",
                  "--out-dir", d / f"tr/{m}")
        rnnsearch("score", *params, "--model", m, "--src", d / "tok/test.en", "--ref-tok", d / "tok/test.fr",
                  "--ref", d / "raw/test.fr", "--hyp-dir", d / f"tr/{m}", "--out", d / f"scores/{m}.json")
    scores = [d / f"scores/{m}.json" for m in models]
    rnnsearch("tables", *params, "--scores", *scores, "--train-stats",
              *[d / f"models/{m}/train_stats.json" for m in models], "--hyps", *[d / f"tr/{m}/test.hyp.tok" for m in models],
              "--ref-tok", d / "tok/test.fr", "--out-dir", d / "tables")
    rnnsearch("figures", *params, "--scores", *scores, "--attention", d / "tr/rnnsearch-50/attention.npz",
              "--src", d / "tok/test.en", "--hyp", d / "tr/rnnsearch-50/test.hyp.tok",
              "--nounk", d / "tr/rnnsearch-50/nounk.json", "--out-dir", d / "figures")
    rnnsearch("aer", *params, "--checkpoint", d / "models/rnnsearch-50/model.pt", "--src", d / "tok/test.en",
              "--ref", d / "tok/test.fr", "--src-vocab", d / "vocab.en.tsv", "--tgt-vocab", d / "vocab.fr.tsv",
              "--gold", d / "raw/test.align", "--out", d / "scores/aer.json")
    rnnsearch("report", *params, "--table1", d / "tables/table1.md", "--table2", d / "tables/table2.md",
              "--figure2", d / "figures/bleu_by_length.png", "--alignments", d / "figures/alignment_a.png",
              "--scores", *scores, "--src", d / "raw/test.en", "--ref", d / "raw/test.fr",
              "--hyps", *[f"{m}={d / f'tr/{m}/test.hyp'}" for m in models], "--aer", d / "scores/aer.json",
              "--alignment-figure", d / "figures/alignment_by_length.png", "--out", d / "report.md")
    return d


@pytest.mark.cuda
def test_every_stage_runs_on_cuda(tmp_path: Path):
    """The tiny pipeline with `device: cuda` for training, decoding and AER: each model trained on the GPU from
    CUDA graphs (`cuda_graphs: true`: an error if they could not run; its name in the training's record), every
    test sentence translated and scored, AER measured, the report written."""
    import torch

    cuda = tmp_path / "cuda.yaml"
    cuda.write_text("train: {device: cuda, cuda_graphs: true}\ndecode: {device: cuda}\n")
    d = run_stages(tmp_path / "run", [*PARAMS, "--params", str(cuda)])
    for m in ("rnnencdec-30", "rnnsearch-50"):
        stats = json.loads((d / f"models/{m}/train_stats.json").read_text())
        assert stats["device"] == torch.cuda.get_device_name(), stats["device"]
        assert len(read_lines(d / f"tr/{m}/test.hyp")) == 80
        assert sum(b["sentences"] for b in json.loads((d / f"scores/{m}.json").read_text())["by_length"]) == 80
    aer = json.loads((d / "scores/aer.json").read_text())["argmax"]["aer"]
    assert 0 <= aer <= 1 and f"{aer:.3f}" in (d / "report.md").read_text()


def test_corpus_and_tokenize(run: Path):
    for split, n in (("train", 1500), ("dev", 40), ("test", 80)):
        assert len(read_lines(run / f"raw/{split}.en")) == n == len(read_lines(run / f"raw/{split}.fr"))
        assert len(read_lines(run / f"tok/{split}.fr")) == n
    raw, tok = read_lines(run / "raw/train.fr"), read_lines(run / "tok/train.fr")
    assert any("l'" in line and "l' " not in line for line in raw)  # elided in raw text
    assert any(" l' " in f" {line} " for line in tok)  # split by the Moses tokenizer
    assert tok[0][0].isupper()  # no lowercasing
    assert (run / "logs/tok.train.fr.log").read_text().strip()


def test_filter_keeps_pairs_within_the_limit(run: Path):
    src, tgt = read_lines(run / "train30.en"), read_lines(run / "train30.fr")
    assert len(src) == len(tgt) == json.loads((run / "train30.json").read_text())["pairs_kept"]
    assert max(len(s.split()) for s in src + tgt) <= 30
    assert len(read_lines(run / "train50.en")) > len(src)


def test_vocab_is_a_shortlist(run: Path):
    words = read_lines(run / "vocab.fr.tsv")
    assert len(words) == 150 + 3 and words[:3] == ["0\t<pad>\t0", "1\t</s>\t0", "2\t[UNK]\t0"]
    counts = [int(w.split("\t")[2]) for w in words[3:]]
    assert counts == sorted(counts, reverse=True)
    assert 0.5 < json.loads((run / "vocab.json").read_text())["tgt"]["coverage"] < 1.0


def test_train_writes_checkpoint_stats_and_curve(run: Path):
    stats = json.loads((run / "models/rnnsearch-50/train_stats.json").read_text())
    assert stats["updates"] == 12 and stats["arch"] == "rnnsearch" and stats["dev_nll"] > 0
    curve = pd.read_csv(run / "models/rnnsearch-50/learning_curve.tsv", sep="\t")
    assert list(curve["update"]) == [4, 8, 12]


def test_translate_outputs_align_with_the_test_set(run: Path):
    d = run / "tr/rnnsearch-50"
    assert len(read_lines(d / "test.hyp.tok")) == 80 == len(read_lines(d / "test.hyp"))
    ids = json.loads((d / "nounk.json").read_text())["ids"]
    nounk = read_lines(d / "nounk.hyp.tok")
    assert len(nounk) == len(ids) and not any("[UNK]" in h.split() for h in nounk)
    with np.load(d / "attention.npz") as npz:
        alpha = npz["0"].astype(np.float32)
        assert alpha.shape[1] == len(read_lines(run / "tok/test.en")[0].split()) + 1
        np.testing.assert_allclose(alpha.sum(1), 1.0, atol=2e-3)  # stored as float16
    with np.load(run / "tr/rnnencdec-30/attention.npz") as npz:
        assert npz.files == []  # RNNencdec has no alignment model


def test_score_tables_figures_report(run: Path):
    s = json.loads((run / "scores/rnnsearch-50.json").read_text())
    assert s["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert sum(b["sentences"] for b in s["by_length"]) == 80
    assert all(b["ci_low"] <= b["bleu"] <= b["ci_high"] for b in s["by_length"] if b["sentences"] > 1)
    t1 = pd.read_csv(run / "tables/table1.csv")
    assert list(t1["Model"]) == ["rnnencdec-30", "rnnsearch-50"]
    p = t1["p vs rnnencdec-30"]
    assert pd.isna(p[0]) and 0 < p[1] <= 1  # paired bootstrap against the first model
    assert "sacreBLEU" in (run / "tables/table1.md").read_text()
    t2 = pd.read_csv(run / "tables/table2.csv")
    assert list(t2["Updates"]) == [12, 12]
    # As shown: the paper's names (the CSVs keep the config keys), minutes for trainings under an hour, the CPU's name
    shown1 = (run / "tables/table1.md").read_text().splitlines()
    assert shown1[0].split("|")[1].strip() == "Model" and "p vs RNNencdec-30" in shown1[0]
    assert [r.split("|")[1].strip() for r in shown1[2:4]] == ["RNNencdec-30", "RNNsearch-50"]
    shown2 = (run / "tables/table2.md").read_text().splitlines()
    assert "Minutes" in shown2[0] and "Hours" not in shown2[0]
    minutes = shown2[0].split("|").index(next(c for c in shown2[0].split("|") if "Minutes" in c))
    assert float(shown2[2].split("|")[minutes]) == pytest.approx(t2["Hours"][0] * 60, abs=0.006)
    assert f"CPU: {cpu_name()}" in shown2[2]
    for f in ("bleu_by_length.png", "bleu_by_length.pdf", "bleu_by_length.csv", "alignment_a.png", "alignment_b.png",
              "alignment_long.png", "alignment_by_length.png", "alignment_by_length.pdf"):
        assert (run / "figures" / f).stat().st_size > 1000 or f.endswith(".csv")
    report = (run / "report.md").read_text()
    assert "Table 1" in report and "alignment_a.png" in report and "## Figure 3: alignments of RNNsearch-50" in report
    assert "![Dropped and repeated words by sentence length](figures/alignment_by_length.png)" in report
    assert "(a) test sentence 1 (`figures.alignment_sentence`); (b) a sentence of 3–30 source words" in report
    assert "- RNNencdec-30: " in report and "- rnnencdec-30: " not in report
    assert "The first 3 test sentences of 10 or more source words, in the order of the test file" in report
    aer = json.loads((run / "scores/aer.json").read_text())
    assert aer["sentences"] == 80 and 0 <= aer["argmax"]["aer"] <= 1 and aer["argmax"]["sure"] > 0
    assert "## Alignment error rate of rnnsearch-50" in report and f"{aer['argmax']['aer']:.3f}" in report


def test_stage_errors_name_the_file(run: Path, tmp_path: Path, capsys):
    (tmp_path / "a.en").write_text("one\ntwo\n")
    (tmp_path / "a.fr").write_text("un\n")
    code = main(["filter", "--max-len", "5", "--src", str(tmp_path / "a.en"), "--tgt", str(tmp_path / "a.fr"),
                 "--out-src", str(tmp_path / "o.en"), "--out-tgt", str(tmp_path / "o.fr"), "--stats", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and "a.en has 2 lines but" in err and "a.fr has 1" in err and "Traceback" not in err
    assert not (tmp_path / "o.en").exists()  # nothing partial left behind
    code = main(["score", *PARAMS, "--model", "rnnsearch-50", "--src", str(run / "tok/test.en"),
                 "--ref-tok", str(tmp_path / "a.fr"), "--ref", str(run / "raw/test.fr"),
                 "--hyp-dir", str(run / "tr/rnnsearch-50"), "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and "test.hyp.tok has 80 lines" in err and "a.fr has 1" in err
    lines = (run / "vocab.fr.tsv").read_text().splitlines()
    (i5, w5, c5), (i6, w6, c6) = lines[5].split("\t"), lines[6].split("\t")
    lines[5], lines[6] = f"{i5}\t{w6}\t{c5}", f"{i6}\t{w5}\t{c6}"  # same size, two words swapped
    (tmp_path / "swapped.tsv").write_text("\n".join(lines) + "\n")
    code = main(["translate", *PARAMS, "--checkpoint", str(run / "models/rnnsearch-50/model.pt"), "--src",
                 str(run / "tok/test.en"), "--ref", str(run / "tok/test.fr"), "--src-vocab", str(run / "vocab.en.tsv"),
                 "--tgt-vocab", str(tmp_path / "swapped.tsv"), "--out-dir", str(tmp_path / "tr")])
    err = capsys.readouterr().err
    assert code == 2 and "swapped.tsv: not the tgt vocabulary" in err and "id 5:" in err and "Traceback" not in err
    assert not (tmp_path / "tr").exists() or not any((tmp_path / "tr").iterdir())


def test_figure3_a_is_the_configured_sentence(run: Path, tmp_path: Path, capsys, monkeypatch):
    from rnnsearch.evaluation import plots

    drawn = {}
    monkeypatch.setattr(plots, "alignment_figure", lambda alpha, src, hyp, title, path: drawn.setdefault(path.name, title))
    figures = ["figures", "--scores", str(run / "scores/rnnsearch-50.json"), "--attention",
               str(run / "tr/rnnsearch-50/attention.npz"), "--src", str(run / "tok/test.en"), "--hyp",
               str(run / "tr/rnnsearch-50/test.hyp.tok"), "--nounk", str(run / "tr/rnnsearch-50/nounk.json")]
    (tmp_path / "fig.yaml").write_text("figures: {alignment_sentence: 5}\n")
    assert main([*figures, *PARAMS, "--params", str(tmp_path / "fig.yaml"), "--out-dir", str(tmp_path)]) == 0
    words = len(read_lines(run / "tok/test.en")[4].split())
    assert drawn["alignment_a.png"] == f"(a) RNNsearch-50: test sentence 5, {words} words"
    assert "test sentence 5," not in drawn["alignment_b.png"] and drawn["alignment_long.png"].startswith("(c) RNNsearch-50: test sentence ")  # 1 drawn: (b)
    assert "WARNING" not in capsys.readouterr().err  # every figure as asked: nothing to say

    # A small test set (a user's own corpus) has no sentence as asked: the figures fall back and say so. The
    # tiny test set has 80 sentences of at most 30 words.
    drawn.clear()
    (tmp_path / "fig.yaml").write_text("figures: {alignment_sentence: 81, alignment_min_len: 29, alignment_max_len: "
                                       "30, alignment_samples: 3, long_min_len: 1000}\n")
    assert main([*figures, *PARAMS, "--params", str(tmp_path / "fig.yaml"), "--out-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "'figures.alignment_sentence' 81 is not a line of" in err and "(80 sentences)" in err
    assert "Figure 3 (a) shows sentence 1 instead" in err and drawn["alignment_a.png"].startswith("(a) RNNsearch-50: test sentence 1, ")
    assert "Figure 3 (b…) shows" in err and "sentence(s) of 29-30 words without unknown words" in err
    assert "alignment_long.png shows 1 of other lengths: the test set has 0 sentence(s) of 1000-1000000" in err
    assert sorted(drawn) == ["alignment_a.png", "alignment_b.png", "alignment_c.png", "alignment_d.png",
                             "alignment_long.png"]


def test_figure3_falls_back_to_the_sentences_that_exist():
    from rnnsearch.evaluation.plots import pick_alignment_sentences

    src = ["a b c", "a b c d", "a", "a b c d e f g h", "a b"]
    assert pick_alignment_sentences(src, [0, 1, 2, 3, 4], {0, 1, 2, 3, 4}, 3, 4, 2, 7) == ([0, 1], "")
    chosen, note = pick_alignment_sentences(src, [0, 2, 3], {0, 1, 2, 3, 4}, 3, 4, 2, 7)
    assert chosen == [0, 1] and note.startswith("1 with [UNK]: the test set has 1 sentence(s) of 3-4 words")
    chosen, note = pick_alignment_sentences(src, [0, 1], {0, 2, 3, 4}, 3, 4, 3, 7)
    assert chosen == [0, 2, 4] and note.startswith("2 of other lengths")  # the nearest lengths: 1 and 2 words
    with pytest.raises(InputError, match="the test set is empty"):
        pick_alignment_sentences([], [], set(), 3, 4, 1, 7)


def test_malformed_text_inputs_name_the_file_and_line(run: Path, tmp_path: Path, capsys):
    """Empty files, invalid UTF-8 and misaligned files stop the scorer with the file (and line) named."""
    hyp_dir = tmp_path / "hyps"
    hyp_dir.mkdir()
    score = ["score", *PARAMS, "--model", "rnnsearch-50", "--src", str(run / "tok/test.en"), "--ref-tok",
             str(tmp_path / "ref.tok"), "--ref", str(run / "raw/test.fr"), "--hyp-dir", str(hyp_dir),
             "--out", str(tmp_path / "s.json")]
    for name in ("test.hyp", "test.hyp.tok", "ref.tok"):
        (tmp_path / name if name == "ref.tok" else hyp_dir / name).write_text("")
    assert main(score) == 2
    assert "ref.tok: no sentences to score" in capsys.readouterr().err
    (hyp_dir / "test.hyp.tok").write_bytes(b"le chat\nla maison \xe9t\xe9\n")  # Latin-1, not UTF-8
    (tmp_path / "ref.tok").write_text("le chat\nla maison\n")
    assert main(score) == 2
    err = capsys.readouterr().err
    assert "test.hyp.tok:2: invalid UTF-8 at byte 10 of the line" in err and "Traceback" not in err
    assert not (tmp_path / "s.json").exists()


def test_translate_your_own_sentences(run: Path, tmp_path: Path, capsys, monkeypatch):
    """`rnnsearch translate --checkpoint M`: stdin or a file in, one translation per line out, alignments on request."""
    import io

    sentences = read_lines(run / "raw/test.en")[:3]
    (tmp_path / "in.en").write_text("\n".join(sentences) + "\n")
    ckpt = run / "models/rnnsearch-50/model.pt"
    assert main(["translate", "--checkpoint", str(ckpt), "--input", str(tmp_path / "in.en"), "--beam", "3",
                 "--alignment", "--heatmap-dir", str(tmp_path / "maps")]) == 0
    out = capsys.readouterr()
    assert len(out.out.splitlines()) == 3
    assert "[line 1]" in out.err and "</s>" in out.err and "0 = " in out.err  # the text grid and its legend
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == [f"alignment_{i}.png" for i in (1, 2, 3)]
    # the pipeline's own beam search gives the same translations (same model, same beam)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(sentences) + "\n"))
    assert main(["translate", "--checkpoint", str(ckpt), "--beam", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == read_lines(run / "tr/rnnsearch-50/test.hyp")[:3]
    assert main(["translate", "--checkpoint", str(run / "models/rnnencdec-30/model.pt"), "--input",
                 str(tmp_path / "in.en"), "--alignment"]) == 2
    refused = capsys.readouterr()
    assert "no alignment model" in refused.err and refused.out == ""  # before any translation
    # n-best: Moses-style lines, the best first and equal to the 1-best output, scores not increasing
    assert main(["translate", "--checkpoint", str(ckpt), "--input", str(tmp_path / "in.en"), "--beam", "3",
                 "--n-best", "3", "--no-length-norm"]) == 0
    rows = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for k in range(3):
        scores = [float(r[2]) for r in rows[3 * k : 3 * k + 3]]
        assert scores == sorted(scores, reverse=True)
    assert main(["translate", "--checkpoint", str(ckpt), "--input", str(tmp_path / "in.en"), "--beam", "2",
                 "--n-best", "3"]) == 2
    assert "--n-best 3 needs --beam of at least 3" in capsys.readouterr().err


def test_bench_decode_reports_what_it_measured(run: Path, tmp_path: Path):
    rnnsearch("bench-decode", *PARAMS, "--checkpoint", run / "models/rnnsearch-50/model.pt", "--src",
              run / "tok/test.en", "--src-vocab", run / "vocab.en.tsv", "--beams", "1", "3", "--out", tmp_path / "b.json")
    result = json.loads((tmp_path / "b.json").read_text())
    assert [r["beam"] for r in result["runs"]] == [1, 3]
    assert all(r["sentences"] == 80 and r["sentences_per_s"] > 0 for r in result["runs"])
    assert result["machine"]["threads"] == 1 and result["machine"]["torch"] == __import__("torch").__version__


def test_bench_search_times_fixed_length_searches_of_a_model_size(run: Path, tmp_path: Path):
    """Random weights at the peer's sizes over the tiny test set: every output the references' mean length
    (with </s>), greedy and beam timed in turn, what was measured named."""
    refs = read_lines(run / "tok/test.fr")
    fixed = int(sum(len(r.split()) + 1 for r in refs) / len(refs) + 0.5)
    rnnsearch("bench-search", "--size", "bench", "--arch", "rnnsearch", "--src", run / "tok/test.en", "--ref",
              run / "tok/test.fr", "--beams", 1, 3, "--batch", 40, "--threads", 1, "--device", "cpu",
              "--out", tmp_path / "s.json")
    r = json.loads((tmp_path / "s.json").read_text())
    assert (r["fixed_output_length"], r["sentences"], r["sizes"]["vocab"]) == (fixed, 80, 8000)
    assert [(x["beam"], x["sentences"]) for x in r["runs"]] == [(1, 80), (3, 80)]
    assert all(x["output_words_per_s"] == pytest.approx(x["sentences_per_s"] * fixed, rel=0.01) for x in r["runs"])
    assert r["device"] == "cpu" and r["weights"] == "random (seed 1234)"
    assert main(["bench-search", "--src", str(run / "tok/test.en"), "--ref", str(run / "tok/test.fr"),
                 "--device", "cpu", "--precision", "tf32", "--out", str(tmp_path / "t.json")]) == 2


def test_bench_train_reports_what_it_measured(tmp_path: Path, short_gemm):
    rnnsearch("bench-train", "--arch", "rnnencdec", "--size", "bench", "--batch", 2, "--length", 3, "--steps", 1,
              "--threads", 1, "--out", tmp_path / "t.json")
    result = json.loads((tmp_path / "t.json").read_text())
    from rnnsearch.model import build_model

    sizes = {k: result["sizes"][k] for k in ("m", "n", "n_align", "l")}
    assert result["parameters"] == build_model({"arch": "rnnencdec", **sizes}, 8003, 8003).num_parameters()
    assert (result["batch"], result["length"], result["timed_updates"]) == (2, 3, 1)
    assert result["words_per_s"] == pytest.approx(2 * 2 * 4 / result["seconds_per_update"], rel=0.05)
    assert result["peak_rss_mb"] > 0 and result["device"] == "cpu"


def test_bench_profile_accounts_for_an_updates_time(tmp_path: Path, short_gemm):
    rnnsearch("bench-profile", "--arch", "rnnsearch", "--size", "bench", "--batch", 4, "--length", 6, "--steps", 2,
              "--threads", 1, "--device", "cpu", "--out", tmp_path / "p.json")
    r = json.loads((tmp_path / "p.json").read_text())
    assert r["operations_per_update"] > 100  # embeddings, two encoder directions, 7 decoder steps, backward, Adadelta
    assert 0 < r["gemm_seconds_per_update"] < r["busy_seconds_per_update"] <= r["profiled_seconds_per_update"]
    top = r["top_operations"]  # by own time: an operator's less the operators it calls, so they add up
    assert [op["ms_per_update"] for op in top] == sorted((op["ms_per_update"] for op in top), reverse=True)
    assert 0 < sum(op["ms_per_update"] for op in top) <= 1e3 * r["busy_seconds_per_update"] * 1.01
    assert any(op["name"].startswith("aten::") for op in top) and len({op["name"] for op in top}) == len(top)
    assert 0 < r["floor_arithmetic_seconds"] < r["seconds_per_update"]
    assert r["floor_launch_seconds"] == pytest.approx(r["operations_per_update"] * r["launch_seconds"], rel=0.01)
    events = json.loads(Path(r["trace"]).read_text())["traceEvents"]
    assert any(e.get("name") == "aten::mm" for e in events)


def test_profile_breakdown_of_a_gpu_trace():
    """Kernels, copies and sets are the GPU's work; host-side events are not; GEMM kernels by their cuBLAS names."""
    from rnnsearch.bench.profile import trace_breakdown

    def ev(cat, name, ts, dur):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7}

    trace = {"traceEvents": [ev("cpu_op", "aten::mm", 0, 50), ev("cuda_runtime", "cudaLaunchKernel", 1, 3),
                             ev("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 5, 10),
                             ev("kernel", "nvjet_tst_128x64_64x8_1x2_h_bz_NNT", 15, 4),
                             ev("kernel", "vectorized_elementwise_kernel<4, AddFunctor>", 30, 2),
                             ev("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 40, 6),
                             {"ph": "i", "cat": "kernel", "name": "marker", "ts": 60}]}
    r = trace_breakdown(trace, cuda=True, updates=2)
    assert r["operations_per_update"] == 2.0
    assert r["busy_seconds_per_update"] == pytest.approx(22e-6 / 2)
    assert r["gemm_seconds_per_update"] == pytest.approx(14e-6 / 2)
    assert r["top_operations"][0] == {"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "calls_per_update": 0.5,
                                      "ms_per_update": 0.005}


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_bench_profile_on_cuda_finds_the_kernels_and_the_gemms(tmp_path: Path, precision: str):
    """On the GPU the operations are kernels, and the matrix products among them are recognised by name."""
    rnnsearch("bench-profile", "--arch", "rnnsearch", "--size", "bench", "--batch", 16, "--length", 10, "--steps", 2,
              "--threads", 1, "--device", "cuda", "--precision", precision, "--out", tmp_path / "p.json")
    r = json.loads((tmp_path / "p.json").read_text())
    assert r["device"].startswith("cuda") and r["gpu"] and r["operations_per_update"] > 100
    assert 0 < r["gemm_seconds_per_update"] < r["busy_seconds_per_update"] <= r["profiled_seconds_per_update"]
    assert 0 < r["launch_seconds"] < 1e-3 and 0 < r["floor_arithmetic_seconds"] < r["seconds_per_update"]
