"""Data-parallel training on CUDA graphs (training/parallel_graphs.py): on the CPU, the three phases (backward into
one flat gradient buffer, its all-reduce, clip and step) run eagerly in two gloo processes take DistributedDataParallel's
updates to float64 rounding; `train.cuda_graphs` picks them only when asked. Marked `cuda`: two processes on one
GPU (gloo), the graphs against the same phases run eagerly, and a 2-process training stopped by SIGTERM and
resumed from graphs."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml

from rnnsearch.data.batching import make_batch
from rnnsearch.distributed import backend_for
from rnnsearch.textio import EXIT_INTERRUPTED, InputError
from rnnsearch.training.graphs import graphs_wanted, padded, static_encoder
from rnnsearch.training.parallel_graphs import DataParallelGraphs, FlatGradients
from rnnsearch.training.optimizers import make_optimizer
from rnnsearch.training.train import batch_nll

from .test_distributed import free_port, train_args
from .test_fused import model_and_batch
from .test_resume import data  # noqa: F401  (the session's tokenized synthetic corpus)

UPDATES = 6
LRS = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]


def minibatches(seed: int = 11) -> list:
    """Six global minibatches of 5 or 7 rows (shares of 3 and 2, or 4 and 3 rows) and of varied lengths; the
    third of one row (process 1 gets none: weight 0)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k, rows in enumerate((5, 7, 1, 5, 7, 5)):
        src = [torch.randint(3, 41, (int(torch.randint(1, 14, (1,), generator=g)),), generator=g).tolist() + [1]
               for _ in range(rows)]
        tgt = [torch.randint(3, 37, (int(torch.randint(1, 14, (1,), generator=g)),), generator=g).tolist() + [1]
               for _ in range(rows)]
        order = sorted(range(rows), key=lambda i: -len(src[i]))  # sorted by length, as PaperBatches makes them
        out.append(make_batch([src[i] for i in order], [tgt[i] for i in order], order))
    return out


