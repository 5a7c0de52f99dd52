"""`rnnsearch bench-dp-graphs`: data-parallel updates from CUDA graphs (training/parallel_graphs.py), measured at 1
and N processes in each precision, and the 4- and 8-GPU speed-ups projected from what was measured.

Each configuration runs under its own torchrun (`torchrun --standalone --nproc-per-node P -m
rnnsearch.bench.dp_graphs …`). Every process trains its own minibatch of `batch` random pairs of `length` words
(per-process minibatches, `train.scale_batch`: N processes do N times one process's work), the model and batch of
`bench-train`. Measured, each after three untimed updates that record the graphs:
- at 1 process, the one-process graphed update the trainer runs (`UpdateGraphs`; eager on the CPU): t₁;
- in every process, its phased update without the all-reduce (phase 1 and phase 3 replayed), timed while the
  other processes wait at a barrier, so that processes sharing one GPU do not slow each other: t_replay;
- the all-reduce of the flat gradient alone (best of 5), and whole updates with every process at once.

The projection, per link of bandwidth W (per direction) and N devices: a ring all-reduce of S gradient bytes
moves 2 (N − 1) / N × S bytes in and out of each device, taking t_comm = 2 (N − 1) / N × S / W; it runs between
the two graphs, so nothing overlaps it, and N devices give N × t₁ / (t_replay + t_comm) times one graphed GPU. The
all-reduce measured here (two processes through gloo on one machine) is reported, not projected from.
"""

from __future__ import annotations

import logging
import sys
import time

import torch
import torch.distributed as dist

from rnnsearch.bench.ddp import LINKS, torchrun_json
from rnnsearch.bench.speed import Setup, _timed, bench_update_setup, machine, synchronizer
from rnnsearch.distributed import backend_for, detect, process_device
from rnnsearch.runtime import resolve_device
from rnnsearch.textio import InputError, write_json_atomic
from rnnsearch.training.graphs import UpdateGraphs, padded, update
from rnnsearch.training.parallel_graphs import DataParallelGraphs

log = logging.getLogger("rnnsearch.bench")


def run_bench_dp_graphs(setup: Setup, length: int, steps: int, precisions: list[str], processes: int, out: str
                        ) -> dict:
    """1 and `processes` processes in each precision, each under its own torchrun; the projection from them
    (`setup`: its size, batch per process, threads and device)."""
    size, batch, threads, device = setup.size, setup.batch, setup.threads, setup.device
    if processes < 2:
        raise InputError(f"--processes {processes}: the benchmark compares 1 process with N ≥ 2")
    runs = [torchrun_json(p, "rnnsearch.bench.dp_graphs", size, batch, length, steps, threads, device, precision)
            for precision in precisions for p in (1, processes)]
    result = {"benchmark": "dp_graphs", "size": size, "batch_per_process": batch, "length": length,
              "timed_updates": steps, "runs": runs,
              "projections": {pr: projection(*(r for r in runs if r["precision"] == pr)) for pr in precisions},
              "machine": machine()}
    write_json_atomic(out, result)
    for pr, proj in result["projections"].items():
        log.info("%s: replay %.4f s against %.4f s at 1 process (%.2f×); 8 GPUs on NVLink: %.2f× one", pr,
                 proj["t_replay_s"], proj["t1_s"], proj["replay_ratio"], proj["devices"]["8"]["nvlink4"]["speedup"])
    return result


def projection(one: dict, many: dict) -> dict:
    """The N-device speed-ups of per-process minibatches from the measured t₁, t_replay and gradient bytes."""
    t1, t_replay = one["t1_s"], max(r["alone_s"] for r in many["ranks"])
    gradient_bytes = many["gradient_bytes"]
    devices = {}
    for n in (4, 8):
        devices[str(n)] = {}
        for name, bandwidth in LINKS.items():
            comm = 2 * (n - 1) / n * gradient_bytes / bandwidth
            devices[str(n)][name] = {
                "t_comm_s": round(comm, 6), "speedup": round(n * t1 / (t_replay + comm), 2),
                "arithmetic": f"{n} × {t1:.5f} / ({t_replay:.5f} + 2 × {n - 1}/{n} × {gradient_bytes} B / "
                              f"{bandwidth:.3g} B/s)"}
    return {"label": "projection from the measured t1, t_replay and gradient bytes", "t1_s": t1,
            "t_replay_s": t_replay, "replay_ratio": round(t_replay / t1, 3), "gradient_bytes": gradient_bytes,
            "devices": devices}


