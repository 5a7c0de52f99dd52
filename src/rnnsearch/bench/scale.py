"""Benchmark of the data path at the paper's scale: `rnnsearch bench-scale` (rule `bench_scale`, not in `all`).

For each N (millions of sentence pairs, default 1 and 4) it generates a corpus shaped like the paper's ≤50-word
WMT'14 set (60,000 word types per side with Zipf frequencies, 1 to 50 words a sentence, the target's length near
the source's), then runs every data stage on it as the pipeline does, each job `rnnsearch <stage>` in a process
of its own whose peak resident memory it reports itself (`rnnsearch.bench.peak`): corpus (the local source),
shard (shards of at most 250,000 pairs, as the paper overlay's 64 shards give for 12M pairs), tokenize (the LIUM
selection's path: text that comes Moses-tokenized), clean, gather, filter (≤50), count, vocab (30,000-word
shortlists) and binarize, the per-shard jobs as many at a time as there are cores.

Then training start-up, from process start to the first update (App. A's RNNsearch-50 at a tiny width, the
30,000-word shortlists, batches of 80 from blocks of 20 × 80), with one process and with two under torchrun
(their proportional set sizes, /proc/<pid>/smaps_rollup, summed while both are alive: a shared page counts once),
on the whole ≤50 set and on its first 200 pairs binarized with the same shortlists (the baseline: the same model,
vocabulary and code, no corpus to speak of). The first update itself is timed apart: its activations depend on
its minibatch's shape (80 × 51 × 30,003 logits at most), not on the corpus. Last, a projection to 12M and 36M
pairs, linear in N from the largest run, labelled as such.
"""

from __future__ import annotations

import itertools
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from rnnsearch import config as cfg
from rnnsearch.closure import REPO
from rnnsearch.runtime import cpu_name, proc_mb
from rnnsearch.textio import atomic_path, read_json, write_json_atomic

TYPES, MAX_WORDS, SHARD_PAIRS, BASELINE_PAIRS, BASELINE = 60_000, 50, 250_000, 200, "base200"
PROJECT_TO = (12_000_000, 36_000_000)  # the LIUM selection (§4.1) and about the full set
SETTINGS = {"data": {"src": "en", "tgt": "fr"}, "aer": {"gold": "none"},  # no gold alignments for generated text
            "vocab": {"src_size": 30000, "tgt_size": 30000, "kind": "shortlist"},
            "prepare": {"max_len": 80, "max_ratio": 9.0}, "model": {"m": 16, "n": 16, "n_align": 16, "l": 8},
            "train": {"batch_size": 80, "sort_batches": 20, "max_updates": 1, "threads": 1, "processes": 1}}


