"""Benchmark of the data path at the paper's scale: `rnnsearch bench-scale` (rule `bench_scale`, not in `all`).

For each N (millions of sentence pairs, default 1 and 4) and for a 200-pair baseline, it generates a corpus shaped
like the paper's ≤50-word WMT'14 set (60,000 word types per side with Zipf frequencies, 1 to 50 words a
sentence, the target's length near the source's), then runs every data stage on it as the pipeline does, by its
command (`rnnsearch <stage>`), each job a process of its own whose peak resident memory is read from `os.wait4`:
corpus (the local source), shard (shards of at most 250,000 pairs, as the paper overlay's 64 shards give for 12M
pairs), tokenize (the LIUM selection's path: text that comes Moses-tokenized), clean, gather, filter (≤50), count,
vocab (30,000-word shortlists) and binarize, the per-shard jobs as many at a time as there are cores. Then
training start-up: process start to the end of the first update (App. A's RNNsearch-50 at its sizes' tiny
version, 30,000-word shortlists, batches of 80 from blocks of 20 × 80), one process, and two under torchrun, whose
proportional set sizes (PSS, /proc/<pid>/smaps_rollup: a shared page counts once in the sum) are summed while
both are alive. Last, a projection of each stage's time to 12M and 36M pairs (linear in N from the largest run),
labelled as such.
"""

from __future__ import annotations

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

from rnnsearch.bench.data import cpu_name
from rnnsearch.textio import atomic_path, read_json, write_json_atomic

TYPES, MAX_WORDS, SHARD_PAIRS, BASELINE_PAIRS = 60_000, 50, 250_000, 200
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


def _run(cmds: list[list[str]], log: Path, cwd: Path) -> dict:
    """The commands, run in `cwd` as many at a time as there are cores: wall time and the largest peak RSS of any
    of them."""
    pending, running, peak, start = list(cmds), {}, 0.0, time.perf_counter()
    with open(log, "a") as out:
        while pending or running:
            while pending and len(running) < (os.cpu_count() or 1):
                proc = subprocess.Popen(pending.pop(0), stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
                running[proc.pid] = proc
            pid, status, usage = os.wait4(-1, 0)
            proc = running.pop(pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode:
                raise RuntimeError(f"{' '.join(proc.args)} exited with {proc.returncode}; its output is in {log}")
            peak = max(peak, usage.ru_maxrss / 1024)
    return {"seconds": round(time.perf_counter() - start, 2), "jobs": len(cmds), "peak_rss_mb": round(peak, 1)}


def _stage_commands(shards: int) -> list[tuple[str, list[list[str]]]]:
    """Every data stage's jobs, in the pipeline's order, as `rnnsearch` commands run in the corpus's folder."""
    cli = [sys.executable, "-m", "rnnsearch.cli"]
    ids, langs = [f"{i + 1}-of-{shards}" for i in range(shards)], ("en", "fr")

    def job(stage, *args):
        takes_params = stage not in ("shard", "gather", "count", "filter")
        return [*cli, stage, *args] + (["--params", "params.yaml"] if takes_params else [])

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
        ("count", [job("count", "--input", f"shards/clean/{i}.{lang}", "--output", f"shards/counts/{i}.{lang}")
                   for i in ids for lang in langs]),
        ("vocab", [job("vocab", "--src", *[f"shards/counts/{i}.en" for i in ids], "--tgt",
                       *[f"shards/counts/{i}.fr" for i in ids], "--out-src", "vocab.en.tsv", "--out-tgt",
                       "vocab.fr.tsv", "--stats", "vocab.json")]),
        ("binarize", [job("binarize", "--src", "train50.en", "--tgt", "train50.fr", "--src-vocab", "vocab.en.tsv",
                          "--tgt-vocab", "vocab.fr.tsv", "--out", "bin/train50")]),
    ]


def _prepare(pairs: int, w: Path, params: dict) -> dict:
    """Generates the corpus in `w` and runs the data stages there; returns each stage's measurement."""
    for d in ("gen", "raw", "shards/raw", "shards/tok", "shards/clean", "shards/counts", "tok", "bin"):
        (w / d).mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    generate(pairs, w / "gen")
    generated = round(time.perf_counter() - start, 2)
    local = {split: str(w / "gen" / split) for split in ("train", "dev", "test")}
    (w / "params.yaml").write_text(yaml.safe_dump({**params, "data": {**params["data"], "source": "local",
                                                                      "local": local}}))
    shards = math.ceil(pairs / SHARD_PAIRS)
    stages = {name: _run(cmds, w / "stages.log", w) for name, cmds in _stage_commands(shards)}
    return {"pairs": pairs, "shards": shards, "generate_seconds": generated, "stages": stages}


def _startup_commands(w: Path, processes: int) -> list[str]:
    driver = ["-m", "rnnsearch.bench.scale", str(w), str(w / f"startup{processes}")]
    if processes == 1:
        return [sys.executable, *driver]
    torchrun = Path(sys.executable).with_name("torchrun")
    return [str(torchrun), "--standalone", f"--nproc-per-node={processes}", *driver]


def _startup(w: Path, processes: int) -> dict:
    """Training start-up with `processes` processes: the slowest one's seconds to its first update, the largest
    peak RSS, and the PSS of all of them summed while all were alive."""
    _run([_startup_commands(w, processes)], w / "startup.log", w)
    ranks = [read_json(p) for p in sorted((w / f"startup{processes}").glob("rank*.json"))]
    if len(ranks) != processes:
        raise RuntimeError(f"{len(ranks)} of {processes} training processes reported; see {w / 'startup.log'}")
    return {"processes": processes, "seconds_to_first_update": max(r["seconds"] for r in ranks),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in ranks),
            "pss_mb_summed": round(sum(r["pss_mb"] for r in ranks), 1),
            "pairs": ranks[0]["pairs"]}


