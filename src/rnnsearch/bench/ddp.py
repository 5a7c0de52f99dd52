"""`rnnsearch bench-ddp`: data-parallel training on this machine, 1 process against N, measured in one run; and
the gradient all-reduce of a paper-size update, with a labelled projection of 8-GPU scaling.

Each configuration is started by torchrun (`torchrun --standalone --nproc-per-node P -m rnnsearch.bench.ddp`),
trains the same random global minibatch of `batch` pairs of `length` words as `rnnsearch train` does with P
processes (each its share, DistributedDataParallel over gloo on the CPU), and times `steps` updates after two
untimed ones. On a machine of C cores, P processes of C / P threads each do the same arithmetic as one process of
C threads, plus the all-reduce of every gradient (4 bytes per parameter) through the loopback, timed alone too:
the ratio measures that overhead, not a speed-up, which needs more devices.

The projection: a ring all-reduce moves 2 (N − 1) / N × S bytes in and out of every device for S bytes of
gradients; at bandwidth W it takes that / W. With per-process minibatches (`train.scale_batch`), N devices do N
times the work of one in (compute + all-reduce) time, or in max(compute, all-reduce) time where DDP overlaps the
all-reduce with the backward pass: the two bounds of the speed-up. The compute time per update is an assumption
stated in the output, not a measurement.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import torch

from rnnsearch.bench.speed import TRAIN_SIZES, _timed_updates, machine
from rnnsearch.data.batching import make_batch
from rnnsearch.distributed import detect, process_group
from rnnsearch.model import build_model
from rnnsearch.runtime import keep_freed_memory
from rnnsearch.textio import write_json_atomic
from rnnsearch.training.optimizers import make_optimizer

log = logging.getLogger("rnnsearch.bench")

# Link bandwidths of the projection, per direction, bytes/s: NVLink 4 (H100 SXM, 900 GB/s both directions), and
# 100 Gb/s Ethernet between GPUs on different machines.
LINKS = {"nvlink4": 450e9, "ethernet_100gbit": 100e9 / 8}
# Compute time of one paper-size update (80 pairs of 50 words) on one GPU assumed by the projection: 5,000
# sentence pairs/s, the speed the GPU path is built for. Not measured on this machine.
ASSUMED_GPU_UPDATE_S = 80 / 5000


def run_bench_ddp(size: str, batch: int, length: int, steps: int, threads: int, processes: int, out: str) -> dict:
    """1 process of `threads` threads, 1 process of threads / processes threads, and `processes` processes of
    threads / processes threads each, in that order, each configuration under its own torchrun."""
    cores, threads = threads, max(threads // processes, 1)
    runs = [_torchrun(1, cores, size, batch, length, steps), _torchrun(1, threads, size, batch, length, steps),
            _torchrun(processes, threads, size, batch, length, steps)]
    base, single, multi = runs
    result = {"benchmark": "ddp", "size": size, "sizes": TRAIN_SIZES[size], "batch": batch, "length": length,
              "timed_updates": steps, "runs": runs,
              "ratio_vs_one_process_all_cores": round(multi["pairs_per_s"] / base["pairs_per_s"], 3),
              "ratio_vs_one_process_same_threads": round(multi["pairs_per_s"] / single["pairs_per_s"], 3),
              "projection": projection(8), "machine": machine()}
    write_json_atomic(out, result)
    log.info("%d processes × %d threads: %.2f pairs/s; 1 × %d: %.2f; 1 × %d: %.2f", processes, threads,
             multi["pairs_per_s"], cores, base["pairs_per_s"], threads, single["pairs_per_s"])
    return result


def _torchrun(processes: int, threads: int, size: str, batch: int, length: int, steps: int) -> dict:
    return torchrun_json(processes, "rnnsearch.bench.ddp", size, batch, length, steps, threads)


def torchrun_json(processes: int, module: str, *args) -> dict:
    """`torchrun --standalone --nproc-per-node <processes> -m <module> <args…> <out>`: the JSON its rank 0 writes
    to `out` (a temporary file); a failure raises, with the end of its stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        cmd = [torchrun if os.path.exists(torchrun) else "torchrun", "--standalone", f"--nproc-per-node={processes}",
               "-m", module, *map(str, args), out]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
        with open(out, encoding="utf-8") as f:
            return json.load(f)