def _words(rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` word ids in [0, TYPES) with Zipf (s = 1) frequencies."""
    cdf = np.cumsum(1.0 / np.arange(1, TYPES + 1))
    return np.minimum(np.searchsorted(cdf, rng.random(count) * cdf[-1]), TYPES - 1)


def generate(pairs: int, out: Path, seed: int = 1) -> None:
    """out/{train,dev,test}.{en,fr}: `pairs` training pairs (1 000 dev and test), written 100,000 at a time."""
    rng = np.random.default_rng(seed)
    vocab = {side: np.array([f"{side[0]}{k:x}" for k in range(TYPES)]) for side in ("en", "fr")}
    for split, n in (("train", pairs), ("dev", 1000), ("test", 1000)):
        with open(out / f"{split}.en", "w", encoding="utf-8") as fe, \
                open(out / f"{split}.fr", "w", encoding="utf-8") as ff:
            for start in range(0, n, 100_000):
                k = min(100_000, n - start)
                src_len = rng.integers(1, MAX_WORDS + 1, k)
                lengths = {"en": src_len, "fr": np.clip(src_len + rng.integers(-3, 4, k), 1, MAX_WORDS)}
                for side, f in (("en", fe), ("fr", ff)):
                    words = vocab[side][_words(rng, int(lengths[side].sum()))]
                    cuts = np.cumsum(lengths[side])[:-1]
                    f.write("".join(" ".join(s) + "\n" for s in np.split(words, cuts)))


def _run(jobs: list[list[str]], log: Path, cwd: Path) -> dict:
    """`rnnsearch` jobs (each a stage and its arguments), run in `cwd` as many at a time as there are cores, each
    in a process of its own under `rnnsearch.bench.peak`: wall time and the largest peak RSS of any of them."""
    pending, running, peaks, start = list(enumerate(jobs)), {}, [], time.perf_counter()
    with open(log, "a") as out:
        while pending or running:
            while pending and len(running) < (os.cpu_count() or 1):
                k, job = pending.pop(0)
                peak = cwd / f".peak{k}.json"
                proc = subprocess.Popen([sys.executable, "-m", "rnnsearch.bench.peak", str(peak), *job], stdout=out,
                                        stderr=subprocess.STDOUT, cwd=cwd)
                running[proc.pid] = (proc, peak)
            pid, status = os.wait()
            proc, peak = running.pop(pid)
            if os.waitstatus_to_exitcode(status):
                raise RuntimeError(f"rnnsearch {' '.join(proc.args[4:])} exited with "
                                   f"{os.waitstatus_to_exitcode(status)}; its output is in {log}")
            peaks.append(read_json(peak)["peak_rss_mb"])
            peak.unlink()
    return {"seconds": round(time.perf_counter() - start, 2), "jobs": len(jobs), "peak_rss_mb": max(peaks)}


def _stage_commands(shards: int) -> list[tuple[str, list[list[str]]]]:
    """Every data stage's jobs, in the pipeline's order, as `rnnsearch` stages run in the corpus's folder."""
    ids, langs = [f"{i + 1}-of-{shards}" for i in range(shards)], ("en", "fr")

    def job(stage, *args):
        return [stage, *args] + (["--params", "params.yaml"] if stage not in ("shard", "gather", "count",
                                                                             "filter") else [])

    return [
        ("corpus", [job("corpus", "--out-dir", "raw")]),
        ("shard", [job("shard", "--src", "raw/train.en", "--tgt", "raw/train.fr", "--out-src",
                       *[f"shards/raw/{i}.en" for i in ids], "--out-tgt", *[f"shards/raw/{i}.fr" for i in ids])]),
        ("tokenize", [job("tokenize", "--lang", lang, "--input", f"shards/raw/{i}.{lang}", "--output",
                          f"shards/tok/{i}.{lang}", "--pretokenized") for i in ids for lang in langs]),
        ("clean", [job("clean", "--src", f"shards/tok/{i}.en", "--tgt", f"shards/tok/{i}.fr", "--out-src",
                       f"shards/clean/{i}.en", "--out-tgt", f"shards/clean/{i}.fr", "--stats",
                       f"shards/clean/{i}.json") for i in ids]),
        ("gather", [job("gather", "--inputs", *[f"shards/clean/{i}.{lang}" for i in ids], "--output",
                        f"tok/train.{lang}") for lang in langs]),
        ("filter", [job("filter", "--max-len", "50", "--src", "tok/train.en", "--tgt", "tok/train.fr", "--out-src",
                        "train50.en", "--out-tgt", "train50.fr", "--stats", "train50.json")]),
        ("count", [job("count", "--input", f"shards/clean/{i}.{lang}", "--output",
                       f"shards/counts/{i}.{lang}.counts") for i in ids for lang in langs]),
        ("vocab", [job("vocab", "--src", *[f"shards/counts/{i}.en.counts" for i in ids], "--tgt",
                       *[f"shards/counts/{i}.fr.counts" for i in ids], "--out-src", "vocab.en.tsv", "--out-tgt",
                       "vocab.fr.tsv", "--stats", "vocab.json")]),
        ("binarize", [job("binarize", "--src", f"{name}.en", "--tgt", f"{name}.fr", "--src-vocab", "vocab.en.tsv",
                          "--tgt-vocab", "vocab.fr.tsv", "--out", f"bin/{name}") for name in ("train50",)]),
    ]


def _prepare(pairs: int, w: Path, params: dict) -> dict:
    """Generates the corpus in `w` and runs the data stages there; returns each stage's measurement. Then the
    baseline of the start-up: the first 200 pairs of the ≤50 set, binarized with the same shortlists."""
    for d in ("gen", "raw", "shards/raw", "shards/tok", "shards/clean", "shards/counts", "tok", "bin"):
        (w / d).mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    generate(pairs, w / "gen")
    generated = round(time.perf_counter() - start, 2)
    local = {split: str(w / "gen" / split) for split in ("train", "dev", "test")}
    (w / "params.yaml").write_text(yaml.safe_dump({**params, "data": {**params["data"], "source": "local",
                                                                      "local": local}}))
    shards = math.ceil(pairs / SHARD_PAIRS)
    stages = {name: _run(jobs, w / "stages.log", w) for name, jobs in _stage_commands(shards)}
    for lang in ("en", "fr"):
        with open(w / f"train50.{lang}", encoding="utf-8") as f, open(w / f"{BASELINE}.{lang}", "w") as out:
            out.writelines(itertools.islice(f, BASELINE_PAIRS))
    _run([["binarize", "--src", f"{BASELINE}.en", "--tgt", f"{BASELINE}.fr", "--src-vocab", "vocab.en.tsv",
           "--tgt-vocab", "vocab.fr.tsv", "--out", f"bin/{BASELINE}"]], w / "stages.log", w)
    return {"pairs": pairs, "shards": shards, "generate_seconds": generated, "stages": stages}


def _startup(w: Path, name: str, processes: int) -> dict:
    """Training start-up on the binarized set `name` with `processes` processes: the slowest one's seconds to its
    first update, the largest peak RSS then, and the PSS of all of them summed then (all alive); then the first
    update's own time and peak (its activations: they depend on that minibatch's shape, not on the corpus)."""
    out = w / f"startup-{name}-{processes}"
    driver = ["-m", "rnnsearch.bench.scale", str(w), name, str(out)]
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--standalone", f"--nproc-per-node={processes}"]
    with open(w / "startup.log", "a") as log:
        subprocess.run([sys.executable, *driver] if processes == 1 else [*torchrun, *driver], stdout=log,
                       stderr=subprocess.STDOUT, check=True)
    ranks = [read_json(p) for p in sorted(out.glob("rank*.json"))]
    if len(ranks) != processes:
        raise RuntimeError(f"{len(ranks)} of {processes} training processes reported; see {w / 'startup.log'}")
    return {"processes": processes, "pairs": ranks[0]["pairs"],
            "seconds_to_first_update": max(r["seconds"] for r in ranks),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in ranks),
            "pss_mb_summed": round(sum(r["pss_mb"] for r in ranks), 1),
            "first_update": ranks[0]["first_update"]}


def _process_seconds() -> float:
    """Seconds since this process started (/proc/self/stat's start time against /proc/uptime)."""
    start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    return float(Path("/proc/uptime").read_text().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")


def startup(w: Path, name: str, out: Path) -> None:
    """One training process of `_startup` (under torchrun: one rank): Training of RNNsearch-50 on w's binarized
    set `name` (memory-mapped; "text": the ≤50 set's text, read and encoded in memory) up to its first minibatch,
    measured there; then that update, measured after."""
    import torch

    from rnnsearch.distributed import detect, process_group
    from rnnsearch.training.train import Training, TrainFiles

    params, text = cfg.load_params([w / "params.yaml"]), "train50" if name == "text" else name
    world = detect()
    with process_group(world, torch.device("cpu")):
        training = Training("rnnsearch-50", cfg.model_config(params, "rnnsearch-50"),
                            cfg.train_config(params, "rnnsearch-50"), params["seed"],
                            TrainFiles(str(w / f"{text}.en"), str(w / f"{text}.fr"), str(w / "raw/dev.en"),
                                       str(w / "raw/dev.fr"), str(w / "vocab.en.tsv"), str(w / "vocab.fr.tsv"),
                                       None if name == "text" else str(w / "bin" / name)),
                            out, world, torch.device("cpu"))
        batch = next(iter(training.batches))
        seconds, peak = _process_seconds(), proc_mb("VmHWM")
        world.barrier()  # every process alive and at its first update: the shared pages are shared now
        pss = proc_mb("Pss", "/proc/self/smaps_rollup")
        world.barrier()
        training.step(batch, {})
        update = {"seconds": round(_process_seconds() - seconds, 2), "peak_rss_mb": proc_mb("VmHWM"),
                  "batch": [*batch.x.shape, batch.y_in.shape[1]]}  # B, Tx, Ty
        pairs = len(training.pairs)
        del training  # its DDP, freed with the group (distributed.process_group)
    write_json_atomic(out / f"rank{world.rank}.json", {"seconds": round(seconds, 2), "peak_rss_mb": peak,
                                                       "pss_mb": pss, "pairs": pairs,
                                                       "first_update": update})


def run_bench_scale(millions: list[float], out: str, md: str, work: str | None = None) -> dict:
    """Measures every N of `millions`; writes the JSON and a Markdown table."""
    params = cfg.overlay(cfg.load_params([REPO / "params.yaml"]), SETTINGS, "bench-scale settings")
    work_dir = Path(work or Path(out).parent / "scale-work").resolve()
    runs = []
    for pairs in [round(m * 1_000_000) for m in millions]:
        w = work_dir / f"pairs{pairs}"
        shutil.rmtree(w, ignore_errors=True)
        w.mkdir(parents=True)
        run = _prepare(pairs, w, params)
        run["startup"] = {name: [_startup(w, name, 1), _startup(w, name, 2)] for name in ("train50", BASELINE)}
        run["startup"]["text"] = [_startup(w, "text", 1)]  # the same set read as text: what training did before
        runs.append(run)
        shutil.rmtree(w)
    result = {"benchmark": "scale", "machine": {"platform": platform.platform(), "processor": cpu_name(),
                                                "cpus": os.cpu_count()},
              "settings": SETTINGS, "runs": runs, "goals": goals(runs), "projection": projection(runs[-1])}
    write_json_atomic(out, result)
    with atomic_path(md) as tmp:
        tmp.write_text(markdown(result), encoding="utf-8")
    return result


def goals(runs: list[dict]) -> dict:
    """The goals against what was measured: start-up at the largest N against its 200-pair baseline (same
    shortlists), the two processes' PSS against one's, every stage's peak RSS at every N, and each stage's time
    against linear in N (smallest to largest N)."""
    big, small = runs[-1], runs[0]
    (one, two), (base_one, base_two) = big["startup"]["train50"], big["startup"][BASELINE]
    text = big["startup"]["text"][0]
    linear = {name: round(s["seconds"] / max(small["stages"][name]["seconds"], 0.01) / (big["pairs"] / small["pairs"]),
                          2) for name, s in big["stages"].items()} if len(runs) > 1 else {}
    # a stage of under a second at the smallest N is process start-up and the page cache: not compared
    compared = [name for name in linear if small["stages"][name]["seconds"] >= 1.0]
    over = round(one["peak_rss_mb"] - base_one["peak_rss_mb"], 1)
    stage_peak = max(s["peak_rss_mb"] for r in runs for s in r["stages"].values())
    return {"pairs": big["pairs"], "startup_seconds": one["seconds_to_first_update"],
            "startup_peak_rss_over_baseline_mb": over,
            "text_startup": {"seconds": text["seconds_to_first_update"],
                             "peak_rss_over_baseline_mb": round(text["peak_rss_mb"] - base_one["peak_rss_mb"], 1)},
            "two_processes_pss_over_one": round(two["pss_mb_summed"] / one["pss_mb_summed"], 3),
            "corpus_pss_mb": {"one_process": round(one["pss_mb_summed"] - base_one["pss_mb_summed"], 1),
                              "two_processes": round(two["pss_mb_summed"] - base_two["pss_mb_summed"], 1)},
            "stage_peak_rss_mb_largest": stage_peak, "stage_time_over_linear": linear,
            "stage_time_compared": compared,
            "met": {"startup_at_most_10_s": one["seconds_to_first_update"] <= 10,
                    "rss_within_200_mb_of_baseline": over <= 200,
                    "pss_of_two_at_most_1.3x_one": two["pss_mb_summed"] <= 1.3 * one["pss_mb_summed"],
                    "stage_rss_at_most_1_gb": stage_peak <= 1024,
                    "stage_time_within_1.3x_linear": bool(compared) and all(linear[n] <= 1.3 for n in compared)}}


def projection(run: dict) -> dict:
    """A projection, not a measurement: each stage's time scaled linearly in pairs from `run` (the largest N), on
    this machine's core count; start-up time and memory as the baseline's plus what the corpus added, scaled
    linearly."""
    (one, _), (base, _) = run["startup"]["train50"], run["startup"][BASELINE]

    def scaled(key, p):
        return round(base[key] + (one[key] - base[key]) * p / run["pairs"], 1)

    return {f"{p // 1_000_000}M": {"label": f"projection from the {run['pairs']:,}-pair run, linear in pairs",
                                    "stage_seconds": {n: round(s["seconds"] * p / run["pairs"], 1)
                                                      for n, s in run["stages"].items()},
                                    "startup_seconds": scaled("seconds_to_first_update", p),
                                    "startup_peak_rss_mb": scaled("peak_rss_mb", p)}
            for p in PROJECT_TO}


def markdown(result: dict) -> str:
    runs = result["runs"]
    head = " | ".join(f"{r['pairs']:,} pairs ({r['shards']} shards)" for r in runs)
    lines = [f"Machine: {result['machine']['processor']}, {result['machine']['cpus']} cores.", "",
             f"| stage: seconds, peak RSS (MB) | {head} |", "|---|" + "---:|" * len(runs)]
    for name in runs[0]["stages"]:
        lines.append(f"| {name} | " + " | ".join(f"{r['stages'][name]['seconds']:.1f} s, "
                                                 f"{r['stages'][name]['peak_rss_mb']:.0f}" for r in runs) + " |")
    for name, label in (("train50", "the whole ≤50 set"), (BASELINE, f"its first {BASELINE_PAIRS} pairs")):
        for k, what in ((0, "1 process: s to first update, peak RSS"), (1, "2 processes: s, summed PSS")):
            key = "peak_rss_mb" if k == 0 else "pss_mb_summed"
            lines.append(f"| start-up on {label}, {what} | " + " | ".join(
                f"{r['startup'][name][k]['seconds_to_first_update']:.1f} s, {r['startup'][name][k][key]:.0f}"
                for r in runs) + " |")
    lines.append("| start-up reading the ≤50 set as text (no --binarized), 1 process: s, peak RSS | " + " | ".join(
        f"{r['startup']['text'][0]['seconds_to_first_update']:.1f} s, {r['startup']['text'][0]['peak_rss_mb']:.0f}"
        for r in runs) + " |")
    lines.append("| its first update (1 process): s, peak RSS, batch B × Tx × Ty | " + " | ".join(
        f"{u['seconds']:.1f} s, {u['peak_rss_mb']:.0f}, {' × '.join(map(str, u['batch']))}"
        for u in (r["startup"]["train50"][0]["first_update"] for r in runs)) + " |")
    g = result["goals"]
    lines += ["", f"At {g['pairs']:,} pairs: start-up {g['startup_seconds']} s; peak RSS "
              f"{g['startup_peak_rss_over_baseline_mb']:+} MB against its first {BASELINE_PAIRS} pairs (reading "
              f"the text: {g['text_startup']['seconds']} s, {g['text_startup']['peak_rss_over_baseline_mb']:+} MB); "
              f"two processes' PSS {g['two_processes_pss_over_one']}× one's (the corpus's share: "
              f"{g['corpus_pss_mb']['one_process']} MB in one process, {g['corpus_pss_mb']['two_processes']} MB in "
              f"two); largest stage peak RSS {g['stage_peak_rss_mb_largest']} MB; stage time over linear: "
              + (", ".join(f"{k} {v}" for k, v in g["stage_time_over_linear"].items()) or "one N only")
              + " (compared: the stages of a second or more at the smallest N, "
              + ", ".join(g["stage_time_compared"]) + ").",
              "Goals met: " + ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in g["met"].items()) + ".", ""]
    for p, proj in result["projection"].items():
        lines.append(f"- {p} pairs ({proj['label']}): start-up {proj['startup_seconds']} s, peak RSS "
                     f"{proj['startup_peak_rss_mb']:,} MB; "
                     + ", ".join(f"{k} {v:,} s" for k, v in proj["stage_seconds"].items()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # one training process of the start-up measurement (see `startup`)
    startup(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
