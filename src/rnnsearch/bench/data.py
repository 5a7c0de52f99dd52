"""Benchmark of data preparation on real text: tokenization throughput per core and vocabulary-building memory.

`rnnsearch bench-data` measures, on this machine, in one run, each measurement in a fresh process (so that peak
memory is its own):

* Moses tokenization (sacremoses, as the tokenize stage runs it) of raw text, per language: sentences/s and
  words/s on one core;
* the `--pretokenized` path (undoing Moses' XML escapes: what the LIUM bitexts need) on Moses-tokenized text;
* the memory of building a shortlist: the streaming path (per-shard counts, then a merge of the sorted count
  files) against the baseline of counting the whole text in one Counter, as peak resident memory and as peak
  Python allocations (tracemalloc) of each;

and projects the wall time of tokenizing WMT'14 (the paper's 348M-word LIUM selection and the 850M-word full
set) on 1 and on 32 cores from the measured rates. The projection assumes the quoted word counts per language
side (both sides are tokenized) and perfect scaling over shards, which the shard jobs allow: they share nothing.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import platform
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path

from rnnsearch.data.corpus.local import clean_pairs
from rnnsearch.data.prepare import run_clean, run_filter, run_gather, run_shard
from rnnsearch.data.text import run_tokenize, unescape_pretokenized
from rnnsearch.data.vocab import build_vocab, count_words, merge_counts, run_count, shortlist
from rnnsearch.runtime import cpu_name
from rnnsearch.textio import atomic_path, read_lines, write_json_atomic

WMT14_WORDS = {"lium": 348_000_000, "full": 850_000_000}  # §4.1, per language side (see the module docstring)


def in_fresh_process(fn, *args) -> dict:
    """fn(*args) in a new interpreter (spawned), so that its peak memory is its own."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _tokenize(path: str, lang: str, pretokenized: bool) -> dict:
    from sacremoses import MosesTokenizer

    os.environ["OMP_NUM_THREADS"] = "1"
    lines = read_lines(path)
    tok = MosesTokenizer(lang=lang)
    tok.tokenize(lines[0], escape=False)  # warm-up: sacremoses compiles its patterns on first use
    start = time.perf_counter()
    out = [unescape_pretokenized(x) if pretokenized else tok.tokenize(x, escape=False, return_str=True) for x in lines]
    seconds = time.perf_counter() - start
    words = sum(len(x.split()) for x in lines)
    return {"file": path, "lang": lang, "path": "unescape (--pretokenized)" if pretokenized else "Moses tokenizer",
            "sentences": len(lines), "words_in": words, "tokens_out": sum(len(x.split()) for x in out),
            "seconds": round(seconds, 3), "sentences_per_s": round(len(lines) / seconds, 1),
            "words_per_s": round(words / seconds, 1), "peak_rss_mb": peak_rss_mb()}


def _count_all(paths: list[str]) -> dict:
    """Baseline: the whole text in memory, one Counter."""
    tracemalloc.start()
    lines = [line for p in paths for line in read_lines(p)]
    counts = count_words(lines)
    build_vocab(counts, 30000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"types": len(counts), "peak_python_mb": round(peak / 2**20, 2), "peak_rss_mb": peak_rss_mb()}


