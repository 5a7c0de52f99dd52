"""Several processes for one training or one translation, with torch.distributed: which process this is, and
what the processes agree on.

A training (or translation) of N processes is started by a launcher, never by rnnsearch itself:

- `torchrun --standalone --nproc-per-node N --no-python rnnsearch train …` on one machine (torchrun sets RANK,
  WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT: the `env://` rendezvous);
- `srun --ntasks N rnnsearch train …` inside a Slurm allocation (every task reads SLURM_PROCID, SLURM_NTASKS and
  SLURM_LOCALID; the rendezvous is the first host of the step's node list, on a port derived from the job id, as
  fairseq's `infer_init_method` does), which is what the `slurm` profile runs when `train.processes` > 1.

Each process holds a whole replica of the model (DistributedDataParallel: NCCL on GPUs, gloo on CPUs) and takes
its share of every global minibatch (`Batch.share`); the gradients are averaged across processes during the
backward pass, so every replica takes the same optimizer step. Process 0 validates, writes checkpoints, logs and
metrics; the others only train. A translation of N processes splits the test set among them (`share_work`);
process 0 gathers the translations and writes them.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import logging
import os
import subprocess
from dataclasses import dataclass

import torch
import torch.distributed as dist
# Before any process group exists: torch.distributed.nn.functional's ten collectives take `group=group.WORLD` as a
# default argument, evaluated at the module's first import. torch._dynamo imports it, and the first optimizer
# imports torch._dynamo: after init_process_group, those defaults held the group past destroy_process_group until
# the interpreter shut down, where freeing gloo's worker threads aborted the process ("terminate called without an
# active exception", exit -6). Imported here, before any group, they hold None.
import torch.distributed.nn.functional  # noqa: F401

from rnnsearch.textio import InputError

log = logging.getLogger("rnnsearch.train")

# How long a process waits for the others at a collective: process 0 validates (decodes the dev set) while the
# others wait at the next update's gradient reduction.
TIMEOUT = datetime.timedelta(minutes=60)


@dataclass(frozen=True)
class World:
    """This process's place among the training's processes: `rank` of `size`, `local_rank` on its machine."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    launcher: str = "none"

    @property
    def leader(self) -> bool:
        """Process 0: the one that validates and writes."""
        return self.rank == 0

    def agree(self, loss: torch.Tensor, signal: int) -> tuple[float, int]:
        """One collective per update: the summed loss of the global minibatch, and the signal (SIGTERM, SIGINT)
        any process received since the last update (0: none), so that all of them stop at the same update."""
        t = torch.stack([loss.detach().double(), torch.tensor(float(signal), device=loss.device, dtype=torch.double),
                         torch.tensor(float(bool(signal)), device=loss.device, dtype=torch.double)])
        dist.all_reduce(t)
        total, signals, signalled = t.tolist()
        return total, round(signals / signalled) if signalled else 0

    def decide(self, flag: bool, device) -> bool:
        """Process 0's decision (early stopping after its validation), told to every process."""
        if self.size == 1:
            return flag
        t = torch.tensor([int(flag)], device=device)
        dist.broadcast(t, 0)
        return bool(t.item())

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()


