"""Data-parallel training (torch.distributed, gloo on the CPU): two processes take the same updates as one process
on the same global minibatches, and a SIGTERM stops both at the same update with one checkpoint, from which one
process goes on to the parameters of an uninterrupted run.

In float64 (`train.precision: fp64`) the two runs agree to rounding: each process sums its half of a minibatch's
loss and DDP adds the two gradients, where one process sums the whole minibatch in one order; the parameters are
not bit-identical (the reduction order differs), and the tests hold them to 1e-6.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from rnnsearch.textio import EXIT_INTERRUPTED

from .test_resume import data  # noqa: F401  (the session's tokenized synthetic corpus)

BIN = Path(sys.executable).parent
UPDATES = 60  # each run in float64: enough for a wrong reduction to show, far past 1e-6
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def params(data: Path) -> Path:  # noqa: F811
    """The corpus's params in float64, one checkpoint only on a signal, a validation at the end only."""
    p = yaml.safe_load((data / "params.yaml").read_text())
    p["train"].update(precision="fp64", checkpoint_every=0, validate_every=0, log_every=5, max_updates=UPDATES)
    p["models"]["rnnsearch-50"]["max_updates"] = UPDATES
    path = data / "fp64.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


@pytest.fixture(scope="module")
def params2(params: Path) -> Path:
    """The same params for two processes (train.processes and decode.processes: 2)."""
    p = yaml.safe_load(params.read_text())
    p["train"]["processes"] = p["decode"]["processes"] = 2
    path = params.with_name("fp64-2.yaml")
    path.write_text(yaml.safe_dump(p))
    return path


def train_args(data: Path, params: Path, out: Path) -> list[str]:  # noqa: F811
    return ["train", "--params", str(params), "--model", "rnnsearch-50", "--src-train", str(data / "train.en"),
            "--tgt-train", str(data / "train.fr"), "--src-dev", str(data / "dev.en"), "--tgt-dev", str(data / "dev.fr"),
            "--src-vocab", str(data / "vocab.en.tsv"), "--tgt-vocab", str(data / "vocab.fr.tsv"), "--out-dir", str(out),
            "--log", str(out / "train.log")]


def final_weights(out: Path) -> dict:
    return torch.load(out / "checkpoint.pt", weights_only=True)["model"]


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def one_process(data: Path, params: Path) -> Path:  # noqa: F811
    out = data / "fp64-one-process"
    subprocess.run([sys.executable, "-m", "rnnsearch.cli", *train_args(data, params, out)], check=True,
                   capture_output=True)
    return out