def _count_shard(path: str, out: str) -> dict:
    tracemalloc.start()
    stats = run_count(path, out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {**stats, "peak_python_mb": round(peak / 2**20, 2), "peak_rss_mb": peak_rss_mb()}


def _merge(counts: list[str], out: str) -> dict:
    tracemalloc.start()
    vocab, totals = shortlist(merge_counts(counts), 30000)
    vocab.save(out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"types": totals["types"], "peak_python_mb": round(peak / 2**20, 2), "peak_rss_mb": peak_rss_mb()}


def _vocab_memory(paths: list[str], shards: int) -> dict:
    lines = [line for p in paths for line in read_lines(p)]
    with tempfile.TemporaryDirectory() as tmp:
        shard_files = []
        for i in range(shards):
            f = Path(tmp) / f"{i}.txt"
            f.write_text("".join(x + "\n" for x in lines[i::shards]), encoding="utf-8")
            shard_files.append(str(f))
        baseline = in_fresh_process(_count_all, paths)
        counted = [in_fresh_process(_count_shard, f, f + ".counts") for f in shard_files]
        merged = in_fresh_process(_merge, [f + ".counts" for f in shard_files], str(Path(tmp) / "vocab.tsv"))
    worst_count = max(counted, key=lambda c: c["peak_python_mb"])
    if merged["types"] != baseline["types"]:
        raise RuntimeError(f"the merge of shard counts saw {merged['types']} word types, one Counter {baseline['types']}")
    return {"files": paths, "lines": len(lines), "shards": shards, "types": baseline["types"],
            "baseline_one_counter": baseline, "largest_shard_count": worst_count, "merge_of_shard_counts": merged,
            "python_memory_ratio_merge_over_baseline": round(merged["peak_python_mb"] / baseline["peak_python_mb"], 3)}


def _stages(src: str, tgt: str, src_lang: str, tgt_lang: str, shards: int) -> dict:
    """Words/s (both sides) of every other preparation step, run as the pipeline runs them on one raw pair."""
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)

        def timed(name, fn, *args):
            start = time.perf_counter()
            fn(*args)
            rates[name] = time.perf_counter() - start

        def corpus():
            with open(d / "c.src", "w", encoding="utf-8") as fs, open(d / "c.tgt", "w", encoding="utf-8") as ft:
                return clean_pairs(Path(src), Path(tgt), fs, ft, invalid_utf8="drop")

        timed("corpus", corpus)
        outs = [[str(d / f"{i}.{side}") for i in range(shards)] for side in ("src", "tgt")]
        timed("shard", run_shard, str(d / "c.src"), str(d / "c.tgt"), *outs)
        for side, lang in (("src", src_lang), ("tgt", tgt_lang)):
            for i in range(shards):
                run_tokenize(d / f"{i}.{side}", d / f"{i}.tok.{side}", lang, False)
        start = time.perf_counter()
        for i in range(shards):
            run_clean(d / f"{i}.tok.src", d / f"{i}.tok.tgt", d / f"{i}.clean.src", d / f"{i}.clean.tgt", 0, 9.0)
        rates["clean"] = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(shards):
            for side in ("src", "tgt"):
                run_count(d / f"{i}.clean.{side}", str(d / f"{i}.{side}.counts"))
        rates["count"] = time.perf_counter() - start
        start = time.perf_counter()
        for side in ("src", "tgt"):
            run_gather([str(d / f"{i}.clean.{side}") for i in range(shards)], str(d / f"train.{side}"))
        rates["gather"] = time.perf_counter() - start
        timed("filter", run_filter, d / "train.src", d / "train.tgt", d / "f.src", d / "f.tgt", 50)
        words = sum(len(line.split()) for f in (d / "train.src", d / "train.tgt") for line in open(f, encoding="utf-8"))
    return {"files": [src, tgt], "words_both_sides": words,
            "words_per_s": {k: round(words / v, 1) for k, v in rates.items()}, "peak_rss_mb": peak_rss_mb()}


def _projection(words_per_side: int, tokenize_rate: float, stages: list[dict]) -> dict:
    """Hours to prepare a corpus on 1 and 32 cores: the per-shard steps (tokenize, clean, count) divide by the
    cores, the single jobs (corpus, shard, gather, two filters) do not. Downloading and extraction excluded."""
    mean = {k: sum(s["words_per_s"][k] for s in stages) / len(stages) for k in stages[0]["words_per_s"]}
    words = 2 * words_per_side
    parallel = words / tokenize_rate + words / mean["clean"] + words / mean["count"]
    serial = words / mean["corpus"] + words / mean["shard"] + words / mean["gather"] + 2 * words / mean["filter"]
    return {"words_per_side": words_per_side, "tokenize_words_per_s_per_core": round(tokenize_rate, 1),
            "parallel_core_hours": round(parallel / 3600, 3), "serial_hours": round(serial / 3600, 3),
            **{f"hours_{c}_cores": round((serial + parallel / c) / 3600, 3) for c in (1, 32)}}