def _proc_mb(path: str, field: str) -> float:
    """A 'Field:  N kB' line of a /proc file, in MB."""
    for line in Path(path).read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"{path}: no {field}")


def _process_seconds() -> float:
    """Seconds since this process started (/proc/self/stat's start time against /proc/uptime)."""
    start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    return float(Path("/proc/uptime").read_text().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")


def startup(w: Path, out: Path) -> None:
    """One training process of `_startup` (under torchrun: one rank): Training on w's binarized ≤50 set, one
    update, then its measurements into out/rank<r>.json."""
    import torch

    from rnnsearch import config as cfg
    from rnnsearch.distributed import detect, process_group
    from rnnsearch.training.train import Training

    params = cfg.load_params([w / "params.yaml"])
    world = detect()
    with process_group(world, torch.device("cpu")):
        training = Training("rnnsearch-50", cfg.model_config(params, "rnnsearch-50"),
                            cfg.train_config(params, "rnnsearch-50"), params["seed"],
                            (str(w / "train50.en"), str(w / "train50.fr")),
                            (str(w / "raw/dev.en"), str(w / "raw/dev.fr")),
                            (str(w / "vocab.en.tsv"), str(w / "vocab.fr.tsv")), out, world, torch.device("cpu"),
                            binarized=str(w / "bin/train50"))
        training.step(next(iter(training.batches)), {})
        seconds = _process_seconds()
        world.barrier()  # every process alive and done with its first update: the shared pages are shared now
        pss = _proc_mb("/proc/self/smaps_rollup", "Pss")
        world.barrier()
    write_json_atomic(out / f"rank{world.rank}.json", {"seconds": round(seconds, 2), "pss_mb": pss,
                                                       "pairs": len(training.pairs),
                                                       "peak_rss_mb": _proc_mb("/proc/self/status", "VmHWM")})


def run_bench_scale(millions: list[float], out_json: str, out_md: str, work: str | None = None) -> dict:
    """Measures every N of `millions` and the 200-pair baseline; writes the JSON and a Markdown table."""
    from rnnsearch import config as cfg
    from rnnsearch.closure import REPO

    params = cfg.overlay(cfg.load_params([REPO / "params.yaml"]), SETTINGS, "bench-scale settings")
    work_dir = Path(work or Path(out_json).parent / "scale-work").resolve()
    runs = []
    for pairs in [BASELINE_PAIRS] + [round(m * 1_000_000) for m in millions]:
        w = work_dir / f"pairs{pairs}"
        shutil.rmtree(w, ignore_errors=True)
        w.mkdir(parents=True)
        run = _prepare(pairs, w, params)
        run["startup"] = [_startup(w, 1), _startup(w, 2)]
        runs.append(run)
        shutil.rmtree(w)
    result = {"benchmark": "scale", "machine": {"platform": platform.platform(), "processor": cpu_name(),
                                                "cpus": os.cpu_count()},
              "settings": SETTINGS, "runs": runs, "goals": goals(runs), "projection": projection(runs[-1])}
    write_json_atomic(out_json, result)
    with atomic_path(out_md) as tmp:
        tmp.write_text(markdown(result), encoding="utf-8")
    return result


def goals(runs: list[dict]) -> dict:
    """The issue's goals against what was measured: start-up at the largest N, memory against the baseline, the
    two processes' PSS, every stage's peak RSS and its time against linear in N (smallest to largest N > 200)."""
    base, big = runs[0], runs[-1]
    one, two = big["startup"]
    small = runs[1] if len(runs) > 2 else None
    linear = {name: round(s["seconds"] / small["stages"][name]["seconds"] / (big["pairs"] / small["pairs"]), 2)
              for name, s in big["stages"].items()} if small else {}
    return {"pairs": big["pairs"],
            "startup_seconds": one["seconds_to_first_update"],
            "startup_peak_rss_over_baseline_mb": round(one["peak_rss_mb"] - base["startup"][0]["peak_rss_mb"], 1),
            "two_processes_pss_over_one": round(two["pss_mb_summed"] / one["pss_mb_summed"], 3),
            "stage_peak_rss_mb_largest": max(s["peak_rss_mb"] for r in runs for s in r["stages"].values()),
            "stage_time_over_linear": linear,
            "met": {"startup_at_most_10_s": one["seconds_to_first_update"] <= 10,
                    "rss_within_200_mb_of_baseline": one["peak_rss_mb"] - base["startup"][0]["peak_rss_mb"] <= 200,
                    "pss_of_two_at_most_1.3x_one": two["pss_mb_summed"] <= 1.3 * one["pss_mb_summed"],
                    "stage_rss_at_most_1_gb": all(s["peak_rss_mb"] <= 1024 for r in runs for s in r["stages"].values()),
                    "stage_time_within_1.3x_linear": bool(linear) and all(v <= 1.3 for v in linear.values())}}


def projection(run: dict) -> dict:
    """A projection, not a measurement: each stage's time scaled linearly in pairs from `run` (the largest N), on
    this machine's core count; peak memory as measured (it does not grow with N where the goals hold)."""
    return {f"{p // 1_000_000}M": {"label": f"projection from the {run['pairs']:,}-pair run, linear in pairs",
                                    "stage_seconds": {n: round(s["seconds"] * p / run["pairs"], 1)
                                                      for n, s in run["stages"].items()},
                                    "startup_seconds_if_linear": round(run["startup"][0]["seconds_to_first_update"]
                                                                       * p / run["pairs"], 1)}
            for p in PROJECT_TO}


def markdown(result: dict) -> str:
    runs = result["runs"]
    head = " | ".join(f"{r['pairs']:,} pairs ({r['shards']} shards)" for r in runs)
    lines = [f"Machine: {result['machine']['processor']}, {result['machine']['cpus']} cores.", "",
             f"| stage: seconds, peak RSS (MB) | {head} |", "|---|" + "---:|" * len(runs)]
    for name in runs[0]["stages"]:
        lines.append(f"| {name} | " + " | ".join(f"{r['stages'][name]['seconds']:.1f} s, "
                                                 f"{r['stages'][name]['peak_rss_mb']:.0f}" for r in runs) + " |")
    for k, label in ((0, "training start-up, 1 process: s to first update, peak RSS"),
                     (1, "training start-up, 2 processes (torchrun): s, summed PSS")):
        key = "peak_rss_mb" if k == 0 else "pss_mb_summed"
        lines.append(f"| {label} | " + " | ".join(f"{r['startup'][k]['seconds_to_first_update']:.1f} s, "
                                                  f"{r['startup'][k][key]:.0f}" for r in runs) + " |")
    g = result["goals"]
    lines += ["", f"At {g['pairs']:,} pairs: start-up {g['startup_seconds']} s, peak RSS "
              f"{g['startup_peak_rss_over_baseline_mb']:+} MB against the {BASELINE_PAIRS}-pair run, two processes' "
              f"PSS {g['two_processes_pss_over_one']}× one's; largest stage peak RSS "
              f"{g['stage_peak_rss_mb_largest']} MB; "
              "stage time over linear: " + ", ".join(f"{k} {v}" for k, v in g["stage_time_over_linear"].items()) + ".",
              "Goals met: " + ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in g["met"].items()) + "."]
    for p, proj in result["projection"].items():
        lines.append(f"- {p} pairs ({proj['label']}): "
                     + ", ".join(f"{k} {v:,} s" for k, v in proj["stage_seconds"].items()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # one training process of the start-up measurement (see `startup`)
    startup(Path(sys.argv[1]), Path(sys.argv[2]))