@pytest.mark.slow
def test_two_processes_under_torchrun_take_the_updates_of_one(data: Path, params2: Path, one_process: Path):  # noqa: F811
    out = data / "fp64-torchrun"
    p = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "--no-python", "--",
                        str(BIN / "rnnsearch"), *train_args(data, params2, out)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    log = (out / "train.log").read_text()
    assert "data-parallel training: 2 processes (torchrun, gloo backend)" in log
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["updates"] == UPDATES and stats["runs"][0]["processes"] == 2
    ours, ref = final_weights(out), final_weights(one_process)
    assert next(iter(ours.values())).dtype == torch.float64
    difference = max_difference(ours, ref)
    assert difference <= TOLERANCE, f"two processes end {difference:.3g} away from one"
    print(f"2 processes vs 1 after {UPDATES} updates: largest parameter difference {difference:.3g}")
    # the learning statistics agree too: the same minibatches, the same loss to rounding
    ref_stats = json.loads((one_process / "train_stats.json").read_text())
    assert stats["train_nll"] == pytest.approx(ref_stats["train_nll"], rel=1e-9)
    assert stats["words"] == ref_stats["words"] and stats["epochs"] == ref_stats["epochs"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_sigterm_stops_both_processes_at_one_checkpoint_and_one_process_resumes(data: Path, params: Path,  # noqa: F811
                                                                                 params2: Path, one_process: Path):
    """The processes are started with the environment torchrun gives them (RANK, WORLD_SIZE, MASTER_ADDR, …),
    without torchrun, so that the test can signal one of them as Slurm signals its tasks."""
    out = data / "fp64-sigterm"
    out.mkdir()
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    procs = [subprocess.Popen([sys.executable, "-m", "rnnsearch.cli", *train_args(data, params2, out)],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    deadline = time.time() + 300
    while "rnnsearch-50 update 20/" not in ((out / "train.log").read_text() if (out / "train.log").exists() else ""):
        assert all(p.poll() is None for p in procs) and time.time() < deadline, [p.communicate() for p in procs]
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGTERM)  # one process only: the other learns of it at the next update
    statuses = [p.wait(timeout=300) for p in procs]
    assert statuses == [EXIT_INTERRUPTED, EXIT_INTERRUPTED], [p.stderr.read()[-2000:] for p in procs]
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    stopped_at = saved["update"]
    assert 20 <= stopped_at < UPDATES and saved["progress"]["runs"][0]["ended_by"] == "signal 15"
    assert [p.name for p in sorted(out.glob("checkpoint*.pt"))] == ["checkpoint-%09d.pt" % stopped_at,
                                                                    "checkpoint.pt"]
    assert not (out / "model.pt").exists()

    subprocess.run([sys.executable, "-m", "rnnsearch.cli", *train_args(data, params, out)], check=True,
                   capture_output=True)
    assert f"resuming from {out / 'checkpoint.pt'} at update {stopped_at}" in (out / "train.log").read_text()
    runs = json.loads((out / "train_stats.json").read_text())["runs"]
    assert [(r["processes"], r["start"], r["end"]) for r in runs] == [(2, 0, stopped_at), (1, stopped_at, UPDATES)]
    difference = max_difference(final_weights(out), final_weights(one_process))
    print(f"2 processes stopped at update {stopped_at}, 1 process to {UPDATES}: difference {difference:.3g}")
    assert difference <= TOLERANCE, f"2 processes, stopped, then 1 process end {difference:.3g} away from 1 process"


@pytest.mark.slow
def test_the_data_parallel_benchmark_times_each_configuration_under_torchrun(tmp_path: Path):
    from rnnsearch.bench.ddp import run_bench_ddp

    r = run_bench_ddp("bench", 8, 6, 1, 2, 2, str(tmp_path / "ddp.json"))
    assert json.loads((tmp_path / "ddp.json").read_text()) == r
    assert [(x["processes"], x["threads_per_process"]) for x in r["runs"]] == [(1, 2), (1, 1), (2, 1)]
    assert all(x["pairs_per_s"] == pytest.approx(8 / x["seconds_per_update"], rel=0.01) for x in r["runs"])
    two = r["runs"][2]
    assert two["allreduce_s"] > 0 and two["allreduce_gb_per_s"] == pytest.approx(
        two["parameters"] * 4 / two["allreduce_s"] / 1e9, rel=0.05)
    p = r["projection"]
    assert p["label"] == "projection, not a measurement" and p["gradient_bytes_per_update"] == 4 * p["parameters"]
    assert p["ring_bytes_per_device_per_update"] == round(2 * 7 / 8 * 4 * p["parameters"])
    nvlink, ethernet = p["links"]["nvlink4"], p["links"]["ethernet_100gbit"]
    assert nvlink["allreduce_s"] < ethernet["allreduce_s"] and ethernet["speedup_no_overlap"] < nvlink["speedup_no_overlap"] <= 8


@pytest.mark.slow
def test_a_translation_of_two_processes_writes_what_one_process_writes(data: Path, params: Path,  # noqa: F811
                                                                        params2: Path, one_process: Path):
    """decode.processes: each process beam-searches every other sentence; process 0 gathers and writes."""
    import numpy as np

    def translate(out: Path, launch: list[str], params: Path) -> None:
        args = ["translate", "--params", str(params), "--checkpoint", str(one_process / "model.pt"),
                "--src", str(data / "dev.en"), "--ref", str(data / "dev.fr"), "--src-vocab", str(data / "vocab.en.tsv"),
                "--tgt-vocab", str(data / "vocab.fr.tsv"), "--out-dir", str(out), "--log", str(out / "translate.log")]
        p = subprocess.run([*launch, *args], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]

    one, two = data / "translate-1", data / "translate-2"
    translate(one, [str(BIN / "rnnsearch")], params)
    translate(two, [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "--no-python", "--",
                    str(BIN / "rnnsearch")], params2)
    assert "translation: 2 processes (torchrun, gloo backend)" in (two / "translate.log").read_text()
    assert json.loads((two / "decode_stats.json").read_text())["processes"] == 2
    for name in ("test.hyp.tok", "test.hyp", "nounk.hyp.tok", "nounk.json"):
        assert (two / name).read_bytes() == (one / name).read_bytes(), name
    with np.load(one / "attention.npz") as a, np.load(two / "attention.npz") as b:
        assert sorted(a.files) == sorted(b.files) and len(a.files) == len((one / "test.hyp").read_text().splitlines())
        assert all(np.allclose(a[k], b[k], atol=2e-3) for k in a.files)  # float16; batches of other shapes


@pytest.mark.slow
def test_a_setting_of_two_processes_started_as_one_stops_before_any_work(data: Path, params2: Path,  # noqa: F811
                                                                          one_process: Path):
    """train.processes / decode.processes: 2 without a launcher: exit 2, the setting, the number found and the
    commands that start two, nothing written (one process would silently train with half the asked-for setup)."""
    out = data / "not-started"
    train = subprocess.run([str(BIN / "rnnsearch"), *train_args(data, params2, out)[:-2]], capture_output=True,
                           text=True)
    assert train.returncode == 2 and "Traceback" not in train.stderr, train.stderr[-2000:]
    assert ("'train.processes' is 2, but 1 process was started (no launcher): start 2 with `torchrun --standalone "
            "--nproc-per-node 2 --no-python -- rnnsearch train …` on one machine, or `srun --ntasks 2 rnnsearch "
            "train …`") in train.stderr
    assert not out.exists()
    translate = subprocess.run([str(BIN / "rnnsearch"), "translate", "--params", str(params2), "--checkpoint",
                                str(one_process / "model.pt"), "--src", str(data / "dev.en"), "--ref",
                                str(data / "dev.fr"), "--src-vocab", str(data / "vocab.en.tsv"), "--tgt-vocab",
                                str(data / "vocab.fr.tsv"), "--out-dir", str(out)], capture_output=True, text=True)
    assert translate.returncode == 2 and "'decode.processes' is 2, but 1 process was started" in translate.stderr
    assert "`srun --ntasks 2 rnnsearch translate …`" in translate.stderr and not out.exists()


def test_the_process_group_closes_after_what_held_it_is_freed(monkeypatch):
    """DistributedDataParallel lives in reference cycles: built in a function called inside `process_group`, it
    outlived the group's `destroy_process_group` until Python's cycle collector ran, at worst during interpreter
    shutdown, where destroying gloo's pending work aborted a process (rank 1 of the data-parallel benchmark,
    exit -6, under load). The group is destroyed only once it is freed (the collector off, as it may be then)."""
    import gc
    import weakref

    from rnnsearch import distributed

    class Held:  # a stand-in for DDP: a cycle through its own hook
        def __init__(self):
            self.hook = lambda: self

    alive_at_destroy = []

    def body() -> weakref.ref:
        return weakref.ref(Held())

    monkeypatch.setattr(distributed.dist, "init_process_group", lambda *a, **kw: None)
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: alive_at_destroy.append(ref() is not None))
    gc.disable()
    try:
        with distributed.process_group(distributed.World(0, 2, 0, "torchrun"), torch.device("cpu")):
            ref = body()
            assert ref() is not None  # only the collector frees it
    finally:
        gc.enable()
    assert alive_at_destroy == [False]


def test_no_reference_keeps_the_process_group_past_its_destruction(tmp_path: Path):
    """torch.distributed.nn.functional's collectives take `group.WORLD` as a default argument, evaluated at its
    first import; the first optimizer imports it (through torch._dynamo). Imported after init_process_group, it held
    the group past destroy_process_group until the interpreter shut down, where freeing gloo's threads aborted the
    data-parallel benchmark's rank 1 under load ("terminate called without an active exception"). Every process
    imports rnnsearch.distributed before it starts a group: then nothing but the caller holds the group once it is
    destroyed."""
    script = f"""
import sys, torch, torch.distributed as dist
import rnnsearch.distributed
dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
group = dist.group.WORLD
torch.optim.Adadelta([torch.nn.Parameter(torch.ones(2))])
dist.all_reduce(torch.ones(2))
dist.destroy_process_group()
print(sys.getrefcount(group) - 2, "dynamo" if "torch._dynamo" in sys.modules else "")
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0", "dynamo"]  # the optimizer imported torch._dynamo; no reference is left