def run_bench_data(raw: list[tuple[str, str]], pretokenized: list[tuple[str, str]], out: str, md: str,
                   shards: int = 4) -> dict:
    """`raw`, `pretokenized`: (language, path) pairs of real text; consecutive raw entries of different languages
    are also run through the other preparation steps as a pair."""
    runs = [in_fresh_process(_tokenize, path, lang, False) for lang, path in raw]
    runs += [in_fresh_process(_tokenize, path, lang, True) for lang, path in pretokenized]
    vocab = [_vocab_memory([path], shards) for _, path in raw]
    stages = [in_fresh_process(_stages, a, b, la, lb, shards) for (la, a), (lb, b) in zip(raw[::2], raw[1::2])]
    moses = [r for r in runs if r["path"] == "Moses tokenizer"]
    unesc = [r for r in runs if r["path"] != "Moses tokenizer"]
    rate = {"full": sum(r["words_per_s"] for r in moses) / len(moses),
            "lium": sum(r["words_per_s"] for r in unesc) / len(unesc) if unesc else None}
    projection = {sel: _projection(words, rate[sel], stages) for sel, words in WMT14_WORDS.items() if rate[sel]}
    result = {"benchmark": "data", "machine": {"platform": platform.platform(), "processor": cpu_name(),
                                               "cpus": os.cpu_count()},
              "tokenize": runs, "stages": stages, "vocab_memory": vocab, "projection": projection}
    write_json_atomic(out, result)
    with atomic_path(md) as tmp:
        tmp.write_text(_markdown(result), encoding="utf-8")
    return result


def _markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# Data preparation benchmark", "", f"Machine: {m['platform']}, {m['processor']}, {m['cpus']} CPUs; "
             "every figure from one process on one core.", "",
             "| file | lang | path | sentences | words | sentences/s | words/s | peak RSS MB |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for t in r["tokenize"]:
        lines.append(f"| {Path(t['file']).name} | {t['lang']} | {t['path']} | {t['sentences']:,} | {t['words_in']:,} | "
                     f"{t['sentences_per_s']:,.0f} | {t['words_per_s']:,.0f} | {t['peak_rss_mb']} |")
    lines += ["", "Shortlist building (30,000 words), peak Python allocations (tracemalloc) / peak RSS in MB:", "",
              "| text | lines | types | one Counter (baseline) | largest shard count | merge of shard counts | merge / baseline |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for v in r["vocab_memory"]:
        b, c, mg = v["baseline_one_counter"], v["largest_shard_count"], v["merge_of_shard_counts"]
        lines.append(f"| {Path(v['files'][0]).name} ({v['shards']} shards) | {v['lines']:,} | {v['types']:,} | "
                     f"{b['peak_python_mb']} / {b['peak_rss_mb']} | {c['peak_python_mb']} / {c['peak_rss_mb']} | "
                     f"{mg['peak_python_mb']} / {mg['peak_rss_mb']} | {v['python_memory_ratio_merge_over_baseline']} |")
    lines += ["", "Other steps, words/s of both sides on one core:", "",
              "| pair | " + " | ".join(r["stages"][0]["words_per_s"]) + " |",
              "|---|" + "---:|" * len(r["stages"][0]["words_per_s"])]
    for st in r["stages"]:
        lines.append(f"| {Path(st['files'][0]).stem} | " + " | ".join(f"{v:,.0f}" for v in st["words_per_s"].values()) + " |")
    lines += ["", "Projected preparation wall time for WMT'14 from these rates (both sides; tokenize, clean and count "
              "per shard, divided over the cores; corpus, shard, gather and the two filters single jobs; downloads "
              "and extraction not included):", "",
              "| selection | words per side | tokenize words/s per core | 1 core | 32 cores |", "|---|---:|---:|---:|---:|"]
    for sel, p in r["projection"].items():
        lines.append(f"| {sel} | {p['words_per_side']:,} | {p['tokenize_words_per_s_per_core']:,.0f} | "
                     f"{60 * p['hours_1_cores']:,.0f} min | {60 * p['hours_32_cores']:,.1f} min |")
    return "\n".join(lines) + "\n"
