"""`rnnsearch bench-memory`: what an alignment model with memory costs a training update on the CPU, against the
paper's RNNsearch in the same process.

At each size (the paper's, App. A; the embedded corpus's, params.yaml's model and shortlists) the paper's
RNNsearch and RNNsearch with each variant (location-aware attention, linguistic coverage, coverage with
fertility, neural coverage) are built from one seed, with their Adadelta and one batch of random pairs of
`length` words each side; then their updates (forward, backward, clipping, Adadelta step) run in rounds, one
update of each model per round, the order rotating, so that drift in the machine's speed reaches every model
alike. Each model's median update time and its ratio to the paper model's are written to the JSON, with the path
each model trained through (the CPU's hand-written recurrence, model/fused.py with model/fused_memory.py, or
plain autograd), the machine and the settings.
"""

from __future__ import annotations

import logging
import statistics
import time

import torch

from rnnsearch.bench.speed import TRAIN_SIZES, bench_update_setup, machine
from rnnsearch.runtime import git_commit
from rnnsearch.textio import write_json_atomic
from rnnsearch.training.graphs import update

log = logging.getLogger("rnnsearch.bench")

VARIANTS = {"rnnsearch": {}, "location": {"attention": "location"},
            **{f"coverage-{kind}": {"coverage": kind} for kind in ("linguistic", "fertility", "neural")}}
BATCH = {"paper": 80, "embedded": 40, "bench": 80}  # App. B.2's minibatch; params.yaml's train.batch_size


def run_bench_memory(sizes: list[str], length: int, steps: int, threads: int, seed: int, out: str,
                     goal: float = 1.3) -> dict:
    """`steps` timed rounds after two untimed ones at each of `sizes`; `goal`: the ratio each variant's update is
    held to (reported, per model, as `within_goal`)."""
    runs = [_one_size(size, length, steps, threads, seed, goal) for size in sizes]
    result = {"benchmark": "memory", "device": "cpu", "precision": "fp32", "length": length,
              "warmup_rounds": 2, "timed_rounds": steps, "seed": seed, "goal_ratio": goal, "runs": runs,
              "machine": machine(), "git": git_commit()}
    write_json_atomic(out, result)
    return result


def _one_size(size: str, length: int, steps: int, threads: int, seed: int, goal: float) -> dict:
    setups = {name: bench_update_setup("rnnsearch", size, BATCH[size], length, threads, "cpu", seed, "fp32",
                                       overrides=cfg) for name, cfg in VARIANTS.items()}
    times: dict[str, list[float]] = {name: [] for name in setups}
    names = list(setups)
    for r in range(2 + steps):
        for name in names[r % len(names):] + names[: r % len(names)]:
            model, optimizer, batch, _ = setups[name]
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            update(model, optimizer, batch, False)
            if r >= 2:
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["rnnsearch"])
    models = {}
    for name, (model, *_rest) in setups.items():
        seconds = statistics.median(times[name])
        models[name] = {"overrides": VARIANTS[name], "fused_recurrence": bool(model.decoder.fused),
                        "parameters": model.num_parameters(), "seconds_per_update": round(seconds, 4),
                        "seconds_each": [round(t, 4) for t in times[name]], "ratio": round(seconds / base, 3),
                        "within_goal": seconds / base <= goal}
        log.info("%s %s: %.3f s/update, %.3f× the paper model's%s", size, name, seconds, seconds / base,
                 "" if model.decoder.fused else " (plain autograd)")
    return {"size": size, "sizes": TRAIN_SIZES[size], "batch": BATCH[size], "threads": torch.get_num_threads(),
            "models": models}
