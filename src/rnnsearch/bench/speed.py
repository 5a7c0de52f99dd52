"""Benchmarks that report what they measured, where, and with which settings (never part of `snakemake all`).

`rnnsearch bench-decode`: greedy and beam-search decoding speed of a trained model on a tokenized test set,
measured in one run, each setting after a short warm-up, so the ratio beam/greedy is from the same conditions.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import tempfile
import time
from dataclasses import astuple, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from rnnsearch.bench.data import in_fresh_process, peak_rss_mb
from rnnsearch.bench.flops import train_flops
from rnnsearch.bench.graph_check import difference_from_eager, graphed_update
from rnnsearch.checkpoint import load_model
from rnnsearch.data.batching import make_batch
from rnnsearch.data.vocab import Vocab
from rnnsearch.decoding.search import translate_ids
from rnnsearch.model import build_model, triton_kernels
from rnnsearch.runtime import cpu_name, keep_freed_memory, resolve_device
from rnnsearch.settings import DecodeConfig
from rnnsearch.textio import InputError, atomic_path, read_lines, write_json_atomic
from rnnsearch.training.graphs import unavailable, update
from rnnsearch.training.optimizers import make_optimizer

log = logging.getLogger("rnnsearch.bench")


def machine() -> dict:
    return {"platform": platform.platform(), "processor": cpu_name(),
            "cpus": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads()}


@dataclass(frozen=True)
class Setup:
    """A benchmark's model and where it runs: the preset `arch` at `size` (paper: App. A; bench: the peer's),
    minibatches of `batch` pairs, torch `threads`, `device` (auto: CUDA where there is a GPU), the `seed` of the
    weights and batches, and `precision` (fp32; tf32: CUDA's TF32 tensor cores; bf16: autocast)."""

    arch: str = "rnnsearch"
    size: str = "paper"
    batch: int = 80
    threads: int = 1
    device: str = "auto"
    seed: int = 1234
    precision: str = "fp32"


def run_bench_decode(checkpoint: str, src: str, src_vocab: str, beams: list[int], decode: DecodeConfig,
                     out: str) -> dict:
    """Greedy and beam decoding speed of a trained model on the tokenized sentences `src`, with `decode`'s batch
    size, output limits and threads."""
    src_tok, batch_size, max_len_a, max_len_b = src, decode.batch_size, decode.max_len_a, decode.max_len_b
    threads = decode.threads
    torch.set_num_threads(threads)
    model, config = load_model(checkpoint)
    sv = Vocab.load(src_vocab)
    src = [sv.encode(s.split()) for s in read_lines(src_tok)]
    runs = []
    for beam in beams:
        opts = dict(beam=beam, batch_size=batch_size, max_len_a=max_len_a, max_len_b=max_len_b)
        translate_ids(model, src[:batch_size], **opts)  # warm-up: allocator, thread pool
        start = time.perf_counter()
        hyps = translate_ids(model, src, **opts)
        seconds = time.perf_counter() - start
        words = sum(len(h.tokens) for h in hyps)
        runs.append({"beam": beam, "batch_size": batch_size, "sentences": len(src), "seconds": round(seconds, 3),
                     "sentences_per_s": round(len(src) / seconds, 2), "output_words_per_s": round(words / seconds, 1),
                     "mean_output_length": round(words / len(src), 2)})
        log.info("%s beam %d: %.1f sentences/s, %.0f output words/s", config["name"], beam,
                 runs[-1]["sentences_per_s"], runs[-1]["output_words_per_s"])
    result = {"benchmark": "decode", "model": config["name"], "arch": config["model"]["arch"],
              "sizes": {k: config["model"][k] for k in ("m", "n", "n_align", "l")}, "test_set": src_tok,
              "machine": machine(), "runs": runs}
    write_json_atomic(out, result)
    return result


# Model sizes of the training benchmark: the paper's (App. A) and the peer benchmark's (JoeyNMT's, `bench.peer`).
TRAIN_SIZES = {
    "paper": {"m": 620, "n": 1000, "n_align": 1000, "l": 500, "vocab": 30000},
    "bench": {"m": 256, "n": 512, "n_align": 512, "l": 256, "vocab": 8000},
    "embedded": {"m": 64, "n": 96, "n_align": 96, "l": 64, "vocab": 1000},  # params.yaml's model and shortlists
}


def synchronizer(device_type: str):
    """What waits for the device's queued work before a clock is read: torch.cuda.synchronize on a GPU, nothing on
    the CPU (its operators return when done)."""
    return torch.cuda.synchronize if device_type == "cuda" else (lambda: None)


PRECISIONS = ("fp32", "tf32", "bf16")  # of the training benchmark: fp32, fp32 with TF32 products (CUDA), bf16 autocast


def gemm_size(device: str) -> int:
    """The operands' size of the GEMM rate: 2048 on the CPU (the peer benchmark's), 4096 on a GPU, whose 2048³
    product (a few microseconds) stays well below its rate."""
    return 4096 if device == "cuda" else 2048


def gemm_peak_gflops(threads: int, seconds: float | None = None, size: int | None = None, device: str = "cpu",
                     precision: str = "fp32") -> float:
    """Best GEMM GFLOP/s of torch.matmul on size³ (default `gemm_size`) with `threads` threads (on the CPU), over
    `seconds` (default 2 on the CPU, 1 on a GPU, whose rate varies less) of rounds of at least 0.1 s each (the
    method of the peer benchmark's gemm_peak.py): the denominator of utilisation. The operands are float32
    (`fp32`, and `tf32` with TF32 products allowed) or bfloat16 (`bf16`)."""
    size, seconds = size or gemm_size(device), seconds or (1.0 if device == "cuda" else 2.0)
    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    out = torch.empty(size, size, device=device, dtype=dtype)
    sync = synchronizer(device)

    def seconds_of(reps: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b, out=out)
        sync()
        return time.perf_counter() - start

    seconds_of(1)  # warm-up
    reps = 1
    while seconds_of(reps) <= 0.1:
        reps *= 2
    best, end, rounds = 0.0, time.perf_counter() + seconds, 0
    while time.perf_counter() < end or rounds < 5:
        best = max(best, 2.0 * size**3 * reps / seconds_of(reps) / 1e9)
        rounds += 1
    return round(best, 1)


def run_bench_train(setup: Setup, length: int, steps: int, out: str, graph: bool = False, gemm: bool = True) -> dict:
    """Training speed and memory of one model for batches of `batch` sentence pairs of `length` words each side.

    Random word ids (uniform over the shortlist; speed does not depend on the words), two untimed warm-up
    updates (the allocator grows and the optimizer creates its state in the first two), then `steps` timed
    updates: forward, backward, clipping, Adadelta step. Words/s counts source and target words (</s> included).
    Utilisation: the closed-form training FLOPs (rnnsearch.bench.flops, no padding here) per second, divided by the best
    GEMM rate (operands of `gemm_size`) at the same precision measured in the same process just before and just
    after. `precision`: fp32; tf32 (CUDA: float32 products on TF32 tensor cores); bf16 (the forward pass under bf16 autocast, the
    backward outside it, as `train.precision: bf16` trains). `graph` (CUDA): the update captured in a CUDA graph
    and replayed (training/graphs.py), its parameters after one replay compared with the eager update's. Run one
    configuration per process: peak RSS is the process's.
    """
    arch, size, batch, threads, device_name, seed, precision = astuple(setup)
    model, optimizer, b, K = bench_update_setup(arch, size, batch, length, threads, device_name, seed, precision,
                                                graph)
    device = b.x.device
    gemm_before = gemm_peak_gflops(threads, device=device.type, precision=precision) if gemm else None
    warmup, what, bf16 = 2, f"{arch} {size} {precision}{' graph' if graph else ''}", precision == "bf16"
    graphed = {}
    if graph:
        replay = graphed_update(model, optimizer, b, bf16)
        graphed = difference_from_eager(replay)
        log.info("%s: one replay against the eager update: %s", what, ", ".join(f"{k} {v:.3g}" for k, v in
                                                                                   graphed.items()))
        times = _timed(replay.replay, warmup, steps, what, synchronizer(device.type))
    else:
        times = _timed_updates(model, optimizer, b, warmup, steps, what, bf16)
    seconds = sum(times) / len(times)
    words = b.source_words + b.target_words
    flops = batch * train_flops(model.cfg, K, length + 1, length + 1)
    gemm = max(gemm_before, gemm_peak_gflops(threads, device=device.type, precision=precision)) if gemm_before else None
    result = {"benchmark": "train", "arch": arch, "size": size, "precision": precision, "cuda_graph": graph,
              **graphed, "sizes": TRAIN_SIZES[size], "gemm_operand_size": gemm_size(device.type),
              "parameters": model.num_parameters(),
              "batch": batch, "length": length, "warmup_updates": warmup, "timed_updates": steps, "seconds_per_update": round(seconds, 3),
              "words_per_s": round(words / seconds, 1), "sentences_per_s": round(batch / seconds, 2),
              "target_words_per_s": round(b.target_words / seconds, 1),
              "train_gflop_per_update": round(flops / 1e9, 3), "mflop_per_target_word": round(flops / b.target_words / 1e6, 2),
              "gflops_per_s": round(flops / seconds / 1e9, 2), "gemm_peak_gflops": gemm,
              "utilisation": round(flops / seconds / 1e9 / gemm, 4) if gemm else None,
              "peak_rss_mb": peak_rss_mb(), "device": str(device), "machine": machine(),
              "triton_kernels": triton_kernels.usable(torch.empty(0, device=device))}
    if device.type == "cuda":
        result.update(peak_cuda_mb=round(torch.cuda.max_memory_allocated() / 2**20, 1),
                      gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda)
    log.info("%s %s: %s parameters, %.2f s/update, %.0f words/s, %.1f GFLOP/s (GEMM peak %s, utilisation %s), "
             "peak RSS %.0f MB", arch, size, f"{result['parameters']:,}", seconds, result["words_per_s"],
             result["gflops_per_s"], gemm, result["utilisation"], result["peak_rss_mb"])
    write_json_atomic(out, result)
    return result


def set_tf32(device: torch.device, precision: str) -> None:
    """CUDA's TF32 switches on for precision tf32 and off otherwise; tf32 elsewhere than on CUDA is an error (the
    switches change no product on the CPU)."""
    if precision == "tf32" and device.type != "cuda":
        raise InputError("precision tf32 is a CUDA setting (TF32 tensor cores); this run is on the CPU")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"


def bench_update_setup(arch: str, size: str, batch: int, length: int, threads: int, device_name: str, seed: int,
                       precision: str, capturable: bool = False, overrides: dict | None = None):
    """The training benchmarks' model (`size` of TRAIN_SIZES and the preset's `overrides`, on the device, in
    training mode), its Adadelta, and one batch of `batch` random pairs of `length` words each side (uniform over
    the shortlist, </s> added); returns (model, optimizer, batch, K). Sets the threads, the seed and the
    precision's TF32 switches."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    keep_freed_memory()  # as every stage does (cli.main); this also runs in a spawned process
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    device = resolve_device(device_name, "--device")
    set_tf32(device, precision)
    sizes = TRAIN_SIZES[size]
    K = sizes["vocab"] + 3  # the shortlist plus <pad>, </s>, [UNK]
    model = build_model({"arch": arch, **sizes, **(overrides or {})}, K, K).to(device).train()
    reason = unavailable(model, device) if capturable else None
    if reason:
        raise InputError(f"--graph: {reason}")
    optimizer = make_optimizer(model.parameters(), "adadelta", lr=1.0, rho=0.95, eps=1e-6, capturable=capturable)
    g = torch.Generator().manual_seed(seed)
    sents = [torch.randint(3, K, (length,), generator=g).tolist() + [1] for _ in range(2 * batch)]
    return model, optimizer, make_batch(sents[:batch], sents[batch:], list(range(batch))).to(device), K


def _timed_updates(model, optimizer, b, warmup: int, steps: int, what: str, bf16: bool = False) -> list[float]:
    """Seconds of each of `steps` updates on batch `b` after `warmup` untimed ones (App. B.2's update: forward,
    backward, clipping at 1, optimizer step); with `bf16`, the forward pass under bf16 autocast."""
    def one():
        optimizer.zero_grad(set_to_none=True)
        update(model, optimizer, b, bf16)

    return _timed(one, warmup, steps, what, synchronizer(b.x.device.type))


def _timed(run, warmup: int, steps: int, what: str, sync) -> list[float]:
    """Seconds of each of `steps` calls of `run` after `warmup` untimed ones, the device synchronised around each."""
    times = []
    for step in range(warmup + steps):
        sync()
        start = time.perf_counter()
        run()
        sync()
        if step >= warmup:
            times.append(time.perf_counter() - start)
        log.info("%s update %d: %.4f s", what, step, time.perf_counter() - start)
    return times


def run_bench_scaling(setup: Setup, archs: list[str], lengths: list[int], steps: int, out: str, figure: str) -> dict:
    """Time and peak memory of one training update against sentence length, per model, each point in a fresh
    process. A quadratic t(L) = t0 + t1·L + t2·L² is fitted per model: RNNsearch's attention costs Tx·Ty per
    sentence (every target position reads every source annotation), RNNencdec's fixed context does not."""
    size, batch, threads = setup.size, setup.batch, setup.threads
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in archs:
            for length in lengths:
                r = in_fresh_process(run_bench_train, replace(setup, arch=arch), length, steps,
                                     f"{tmp}/{arch}_{length}.json", False, False)
                runs.append({k: r[k] for k in ("arch", "length", "seconds_per_update", "words_per_s", "peak_rss_mb",
                                               "mflop_per_target_word")})
                log.info("scaling %s length %d: %.2f s/update, peak RSS %.0f MB", arch, length,
                         r["seconds_per_update"], r["peak_rss_mb"])
    fits = {}
    for arch in archs:
        pts = [(r["length"], r["seconds_per_update"]) for r in runs if r["arch"] == arch]
        if len(pts) >= 3:
            t2, t1, t0 = np.polyfit([p[0] for p in pts], [p[1] for p in pts], 2)
            fits[arch] = {"t0_s": round(float(t0), 4), "t1_s_per_word": round(float(t1), 5),
                          "t2_s_per_word2": round(float(t2), 7)}
    result = {"benchmark": "scaling", "size": size, "sizes": TRAIN_SIZES[size], "batch": batch, "timed_updates": steps,
              "threads": threads, "runs": runs, "quadratic_fit": fits, "machine": machine()}
    write_json_atomic(out, result)
    _scaling_figure(runs, archs, size, batch, figure)
    return result


def _scaling_figure(runs: list[dict], archs: list[str], size: str, batch: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 3.8))
    for arch in archs:
        pts = sorted((r["length"], r["seconds_per_update"], r["peak_rss_mb"]) for r in runs if r["arch"] == arch)
        ax_t.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=arch)
        ax_m.plot([p[0] for p in pts], [p[2] / 1024 for p in pts], "o-", label=arch)
    ax_t.set_xlabel("words per sentence (each side)")
    ax_t.set_ylabel("seconds per update")
    ax_t.set_title(f"training time, batch {batch}, {size} size")
    ax_m.set_xlabel("words per sentence (each side)")
    ax_m.set_ylabel("peak resident memory (GB)")
    ax_m.set_title("memory of the process")
    ax_t.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def run_bench_summary(train: list[str], scaling: str, peer: str | None, out: str) -> str:
    """results/bench/summary.md: the training benchmarks at fixed size, the length scaling and the side-by-side
    table with JoeyNMT, from the JSON files of one `snakemake bench` run."""
    runs = [json.loads(Path(p).read_text()) for p in train]
    m = runs[0]["machine"]
    lines = ["# Benchmarks", "", f"Machine: {m['processor']}, {m['cpus']} CPUs, torch {m['torch']}. Every figure below "
             "was measured by `snakemake bench` in one run; utilisation is the model's closed-form training FLOP/s "
             "(rnnsearch.bench.flops) over the best fp32 2048³ GEMM measured in the same process.", "",
             "## Training at a fixed size (random word ids, no padding)", "",
             "| model | size | batch × words | s / update | src+tgt words/s | target words/s | MFLOP / target word "
             "| GFLOP/s | GEMM peak | utilisation | peak RSS GB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['arch']} | {r['size']} | {r['batch']} × {r['length']} | {r['seconds_per_update']:.2f} | "
                     f"{r['words_per_s']:,.0f} | {r['target_words_per_s']:,.0f} | {r['mflop_per_target_word']:.1f} | "
                     f"{r['gflops_per_s']:.1f} | {r['gemm_peak_gflops']} | {r['utilisation']:.1%} | "
                     f"{r['peak_rss_mb'] / 1024:.1f} |")
    s = json.loads(Path(scaling).read_text())
    archs = sorted({r["arch"] for r in s["runs"]})
    lengths = sorted({r["length"] for r in s["runs"]})
    lines += ["", f"## Time and memory per update against sentence length ({s['size']} size, batch {s['batch']}; "
              "figure: scaling.png)", "", "| words | " + " | ".join(f"{a} s / update | {a} peak RSS GB" for a in archs)
              + " |", "|---|" + "---|---|" * len(archs)]
    for n in lengths:
        cells = []
        for a in archs:
            r = next(r for r in s["runs"] if r["arch"] == a and r["length"] == n)
            cells.append(f"{r['seconds_per_update']:.2f} | {r['peak_rss_mb'] / 1024:.1f}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    for a, fit in s["quadratic_fit"].items():
        lines.append(f"\n{a}: t(L) ≈ {fit['t0_s']} + {fit['t1_s_per_word']}·L + {fit['t2_s_per_word2']}·L² s")
    if peer:
        peer = Path(peer).read_text(encoding="utf-8").splitlines()
        lines += [""] + [f"#{line}" if line.startswith("#") else line for line in peer]  # one heading level down
    text = "\n".join(lines) + "\n"
    with atomic_path(out) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return text