def detect() -> World:
    """The launcher's environment: torchrun's RANK/WORLD_SIZE, else an srun step's SLURM_PROCID/SLURM_NTASKS,
    else one process."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return World(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)), "torchrun")
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        return World(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0)), "srun")
    return World()


def started_as(setting: str, wanted: int, stage: str) -> World:
    """This process's World, which must be one of `wanted` processes (params.yaml's `setting`, e.g.
    train.processes): a mismatch stops before any work, saying how to start the right number."""
    world = detect()
    if world.size != wanted:
        started = f"{world.size} process{'es' if world.size > 1 else ''} {'were' if world.size > 1 else 'was'}"
        raise InputError(
            f"'{setting}' is {wanted}, but {started} started ({world.launcher if world.size > 1 else 'no launcher'}): "
            f"start {wanted} with `torchrun --standalone --nproc-per-node {wanted} --no-python -- rnnsearch {stage} …` "
            f"on one machine, or `srun --ntasks {wanted} rnnsearch {stage} …` in a Slurm allocation (`snakemake` "
            f"does so; dvc.yaml's commands start the number params.yaml held when `rnnsearch dvc-yaml` wrote them: "
            f"set '{setting}' in params.yaml and run `rnnsearch dvc-yaml` again, `dvc exp run -S` cannot change it)")
    return world


def _slurm_rendezvous() -> str:
    """tcp://<first host of the step>:<port>, the port from the job id unless MASTER_PORT is set (two trainings
    of one job would need different ports; Slurm runs one per job here)."""
    env = os.environ
    if "MASTER_ADDR" in env:
        host = env["MASTER_ADDR"]
    else:
        nodes = env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"]
        host = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True,
                              check=True, timeout=60).stdout.split()[0]
    port = int(env.get("MASTER_PORT") or 10000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
    return f"tcp://{host}:{port}"


BACKENDS = ("nccl", "gloo")


def backend_for(device: torch.device) -> str:
    """NCCL between GPUs, gloo between CPUs; RNNSEARCH_DIST_BACKEND=gloo puts several processes on one GPU (NCCL
    refuses two ranks on one device), for tests and benchmarks."""
    chosen = os.environ.get("RNNSEARCH_DIST_BACKEND", "")
    if not chosen:
        return "nccl" if device.type == "cuda" else "gloo"
    if chosen not in BACKENDS or (chosen == "nccl" and device.type != "cuda"):
        raise InputError(f"RNNSEARCH_DIST_BACKEND={chosen!r}: expected gloo, or nccl on a CUDA device (here "
                         f"{device.type}); unset it for the default")
    return chosen


@contextlib.contextmanager
def process_group(world: World, device: torch.device, what: str = "data-parallel training"):
    """The process group of `world` (nothing for one process): NCCL when training on CUDA, else gloo.

    The body must hold no reference to its DistributedDataParallel when it ends (build it in a function it calls,
    or drop the name): DDP's reducer holds the group, and reference cycles keep DDP alive past
    `destroy_process_group` until Python's cycle collector runs, at worst while the interpreter shuts down, where
    destroying gloo's pending work aborts the process (SIGABRT; pytorch/pytorch#179291). The collection here frees
    it, and the group with it, while the interpreter is whole."""
    if world.size == 1:
        yield
        return
    backend = backend_for(device)
    init = "env://" if world.launcher == "torchrun" else _slurm_rendezvous()
    dist.init_process_group(backend, init_method=init, rank=world.rank, world_size=world.size, timeout=TIMEOUT,
                            **({"device_id": device} if backend == "nccl" else {}))
    if world.leader:
        log.info("%s: %d processes (%s, %s backend)", what, world.size, world.launcher, backend)
    try:
        yield
    finally:
        gc.collect()
        dist.destroy_process_group()


def share_work(world: World, items: list, work) -> list | None:
    """`work` on items rank, rank + N, … in every process; process 0 gets all the results in the items' order
    (the others None). Every process must call it (a collective)."""
    if world.size == 1:
        return work(items)
    mine = work(items[world.rank :: world.size])
    parts = [None] * world.size if world.leader else None
    dist.gather_object(mine, parts, dst=0)
    if not world.leader:
        return None
    results: list = [None] * len(items)
    for rank, part in enumerate(parts):
        results[rank :: world.size] = part
    return results


def process_device(device: torch.device, world: World) -> torch.device:
    """One GPU per process on a machine (the LOCAL_RANK-th visible one); the CPU stays the CPU."""
    if device.type != "cuda" or world.size == 1:
        return device
    count = torch.cuda.device_count()
    index = world.local_rank if count > 1 else 0  # Slurm may bind one visible GPU to each task
    torch.cuda.set_device(index)
    return torch.device("cuda", index)
