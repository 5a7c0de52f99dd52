"""Our models against JoeyNMT 2.3.0, side by side in one run on the same machine and data.

`rnnsearch bench-peer` runs, per dataset of the peer benchmark (`bench.peer`: Multi30k, Europarl ≤50, made
by its prep_data.py and checked against its SHA256SUMS), `rounds` times in turn (A, B, A, B), since this
machine's speed drifts:
  1. the peer's training (its peer_joeynmt.sh, phase `train`);
  2. ours: the model closest to JoeyNMT's (`CLOSEST`) with our default batching (the paper's length-sorted blocks
     of 20 batches) and with the peer's batch composition (random batches of 80), and our RNNsearch at the same
     sizes with our default batching, all in fp32 as the peer; then the closest model with our batching under
     bf16 autocast (`train.precision: bf16`), beside the fp32 figures, only on a GPU or a CPU that multiplies bf16
     in hardware (AVX512-BF16 or AMX: elsewhere oneDNN emulates it, many times slower than fp32); on a GPU, both
     fp32 runs with our batching again from CUDA graphs (the training stage's default there); each run in a
     fresh process;
  3. the peer's fixed-length decodes (`greedy_fixed beam_fixed`: </s> blocked until N, every output N long, N the
     mean reference length with </s>);
  4. ours, the same decodes of the same 1000 test sentences, each in a fresh process.
Training as the peer's config: batches of 80 sentences, Adam 1e-3, clipping at 1, no dropout, the 8,000 most
frequent words per side, the first `warmup` updates untimed, the clock running from the end of the last untimed
update to the end of the last (batching included). Tokens count </s> (the loss positions), as the peer's do.

Utilisation: each side's useful training FLOP/s (its own closed-form count over the real tokens of the timed
batches: rnnsearch.bench.flops for ours, the peer benchmark's formula for JoeyNMT) divided by the best fp32 GEMM
rate measured in the run: in each of our training processes, before and after its updates (2048³ on the CPU,
the method of the peer's gemm_peak.py, with the same torch and threads). The peer's own `gemm` phase (seven
shapes, twice, about 40 s a round on the CPU) is not run: it timed the same product.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import astuple, dataclass
from pathlib import Path

import torch
import yaml

from rnnsearch.bench.data import in_fresh_process, peak_rss_mb
from rnnsearch.bench.flops import train_flops
from rnnsearch.bench.peer_summary import (
    add_utilisation,
    best_gemm,
    BF16_RUN,
    CLOSEST,
    GRAPH_RUNS,
    markdown,
    MODELS,
    run_key,
    summarise,
    TRAIN_RUNS,
)
from rnnsearch.bench.speed import TRAIN_SIZES, gemm_peak_gflops, machine, synchronizer
from rnnsearch.data.batching import PaperBatches
from rnnsearch.data.binarized import TokenPairs
from rnnsearch.data.vocab import Vocab, build_vocab
from rnnsearch.decoding.search import translate_ids
from rnnsearch.model import build_model
from rnnsearch.peer.experiment import check_peer_python
from rnnsearch.runtime import keep_freed_memory, native_bf16_cpu
from rnnsearch.textio import InputError, atomic_path, read_lines, write_json_atomic
from rnnsearch.training.graphs import UpdateGraphs, update
from rnnsearch.training.optimizers import make_optimizer

log = logging.getLogger("rnnsearch.bench.peer")

SIZES = TRAIN_SIZES["bench"]  # embeddings 256, hidden 512, alignment 512, maxout 256, 8000 words per side


def train_runs(device: str = "cpu") -> tuple:
    return TRAIN_RUNS + ((BF16_RUN,) if device == "cuda" or native_bf16_cpu() else ()) + (
        GRAPH_RUNS if device == "cuda" else ())


def _shortlist_and_ids(path: str):
    """The 8,000 most frequent words of a training file (the peer's voc_limit) and its sentences as ids."""
    sentences = [line.split() for line in read_lines(path)]
    vocab = build_vocab(Counter(w for words in sentences for w in words), SIZES["vocab"])
    return vocab, [vocab.encode(words) for words in sentences]


def _model(name: str, K_src: int, K_tgt: int):
    arch, overrides = MODELS[name]
    return build_model({"arch": arch, **{k: SIZES[k] for k in ("m", "n", "n_align", "l")}, **overrides},
                       K_src, K_tgt)


def fixed_length(test_tgt: str) -> int:
    """N of the fixed-length decodes: the mean reference length with </s>, rounded (the peer script's rule)."""
    lengths = [len(line.split()) + 1 for line in read_lines(test_tgt)]
    return int(sum(lengths) / len(lengths) + 0.5)


def _updater(model, optimizer, device: str, bf16: bool, graphs: bool):
    """The peer config's update (Adam 1e-3 as built, clipping at 1) of a minibatch on the CPU, eagerly or from CUDA
    graphs (their UpdateGraphs, or None), as a function returning the summed NLL."""
    if graphs:
        graphed = UpdateGraphs(model, optimizer, bf16, 1.0)
        return graphed, lambda b: graphed(b, 1e-3)[0]

    def eager(b):
        optimizer.zero_grad(set_to_none=True)
        return update(model, optimizer, b.to(device), bf16)[0]

    return None, eager


def train_ours(name: str, data: str, src: str, tgt: str, batching: str, updates: int, warmup: int, threads: int,
               seed: int, save: str, precision: str = "fp32", device: str = "cpu", graphs: bool = False) -> dict:
    """Train `name` for `updates` updates on data/train.{src,tgt} on `device`, the forward pass under bf16
    autocast if `precision` is bf16 (as train.py does), with `graphs` from CUDA graphs as train.py runs them
    (training/graphs.py: padded shapes, a graph recorded at a shape's second minibatch); time the updates after
    `warmup` (the device synchronised at both ends); save the weights to `save` and the shortlists beside them
    (`save`.{src,tgt}.tsv) for `decode_ours`."""
    keep_freed_memory()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    gemm = [gemm_peak_gflops(threads, device=device)]
    sync = synchronizer(device)
    sv, S = _shortlist_and_ids(f"{data}/train.{src}")
    tv, T = _shortlist_and_ids(f"{data}/train.{tgt}")
    model = _model(name, len(sv), len(tv)).to(device).train()
    optimizer = make_optimizer(model.parameters(), "adam", lr=1e-3)  # the peer config's
    batches = iter(PaperBatches(TokenPairs.from_lists(S, T), 80, 20 if batching == "sorted" else 1, seed))
    counts = Counter()
    useful = executed = 0
    graphed, one_update = _updater(model, optimizer, device, precision == "bf16", graphs)
    for step in range(updates):
        if step == warmup:
            sync()
            start, recorded = time.perf_counter(), len(graphed.graphs) if graphs else 0
        b = next(batches)
        loss = one_update(b)
        if step >= warmup:
            ty = [len(T[i]) for i in b.index]
            counts.update(sentences=len(ty), target=sum(ty), source=b.source_words, target_positions=len(ty) * max(ty))
            useful += sum(train_flops(model.cfg, len(tv), len(S[i]), len(T[i])) for i in b.index)
            executed += len(ty) * train_flops(model.cfg, len(tv), int(b.lengths.max()), max(ty))
    sync()
    seconds = time.perf_counter() - start
    gemm.append(gemm_peak_gflops(threads, device=device))
    torch.save(model.state_dict(), save)
    sv.save(f"{save}.{src}.tsv")
    tv.save(f"{save}.{tgt}.tsv")
    return {"model": name, "batching": batching, "precision": precision, "cuda_graphs": graphs,
            **({"graphs_recorded": len(graphed.graphs), "graphs_recorded_while_timed": len(graphed.graphs) - recorded,
                "shapes": len(graphed.seen)} if graphs else {}), "updates": updates, "warmup_updates": warmup,
            "timed_updates": updates - warmup, "timed_seconds": round(seconds, 2),
            "seconds_per_update": round(seconds / (updates - warmup), 3),
            "target_tokens_per_s": round(counts["target"] / seconds, 1),
            "source_target_tokens_per_s": round((counts["source"] + counts["target"]) / seconds, 1),
            "executed_target_positions_per_s": round(counts["target_positions"] / seconds, 1),
            "sentences_per_s": round(counts["sentences"] / seconds, 2),
            "target_padding_efficiency": round(counts["target"] / counts["target_positions"], 3),
            "mean_source_length": round(counts["source"] / counts["sentences"], 2),
            "mean_target_length": round(counts["target"] / counts["sentences"], 2),
            "gflop_per_target_token": round(useful / counts["target"] / 1e9, 4),
            "gflops_useful": round(useful / seconds / 1e9, 2), "gflops_executed": round(executed / seconds / 1e9, 2),
            "gemm_peak_gflops": [round(g, 1) for g in gemm], "peak_rss_mb": peak_rss_mb(),
            "parameters": model.num_parameters(), "last_loss_per_sentence": round(loss.item() / len(b.index), 2)}


def decode_ours(name: str, data: str, src: str, tgt: str, weights: str, beam: int, fixed: int, threads: int,
                device: str = "cpu") -> dict:
    """Decode data/test.{src} on `device` with every output exactly `fixed` long, batches of 80 (sorted by length,
    as ours are)."""
    keep_freed_memory()
    torch.set_num_threads(threads)
    sv, tv = Vocab.load(f"{weights}.{src}.tsv"), Vocab.load(f"{weights}.{tgt}.tsv")  # written by train_ours
    model = _model(name, len(sv), len(tv))
    model.load_state_dict(torch.load(weights))
    model.to(device).eval()
    test = [sv.encode(line.split()) for line in read_lines(f"{data}/test.{src}")]
    opts = dict(beam=beam, batch_size=80, max_len_a=0.0, max_len_b=fixed, min_len=fixed, device=device)
    sync = synchronizer(device)
    translate_ids(model, test[:80], **opts)  # warm-up: allocator, thread pool
    sync()
    start = time.perf_counter()
    hyps = translate_ids(model, test, **opts)
    sync()
    seconds = time.perf_counter() - start
    lengths = {len(h.tokens) for h in hyps}
    if lengths != {fixed}:
        raise RuntimeError(f"fixed-length decoding gave lengths {sorted(lengths)}, not {fixed}")
    return {"model": name, "beam": beam, "fixed_length": fixed, "sentences": len(test), "seconds": round(seconds, 2),
            "sentences_per_s": round(len(test) / seconds, 2), "output_tokens_per_s": round(len(test) * fixed / seconds, 1),
            "decoder_row_steps_per_s": round(len(test) * beam * fixed / seconds, 1), "peak_rss_mb": peak_rss_mb()}


def run_peer_script(script: str, python: str, dataset: str, phases: str, updates: int, warmup: int, threads: int,
                    work: str, raw: str, log_path: Path) -> dict:
    """One invocation of the peer benchmark; its result.json (copied, since the next training run deletes it)."""
    env = {**os.environ, "PEER_PYTHON": python, "DATASET": dataset, "PHASES": phases, "UPDATES": str(updates),
           "WARMUP_UPDATES": str(warmup), "THREADS": str(threads), "WORK_DIR": work, "RAW_DATA": raw}
    with open(log_path, "a", encoding="utf-8") as f:
        f.write(f"\n=== peer_joeynmt.sh DATASET={dataset} PHASES='{phases}' UPDATES={updates}\n")
        f.flush()
        p = subprocess.run(["bash", script], stdout=f, stderr=subprocess.STDOUT, env=env)
    if p.returncode != 0:
        tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
        raise InputError(f"{script} (DATASET={dataset}, PHASES={phases}) failed with exit status {p.returncode}; "
                         f"the end of {log_path}:\n{tail}")
    return json.loads(Path(work, f"run_{dataset}", "result.json").read_text())


def _checked_inputs(script: str, peer_python: str, raw: str, updates: int, warmup: int, device: str):
    """The peer script and raw data as absolute paths, and the peer Python's versions, once every input is checked."""
    if not 1 <= warmup <= updates - 2:  # the peer script's summary times at least 2 updates after at least 1
        raise InputError(f"--warmup {warmup} with --updates {updates}: the peer script leaves the first 1 to "
                         f"updates - 2 untimed; give 1 <= --warmup <= --updates - 2")
    versions = check_peer_python(peer_python)
    for what, path in (("--peer-script", script), ("--raw", raw)):
        if not Path(path).exists():
            raise InputError(f"{what}: {path} does not exist (the peer benchmark and its raw data: bench.peer, bench.data)")
    script = str(Path(script).resolve())
    check_peer_device(script, device)
    return script, str(Path(raw).resolve()), versions


def check_peer_device(script: str, device: str) -> None:
    """The peer's config (joeynmt_rnnsearch.yaml beside its script) must run JoeyNMT where ours run: `use_cuda`
    true for --device cuda, false for cpu."""
    config = Path(script).parent / "joeynmt_rnnsearch.yaml"
    try:
        use_cuda = yaml.safe_load(config.read_text(encoding="utf-8")).get("use_cuda", True)
    except (OSError, yaml.YAMLError, AttributeError) as e:
        raise InputError(f"{config}: not a readable JoeyNMT config ({e})") from None
    if bool(use_cuda) != (device == "cuda"):
        raise InputError(f"{config}: use_cuda: {use_cuda}, but --device is {device}; the two systems would run on "
                         f"different devices (switch the peer's config: use_cuda: {device == 'cuda'})")


@dataclass(frozen=True)
class PeerRuns:
    """What both systems run: training on each of `datasets` for `updates` updates (the first `warmup` untimed),
    `rounds` alternations (peer, ours), the fixed-length `decode`s, with `threads` torch threads, `seed`, on
    `device`."""

    datasets: list[str]
    updates: int
    warmup: int
    rounds: int
    decode: list[str]
    threads: int
    seed: int
    device: str = "cpu"


def run_bench_peer(peer_script: str, peer_python: str, raw: str, runs: PeerRuns, out: str, md: str, peer_log: str
                   ) -> dict:
    """Training and fixed-length decoding side by side with JoeyNMT (`peer_script` under `peer_python`)."""
    datasets, updates, warmup, rounds, decode, threads, seed, device = astuple(runs)
    script, raw, versions = _checked_inputs(peer_script, peer_python, raw, updates, warmup, device)
    joeynmt, torch_version = (versions.split() + ["?"])[:2]
    results = {"benchmark": "peer", "peer": f"JoeyNMT {joeynmt} (torch {torch_version}) via {script}", "machine": machine(),
               "threads": threads, "updates": updates, "warmup_updates": warmup, "rounds": rounds,
               "closest": {"arch": CLOSEST[0], **CLOSEST[1]}, "sizes": SIZES, "datasets": {}, "device": device,
               **({"gpu": torch.cuda.get_device_name(), "cuda": torch.version.cuda} if device == "cuda" else {}),
               "bf16": "measured (on the GPU)" if device == "cuda" else "measured (the CPU has AVX512-BF16 or AMX)"
               if native_bf16_cpu() else "not measured: the CPU has neither AVX512-BF16 nor AMX (oneDNN would emulate "
               "bf16)"}
    with tempfile.TemporaryDirectory(prefix="rnnsearch-bench-peer-") as tmp:
        peer_log = Path(peer_log)
        peer_log.unlink(missing_ok=True)
        for dataset in datasets:
            work = f"{tmp}/peer"
            data = f"{work}/data/{dataset}"
            runs = {"peer": [], "ours_train": [], "ours_decode": []}
            for r in range(rounds):
                log.info("%s round %d/%d: JoeyNMT training (%d updates)", dataset, r + 1, rounds, updates)
                runs["peer"].append({"round": r + 1, **run_peer_script(
                    script, peer_python, dataset, "train", updates, warmup, threads, work, raw, peer_log)})
                fixed = fixed_length(f"{data}/test.fr")
                for name, batching, precision, graphs in train_runs(device):
                    key = run_key(name, batching, precision, graphs)
                    weights = f"{tmp}/{dataset}_{name if key == name + '_sorted' else key}.pt"  # decoded: *_sorted
                    res = in_fresh_process(train_ours, name, data, "en", "fr", batching, updates, warmup, threads,
                                           seed, weights, precision, device, graphs)
                    log.info("%s ours %s: %.0f target tokens/s, %.0f executed positions/s", dataset, key,
                             res["target_tokens_per_s"], res["executed_target_positions_per_s"])
                    runs["ours_train"].append({"round": r + 1, **res})
                phases = " ".join(f"{d}_fixed" for d in decode)
                log.info("%s round %d/%d: JoeyNMT decoding (%s)", dataset, r + 1, rounds, phases)
                runs["peer"][-1].update({k: v for k, v in run_peer_script(
                    script, peer_python, dataset, phases, updates, warmup, threads, work, raw, peer_log).items()
                    if k.startswith("decode_")})
                for name in MODELS:
                    for d in decode:
                        res = in_fresh_process(decode_ours, name, data, "en", "fr", f"{tmp}/{dataset}_{name}.pt",
                                               12 if d == "beam" else 1, fixed, threads, device)
                        log.info("%s ours %s %s fixed %d: %.1f sentences/s", dataset, name, d, fixed,
                                 res["sentences_per_s"])
                        runs["ours_decode"].append({"round": r + 1, "search": d, **res})
            results["datasets"][dataset] = {"fixed_length": fixed, **runs, "summary": summarise(runs, decode)}
    results["gemm_peak_gflops"] = best_gemm(results)
    for ds in results["datasets"].values():
        add_utilisation(ds, results["gemm_peak_gflops"])
    write_json_atomic(out, results)
    with atomic_path(md) as tmp_md:
        Path(tmp_md).write_text(markdown(results), encoding="utf-8")
    return results
