"""Where one training update's time goes, measured before anything is made faster.

`rnnsearch bench-profile` runs App. B.2's update (forward, backward, clipping at 1, Adadelta) on the training
benchmark's random batch (`bench-train`'s sizes and precisions), eagerly or (`--graph`, CUDA) replayed from the
CUDA graph that training replays, first `steps` updates timed plainly, then `steps` more under torch.profiler, and
reports per update:

- operations: the GPU kernels launched, memory copies and sets included (CUDA), or the aten operators with no
  operator inside them (CPU); each costs at least one launch;
- busy: the time the device spends in them (the union of their intervals) and, within it, in matrix products
  (cuBLAS/CUTLASS kernels; aten::mm, addmm, bmm, baddbmm on the CPU); the operations that take most of it, by
  their own time (an operator's less the operators it calls);
- the launch gap: the profiled wall time minus the busy time, where the device waits for the host;

and the two floors of an update: arithmetic, the closed-form training FLOPs (rnnsearch.bench.flops) at the GEMM
rate measured in the same process; launches, the operations times the measured cost of one tiny launch (an
in-place add on one element, timed over 2,000). The profiler's Chrome trace is kept beside the JSON
(`<out>.trace.json`, for Perfetto or chrome://tracing).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import astuple
from collections import Counter
from pathlib import Path

import torch

from rnnsearch.bench.flops import train_flops
from rnnsearch.bench.graph_check import graphed_update
from rnnsearch.bench.speed import (
    _timed,
    _timed_updates,
    bench_update_setup,
    gemm_peak_gflops,
    machine,
    Setup,
    synchronizer,
    TRAIN_SIZES,
)
from rnnsearch.textio import write_json_atomic

log = logging.getLogger("rnnsearch.bench")

GEMM_KERNEL = re.compile(r"gemm|gemv|nvjet|cutlass|xmma|splitKreduce", re.IGNORECASE)  # cuBLAS, cuBLASLt, CUTLASS
GEMM_OP = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation"}
DEVICE_WORK = {"kernel", "gpu_memcpy", "gpu_memset"}  # the Chrome trace's categories of GPU work


def launch_seconds(device: torch.device, n: int = 2000) -> float:
    """Seconds to launch (and run) one in-place add on a one-element tensor, the least a kernel or an eager
    operator costs; averaged over `n` after 100 untimed."""
    x = torch.zeros(1, device=device)
    sync = synchronizer(device.type)
    for _ in range(100):
        x.add_(1.0)
    sync()
    start = time.perf_counter()
    for _ in range(n):
        x.add_(1.0)
    sync()
    return (time.perf_counter() - start) / n


def union_seconds(events: list[dict]) -> float:
    """Seconds covered by the union of the events' [ts, ts + dur) intervals (microseconds in the trace)."""
    total, end = 0.0, float("-inf")
    for e in sorted(events, key=lambda e: e["ts"]):
        start, finish = e["ts"], e["ts"] + e["dur"]
        if finish > end:
            total += finish - max(start, end)
            end = finish
    return total / 1e6


def self_times(events: list[dict]) -> list[tuple[dict, float, bool]]:
    """(event, its own microseconds: its duration less its direct children's, whether it is a leaf) for properly
    nested events, per thread: an operator's children are the operators it calls."""
    threads: dict[tuple, list[dict]] = {}
    for e in events:
        threads.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    out = []
    for evs in threads.values():
        own = {id(e): float(e["dur"]) for e in evs}
        leaf = {id(e): True for e in evs}
        stack: list[dict] = []
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                own[id(stack[-1])] -= e["dur"]
                leaf[id(stack[-1])] = False
            stack.append(e)
        out += [(e, own[id(e)], leaf[id(e)]) for e in evs]
    return out