def ddp_updates(model, batches, world: int, rank: int, optimizer: str) -> list[float]:
    """train.py's eager data-parallel update (DDP, loss × N / B) on each minibatch; the summed losses."""
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = make_optimizer(model.parameters(), optimizer, 1.0)
    losses = []
    for b, lr in zip(batches, LRS):
        part, weight = b.share(rank, world)
        loss = batch_nll(net, part)
        opt.zero_grad(set_to_none=True)
        (loss * (weight * world) / b.x.size(0)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        losses.append(float(loss) * weight)
    return losses


def _phased_against_ddp(rank: int, world: int, store: str, optimizer: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        model, _ = model_and_batch("rnnsearch", {}, seed=3, dtype=torch.float64)
        twin = copy.deepcopy(model)
        batches = minibatches()
        ddp_losses = ddp_updates(twin, batches, world, rank, optimizer)
        phased = DataParallelGraphs(model, make_optimizer(model.parameters(), optimizer, 1.0), False, 0.5,
                                    graphs=False)
        losses, norms = [], []
        for b, lr in zip(batches, LRS):
            part, weight = b.share(rank, world)
            loss, norm = phased(part, weight, b.x.size(0), lr)
            losses.append(float(loss) * weight)
            norms.append(float(norm))
        assert phased.flat.attached()
        result = {"difference": max(float((p - q).abs().max()) for p, q in zip(model.parameters(), twin.parameters())),
                  "moved": max(float((p - q).abs().max()) for p, q in
                               zip(model.parameters(), model_and_batch("rnnsearch", {}, seed=3,
                                                                       dtype=torch.float64)[0].parameters())),
                  "losses": losses, "ddp_losses": ddp_losses, "norms": norms,
                  "weights": [float(p.sum()) for p in model.parameters()]}
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("optimizer", ["adadelta", "adam"])
def test_the_phased_update_of_two_processes_takes_ddps_updates(tmp_path: Path, optimizer: str):
    """Two gloo processes, float64, six minibatches (one leaving process 1 without a row): the phases run eagerly
    end where DDP ends to 1e-12 (DDP averages N × (loss / B)-scaled gradients, the phases sum 1 / B-scaled ones:
    the same gradient, rounded differently), both processes hold the same weights, and the updates moved them."""
    mp.spawn(_phased_against_ddp, args=(2, str(tmp_path / "store"), optimizer, str(tmp_path)), nprocs=2)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    for r in (r0, r1):
        assert r["difference"] <= 1e-12, r["difference"]
        assert r["moved"] > 1e-3  # six updates did something to compare
        assert r["losses"] == pytest.approx(r["ddp_losses"], rel=1e-12)
    assert r0["weights"] == r1["weights"] and r0["norms"] == r1["norms"]  # the same step on every process
    assert r1["losses"][2] == 0.0  # the one-row minibatch: process 1's share counts for nothing


def test_the_flat_buffer_holds_every_gradient_and_backward_adds_into_it():
    model, batch = model_and_batch("rnnsearch", {}, seed=4)
    params = list(model.parameters())
    flat = FlatGradients(params)
    assert flat.buffer.numel() == sum(p.numel() for p in params) and flat.attached()
    batch_nll(model, batch).backward()
    assert flat.attached() and float(flat.buffer.abs().sum()) > 0  # written in place, not replaced
    reference = copy.deepcopy(model)
    reference.zero_grad(set_to_none=True)
    batch_nll(reference, batch).backward()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(params, reference.parameters()))
    model.zero_grad(set_to_none=True)
    assert not flat.attached()


def test_auto_picks_the_data_parallel_graphs_for_several_cuda_processes():
    """auto replays the phased graphs with several processes on CUDA (checked on an H100: tests/gpu-dp-check.sh),
    as it replays one process's; eager DDP where graphs cannot run (the CPU, an LSTM encoder) and with false; and
    true is refused where they cannot run."""
    gru, _ = model_and_batch("rnnsearch", {})
    lstm, _ = model_and_batch("luong", {})
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert all(graphs_wanted(s, gru, cuda, p) for s in ("auto", True) for p in (1, 2, 8))
    assert not any(graphs_wanted(s, m, d, 2) for s, m, d in [("auto", gru, cpu), ("auto", lstm, cuda),
                                                              (False, gru, cuda)])
    with pytest.raises(InputError, match="true, but a CUDA graph needs a CUDA device"):
        graphs_wanted(True, gru, cpu, 2)
    with pytest.raises(InputError, match="true, but the LSTM encoder runs as a packed sequence"):
        graphs_wanted(True, lstm, cuda, 2)


def test_the_process_groups_backend_can_be_gloo_on_a_gpu_and_nothing_unknown(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv("RNNSEARCH_DIST_BACKEND", raising=False)
    assert (backend_for(cpu), backend_for(cuda)) == ("gloo", "nccl")
    monkeypatch.setenv("RNNSEARCH_DIST_BACKEND", "gloo")
    assert backend_for(cuda) == "gloo"
    for bad, device in (("mpi", cuda), ("nccl", cpu)):
        monkeypatch.setenv("RNNSEARCH_DIST_BACKEND", bad)
        with pytest.raises(InputError, match=f"RNNSEARCH_DIST_BACKEND='{bad}': expected gloo, or nccl on a CUDA"):
            backend_for(device)


@pytest.mark.slow
def test_the_benchmark_times_one_and_two_processes_and_projects_from_what_it_measured(tmp_path: Path):
    """On the CPU (no graphs: the phases run eagerly), tiny sizes: both configurations under torchrun, every
    process's replay alone, and the projection's figures recomputed from the measured ones."""
    from rnnsearch.bench.dp_graphs import run_bench_dp_graphs
    from rnnsearch.bench.speed import Setup

    r = run_bench_dp_graphs(Setup(size="bench", batch=4, threads=1, device="cpu"), 6, 1, ["fp32"], 2,
                            str(tmp_path / "dp.json"))
    assert json.loads((tmp_path / "dp.json").read_text()) == r
    one, two = r["runs"]
    assert (one["processes"], two["processes"], one["backend"], one["graphs"]) == (1, 2, "gloo", False)
    assert one["gradient_bytes"] == 4 * one["parameters"] == two["gradient_bytes"]
    assert [x["rank"] for x in two["ranks"]] == [0, 1] and all(x["alone_s"] > 0 < x["allreduce_s"] for x in two["ranks"])
    p = r["projections"]["fp32"]
    t_replay = max(x["alone_s"] for x in two["ranks"])
    assert (p["t1_s"], p["t_replay_s"]) == (one["t1_s"], t_replay)
    for n in (4, 8):
        for link, bandwidth in (("nvlink4", 450e9), ("ethernet_100gbit", 12.5e9)):
            comm = 2 * (n - 1) / n * one["gradient_bytes"] / bandwidth
            assert p["devices"][str(n)][link]["speedup"] == pytest.approx(n * p["t1_s"] / (t_replay + comm), abs=0.01)


# On a GPU: two processes on one device (gloo), graphs against eager.

def _graphed_against_eager(rank: int, world: int, store: str, precision: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        model, _ = model_and_batch("rnnsearch", {}, seed=5, device="cuda")
        twin = copy.deepcopy(model)
        before = [p.detach().clone() for p in model.parameters()]
        bf16 = precision == "bf16"
        graphed = DataParallelGraphs(model, make_optimizer(model.parameters(), "adadelta", 1.0, capturable=True),
                                     bf16, 1.0)
        eager = DataParallelGraphs(twin, make_optimizer(twin.parameters(), "adadelta", 1.0, capturable=True), bf16,
                                   1.0, graphs=False)
        batches = minibatches()
        batches = batches[:2] + [batches[0], batches[1], batches[0], batches[3]]  # shapes met again: replays
        losses = []
        for b, lr in zip(batches, LRS):
            part, weight = b.share(rank, world)
            loss, _ = graphed(part, weight, b.x.size(0), lr)
            losses.append(loss.item())
            with static_encoder(twin):
                eager(padded(part), weight, b.x.size(0), lr)
        torch.cuda.synchronize()
        diff = torch.stack([(p - q).float().norm() for p, q in zip(model.parameters(), twin.parameters())]).norm()
        step = torch.stack([(q - b).float().norm() for q, b in zip(twin.parameters(), before)]).norm()
        Path(out, f"rank{rank}.json").write_text(json.dumps({
            "relative": float(diff / step), "graphs": len(graphed.graphs), "seen": len(graphed.seen),
            "step_graph": graphed.step_graph is not None, "losses": losses,
            "weights": [float(p.double().sum()) for p in model.parameters()]}))
    finally:
        dist.destroy_process_group()


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_two_processes_on_one_gpu_replay_the_eager_phased_updates(tmp_path: Path, precision: str):
    """Six updates (shapes seen twice are recorded, then replayed on new data) in two processes on one GPU: the
    parameters' change within 1 % of the same phases run eagerly (test_graphs.py's tolerance), the same weights on
    both processes."""
    mp.spawn(_graphed_against_eager, args=(2, str(tmp_path / "store"), precision, str(tmp_path)), nprocs=2)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    for r in (r0, r1):
        assert r["relative"] < 0.01, r
        assert r["graphs"] >= 1 and r["step_graph"]
    assert r0["weights"] == r1["weights"]


@pytest.mark.cuda
def test_a_two_process_graphed_training_on_one_gpu_stops_at_sigterm_and_resumes(data: Path, tmp_path: Path):  # noqa: F811
    """`rnnsearch train` of 2 processes on one GPU (gloo) with train.cuda_graphs: true, SIGTERMed mid-run, both
    stop at one checkpoint (exit 75); restarted, they finish the budget from graphs."""
    p = yaml.safe_load((data / "params.yaml").read_text())
    p["train"].update(device="cuda", cuda_graphs=True, processes=2, checkpoint_every=0, validate_every=0,
                      log_every=5, max_updates=200)
    p["models"]["rnnsearch-50"]["max_updates"] = 200
    params = tmp_path / "graphs2.yaml"
    params.write_text(yaml.safe_dump(p))
    out = tmp_path / "run"
    out.mkdir()
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "RNNSEARCH_DIST_BACKEND": "gloo"}

    def start():
        return [subprocess.Popen([sys.executable, "-m", "rnnsearch.cli", *train_args(data, params, out)],
                                 env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True) for r in (0, 1)]

    procs, deadline = start(), time.time() + 300
    while "rnnsearch-50 update 40/" not in ((out / "train.log").read_text() if (out / "train.log").exists() else ""):
        assert all(q.poll() is None for q in procs) and time.time() < deadline, [q.communicate() for q in procs]
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGTERM)
    assert [q.wait(timeout=300) for q in procs] == [EXIT_INTERRUPTED] * 2, [q.stderr.read()[-2000:] for q in procs]
    stopped_at = torch.load(out / "checkpoint.pt", weights_only=True)["update"]
    assert 40 <= stopped_at < 200
    env["MASTER_PORT"] = str(free_port())
    procs = start()
    assert [q.wait(timeout=600) for q in procs] == [0, 0], [q.stderr.read()[-2000:] for q in procs]
    log = (out / "train.log").read_text()
    assert "updates from CUDA graphs" in log and "gloo backend" in log
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["updates"] == 200 and [(r["start"], r["end"]) for r in stats["runs"]] == [(0, stopped_at),
                                                                                           (stopped_at, 200)]
