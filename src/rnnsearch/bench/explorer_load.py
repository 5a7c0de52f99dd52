"""Benchmark: the explorer page at the paper's scale. A generated test set shaped like newstest2014 (3,003
sentences by default; source lengths from a gamma distribution of mean 27 words, 1 to 100; Zipf words from a
vocabulary of 30,000) and the paper's five models, RNNsearch-30, -50 and -50* with attention matrices (a peak
moving along the diagonal with noise, as trained models give), go through the explorer stage's own code
(`run_explorer`). Measured: the time to build the page, its size, and in headless Chromium (where installed) the
time from navigation to the page being ready with the longest sentence and its heatmaps shown, from the page's own
`performance.now()`, the median of `loads`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from rnnsearch.evaluation.explorer import TestText, run_explorer
from rnnsearch.runtime import cpu_name
from rnnsearch.textio import write_json_atomic

MODELS = {"rnnencdec-30": False, "rnnsearch-30": True, "rnnencdec-50": False, "rnnsearch-50": True,
          "rnnsearch-50-star": True}


def _words(rng, n: int, vocab: int = 30_000) -> list[str]:
    ranks = np.minimum(rng.zipf(1.3, n), vocab)
    return [f"w{r}" for r in ranks]


def _attention(rng, rows: int, cols: int) -> np.ndarray:
    """A row-stochastic α whose peak follows the diagonal, sharpened like a trained model's."""
    centre = (np.arange(rows)[:, None] + 0.5) * cols / rows
    logits = -((np.arange(cols)[None, :] - centre) ** 2) / 2.0 + rng.normal(0, 1.0, (rows, cols))
    alpha = np.exp(logits - logits.max(1, keepdims=True))
    return (alpha / alpha.sum(1, keepdims=True)).astype(np.float16)


def generate(d: Path, sentences: int, seed: int) -> list[str]:
    """The explorer's inputs in `d`; returns run_explorer's arguments."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.gamma(3.0, 9.0, sentences)), 1, 100).astype(int)
    src = [" ".join(_words(rng, n)) for n in lengths]
    ref = [" ".join(_words(rng, max(1, int(n * 1.1)))) for n in lengths]
    for name, lines in (("test.en", src), ("test.fr", ref)):
        (d / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    (d / "vocab.fr.tsv").write_text("".join(f"{i}\tw{i}\t{max(1, 10**7 // i)}\n" for i in range(1, 30_001)))
    rows, scores = [], []
    for model, attention in MODELS.items():
        folder = d / model
        folder.mkdir()
        hyps = [" ".join(_words(rng, max(1, int(n * rng.uniform(0.8, 1.2))))) for n in lengths]
        for name in ("test.hyp", "test.hyp.tok"):
            (folder / name).write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        alphas = {str(i): _attention(rng, len(h.split()) + 1, n + 1) for i, (h, n) in enumerate(zip(hyps, lengths))}
        np.savez(folder / "attention.npz", **(alphas if attention else {}))
        buckets = [{"bucket": f"{lo}-{lo + 9}", "lo": lo, "hi": lo + 9} for lo in range(1, 61, 10)]
        buckets.append({"bucket": "61+", "lo": 61, "hi": None})
        (d / f"{model}.json").write_text(json.dumps({"model": model, "arch": model.split("-")[0],
                                                     "by_length": buckets}))
        scores.append(str(d / f"{model}.json"))
        rows += [{"model": model, "replicate": 1, "bucket": b["bucket"], "bleu": rng.uniform(5, 40)} for b in buckets]
    pd.DataFrame(rows).to_csv(d / "bleu_by_length.csv", index=False)
    return scores


def _load_ms(chrome: str, page: Path, line: int) -> int:
    """Navigation to ready, in ms (the page's `data-ready-ms`), with sentence `line` and its heatmaps shown."""
    dom = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=60000",
                          "--dump-dom", f"{page.as_uri()}#s={line}"], capture_output=True, text=True, timeout=300).stdout
    found = re.search(r'<body[^>]*data-ready-ms="(\d+)"', dom)
    if not found:
        raise RuntimeError(f"the page did not get ready in Chromium: {dom[:300]!r}")
    return int(found.group(1))


def run_bench_explorer(sentences: int, loads: int, seed: int, out: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        scores = generate(d, sentences, seed)
        page = d / "explorer.html"
        start = time.perf_counter()
        test = TestText(str(d / "test.en"), str(d / "test.fr"), str(d / "test.en"), str(d / "test.fr"))
        run_explorer(scores, {m: str(d / m) for m in MODELS}, test, str(d / "vocab.fr.tsv"),
                     str(d / "bleu_by_length.csv"), str(page))
        build = time.perf_counter() - start
        lengths = [len(s.split()) for s in (d / "test.en").read_text(encoding="utf-8").splitlines()]
        chrome = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
        times = [_load_ms(chrome, page, lengths.index(max(lengths)) + 1) for _ in range(loads)] if chrome else []
        result = {"benchmark": "explorer", "sentences": sentences, "models": list(MODELS),
                  "attention_models": sum(MODELS.values()), "longest_sentence": max(lengths),
                  "mean_length": round(float(np.mean(lengths)), 1), "page_bytes": page.stat().st_size,
                  "page_mb": round(page.stat().st_size / 2**20, 2), "build_seconds": round(build, 2),
                  "load_ms": times, "load_ms_median": float(np.median(times)) if times else None,
                  "browser": subprocess.run([chrome, "--version"], capture_output=True, text=True).stdout.strip()
                  if chrome else "none (no chromium here: load time not measured)",
                  "machine": {"processor": cpu_name()}, "goals": {"page_mb": 10, "load_ms": 2000}}
    write_json_atomic(out, result)
    return result