def trace_breakdown(trace: dict, cuda: bool, updates: int) -> dict:
    """Operations, busy and matrix-product seconds per update from a Chrome trace of `updates` updates."""
    complete = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    if cuda:
        busy_events = [e for e in complete if e.get("cat") in DEVICE_WORK]  # kernels do not nest
        timed = [(e, float(e["dur"]), True) for e in busy_events]
        gemm = [e for e in busy_events if e.get("cat") == "kernel" and GEMM_KERNEL.search(e["name"])]
    else:
        busy_events = [e for e in complete if e.get("cat") == "cpu_op"]
        timed = self_times(busy_events)
        gemm = [e for e in busy_events if e["name"] in GEMM_OP]
    ops = [e for e, _, leaf in timed if leaf]
    per_name: Counter = Counter()
    calls: Counter = Counter()
    for e, own, _ in timed:
        per_name[e["name"]] += own
        calls[e["name"]] += 1
    top = [{"name": name[:100], "calls_per_update": round(calls[name] / updates, 1),
            "ms_per_update": round(us / updates / 1e3, 3)} for name, us in per_name.most_common(12)]
    return {"operations_per_update": round(len(ops) / updates, 1),
            "busy_seconds_per_update": union_seconds(busy_events) / updates,
            "gemm_seconds_per_update": union_seconds(gemm) / updates, "top_operations": top}


def run_bench_profile(setup: Setup, length: int, steps: int, out: str, graph: bool = False) -> dict:
    """Profile of one training update of `setup.arch` at `setup.size` (see the module docstring), eager or with
    `graph` replayed from a CUDA graph; writes `out` (JSON) and `<out>.trace.json`."""
    from torch.profiler import ProfilerActivity, profile

    arch, size, batch, threads, device_name, seed, precision = astuple(setup)
    model, optimizer, b, K = bench_update_setup(arch, size, batch, length, threads, device_name, seed, precision,
                                                graph)
    device, bf16 = b.x.device, precision == "bf16"
    cuda = device.type == "cuda"
    what = f"{arch} {size} {precision}{' graph' if graph else ''}"
    replay = graphed_update(model, optimizer, b, bf16) if graph else None

    def timed(warmup: int, what: str) -> list[float]:
        if replay is not None:
            return _timed(replay.replay, warmup, steps, what, synchronizer(device.type))
        return _timed_updates(model, optimizer, b, warmup, steps, what, bf16)

    plain = timed(2, what)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        profiled = timed(0, what + " (profiled)")
    trace_path = Path(out).with_suffix(".trace.json")
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    parts = trace_breakdown(json.loads(trace_path.read_text()), cuda, steps)

    gemm = gemm_peak_gflops(threads, device=device.type, precision=precision)
    launch = launch_seconds(device)
    flops = batch * train_flops(model.cfg, K, length + 1, length + 1)
    seconds, seconds_profiled = sum(plain) / steps, sum(profiled) / steps
    result = {"benchmark": "profile", "arch": arch, "size": size, "sizes": TRAIN_SIZES[size],
              "precision": precision, "cuda_graph": graph, "batch": batch, "length": length, "updates": steps,
              "seconds_per_update": round(seconds, 5), "profiled_seconds_per_update": round(seconds_profiled, 5),
              "operations_per_update": parts["operations_per_update"],
              "busy_seconds_per_update": round(parts["busy_seconds_per_update"], 5),
              "gemm_seconds_per_update": round(parts["gemm_seconds_per_update"], 5),
              "launch_gap_seconds_per_update": round(max(0.0, seconds_profiled - parts["busy_seconds_per_update"]), 5),
              "train_gflop_per_update": round(flops / 1e9, 3), "gemm_peak_gflops": gemm,
              "floor_arithmetic_seconds": round(flops / (gemm * 1e9), 5),
              "launch_seconds": round(launch, 8),
              "floor_launch_seconds": round(parts["operations_per_update"] * launch, 5),
              "top_operations": parts["top_operations"], "trace": str(trace_path),
              "device": str(device), "machine": machine()}
    if cuda:
        result.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda)
    log.info("%s: %.4f s/update (%.4f profiled), %.0f operations, busy %.4f s (GEMM %.4f s), floors: arithmetic "
             "%.4f s, launches %.4f s", what, seconds, seconds_profiled, result["operations_per_update"],
             result["busy_seconds_per_update"], result["gemm_seconds_per_update"],
             result["floor_arithmetic_seconds"], result["floor_launch_seconds"])
    write_json_atomic(out, result)
    return result