def projection(devices: int, parameters: int | None = None) -> dict:
    """All-reduce volume of one paper-size RNNsearch update and the speed-up bounds on `devices` GPUs per link."""
    if parameters is None:
        sizes = {k: v for k, v in TRAIN_SIZES["paper"].items() if k != "vocab"}
        K = TRAIN_SIZES["paper"]["vocab"] + 3
        with torch.device("meta"):  # the shapes only
            parameters = build_model({"arch": "rnnsearch", **sizes}, K, K).num_parameters()
    gradient_bytes = 4 * parameters  # fp32 gradients (bf16 autocast keeps fp32 parameters and gradients)
    per_device = 2 * (devices - 1) / devices * gradient_bytes
    t = ASSUMED_GPU_UPDATE_S
    links = {}
    for name, bandwidth in LINKS.items():
        comm = per_device / bandwidth
        links[name] = {"bytes_per_s": bandwidth, "allreduce_s": round(comm, 5),
                       "speedup_no_overlap": round(devices * t / (t + comm), 2),
                       "speedup_full_overlap": round(devices * t / max(t, comm), 2)}
    return {"label": "projection, not a measurement", "model": "rnnsearch paper size (App. A, K = 30000)",
            "parameters": parameters, "gradient_bytes_per_update": gradient_bytes, "devices": devices,
            "ring_bytes_per_device_per_update": round(per_device), "assumed_gpu_seconds_per_update": t,
            "links": links}


def _worker(size: str, batch: int, length: int, steps: int, threads: int, out: str) -> None:
    """One process of a torchrun configuration; rank 0 writes the timing."""
    keep_freed_memory()
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    world = detect()
    with process_group(world, torch.device("cpu")):
        result = _measured(world, size, batch, length, steps, threads)
    if world.leader:
        write_json_atomic(out, result)


def _measured(world, size: str, batch: int, length: int, steps: int, threads: int) -> dict:
    """This process's timing of its share of the updates (and of the all-reduce alone), its DDP freed on return
    (distributed.process_group)."""
    sizes = TRAIN_SIZES[size]
    K = sizes["vocab"] + 3
    model = build_model({"arch": "rnnsearch", **sizes}, K, K).train()
    net = torch.nn.parallel.DistributedDataParallel(model) if world.size > 1 else model
    optimizer = make_optimizer(model.parameters(), "adam", lr=1e-4)
    g = torch.Generator().manual_seed(1234)
    sents = [torch.randint(3, K, (length,), generator=g).tolist() + [1] for _ in range(2 * batch)]
    b, _ = make_batch(sents[:batch], sents[batch:], list(range(batch))).share(world.rank, world.size)
    # bench-train's update on this process's share: its mean loss, which DDP averages into the minibatch's
    # mean when the shares are equal (the same arithmetic as train.py's scaling)
    times = _timed_updates(net, optimizer, b, 2, steps, f"process {world.rank}")
    seconds = sum(times) / steps
    result = {"processes": world.size, "threads_per_process": threads, "parameters": model.num_parameters(),
              "seconds_per_update": round(seconds, 4), "pairs_per_s": round(batch / seconds, 2)}
    if world.size > 1:  # the all-reduce alone: every gradient as one flat fp32 tensor, best of 3
        flat = torch.ones(model.num_parameters())
        best = min(_timed_allreduce(flat) for _ in range(3))
        result.update(allreduce_s=round(best, 4), allreduce_gb_per_s=round(flat.numel() * 4 / best / 1e9, 3))
    return result


def _timed_allreduce(t: torch.Tensor) -> float:
    import torch.distributed as dist

    dist.barrier()
    start = time.perf_counter()
    dist.all_reduce(t)
    return time.perf_counter() - start


if __name__ == "__main__":  # torchrun -m rnnsearch.bench.ddp SIZE BATCH LENGTH STEPS THREADS OUT
    a = sys.argv[1:]
    _worker(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), a[5])