def _worker(size: str, batch: int, length: int, steps: int, threads: int, device_name: str, precision: str,
            out: str) -> None:
    """One process of a configuration; rank 0 writes every rank's timings."""
    world = detect()
    device = process_device(resolve_device(device_name, "--device"), world)
    dist.init_process_group(backend_for(device), rank=world.rank, world_size=world.size)
    try:
        cuda, bf16, sync = device.type == "cuda", precision == "bf16", synchronizer(device.type)
        setup = (size, batch, length, threads, str(device), 1234, precision, cuda)
        mine = {"rank": world.rank}
        if world.size == 1:
            mine["t1_s"] = _one_process_update_s(setup, bf16, steps, sync)
        model, optimizer, b, _ = bench_update_setup("rnnsearch", *setup)
        dp = DataParallelGraphs(model, optimizer, bf16, 1.0, graphs=cuda)
        mine.update(_phased_timings(dp, b, batch * world.size, world, steps, sync))
        ranks = [None] * world.size
        dist.all_gather_object(ranks, mine)
        if world.leader:
            flat = dp.flat.buffer
            write_json_atomic(out, {
                "processes": world.size, "precision": precision, "device": str(device),
                "device_name": torch.cuda.get_device_name(device) if cuda else machine()["processor"],
                "backend": dist.get_backend(), "graphs": cuda, "parameters": flat.numel(),
                "gradient_bytes": flat.numel() * flat.element_size(), "ranks": ranks,
                **({"t1_s": mine["t1_s"]} if world.size == 1 else {})})
    finally:
        dist.destroy_process_group()


def _one_process_update_s(setup: tuple, bf16: bool, steps: int, sync) -> float:
    """t1: the trainer's one-process update (from CUDA graphs, `UpdateGraphs`; eager on the CPU), mean seconds."""
    model, optimizer, b, _ = bench_update_setup("rnnsearch", *setup)
    graphs = UpdateGraphs(model, optimizer, bf16, 1.0) if b.x.is_cuda else None

    def one():
        if graphs is not None:
            return graphs(b, 1.0)
        optimizer.zero_grad(set_to_none=True)
        return update(model, optimizer, b, bf16)

    return round(sum(_timed(one, 3, steps, "1 process", sync)) / steps, 6)


def _phased_timings(dp: DataParallelGraphs, b, rows: int, world, steps: int, sync) -> dict:
    """After three whole updates (the graphs recorded): this process's update without the all-reduce while the
    others wait, whole updates of every process at once, and the all-reduce alone (best of 5); mean seconds."""
    share = padded(b) if dp.use_graphs else b

    def phases():
        dp.scale.fill_(1 / rows)
        if dp.use_graphs:
            dp.replay_backward(share)
            dp.replay_step()
        else:
            dp.backward(share)
            dp.step()

    for _ in range(3):
        dp(b, 1.0, rows, 1.0)
    sync()
    timings = {}
    for r in range(world.size):  # each process alone
        dist.barrier()
        if world.rank == r:
            timings["alone_s"] = round(sum(_timed(phases, 0, steps, f"process {r} alone", sync)) / steps, 6)
        dist.barrier()
    together = _timed(lambda: dp(b, 1.0, rows, 1.0), 0, steps, "together", sync)
    timings["together_s"] = round(sum(together) / steps, 6)
    timings["allreduce_s"] = round(min(_timed_allreduce(dp, sync) for _ in range(5)), 6)
    return timings


def _timed_allreduce(dp, sync) -> float:
    """Seconds of one all-reduce of the flat gradient, every process starting together."""
    sync()
    dist.barrier()
    start = time.perf_counter()
    dp.all_reduce()
    sync()
    return time.perf_counter() - start


if __name__ == "__main__":  # torchrun -m rnnsearch.bench.dp_graphs SIZE BATCH LENGTH STEPS THREADS DEVICE PRECISION OUT
    a = sys.argv[1:]
    _worker(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), a[5], a[6], a[7])
