"""Our models against JoeyNMT 2.3.0, side by side in one run on the same machine and data.

`rnnsearch bench-peer` runs, per dataset of the peer benchmark (`bench.peer`: Multi30k, Europarl ≤50, made
by its prep_data.py and checked against its SHA256SUMS), `rounds` times in turn (A, B, A, B), since this
machine's speed drifts:
  1. the peer's training (its peer_joeynmt.sh, phases `gemm train`);
  2. ours: the model closest to JoeyNMT's (`CLOSEST`) with our default batching (the paper's length-sorted blocks
     of 20 batches) and with the peer's batch composition (random batches of 80), and our RNNsearch at the same
     sizes with our default batching, all in fp32 as the peer; then the closest model with our batching under
     bf16 autocast (`train.precision: bf16`), reported beside the fp32 figures, not instead of them, and only on
     a CPU that multiplies bf16 in hardware (AVX512-BF16 or AMX: elsewhere oneDNN emulates it, many times slower
     than fp32, which measures nothing worth knowing); each run in a fresh process;
  3. the peer's fixed-length decodes (`greedy_fixed beam_fixed`: </s> blocked until N, every output N long, N the
     mean reference length with </s>);
  4. ours, the same decodes of the same 1000 test sentences, each in a fresh process.
Training as the peer's config: batches of 80 sentences, Adam 1e-3, clipping at 1, no dropout, the 8,000 most
frequent words per side, the first `warmup` updates untimed, the clock running from the end of the last untimed
update to the end of the last (batching included). Tokens count </s> (the loss positions), as the peer's do.

Utilisation: each side's useful training FLOP/s (its own closed-form count over the real tokens of the timed
batches: rnnsearch.bench.flops for ours, the peer benchmark's formula for JoeyNMT) divided by the best fp32 GEMM
rate measured anywhere in the run (the peer's gemm_peak.py before and after its runs; ours in our processes).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from rnnsearch.bench.data import in_fresh_process, peak_rss_mb
from rnnsearch.bench.speed import TRAIN_SIZES, gemm_peak_gflops, gemm_size, machine, synchronizer
from rnnsearch.runtime import native_bf16_cpu
from rnnsearch.textio import InputError, atomic_path, read_lines, write_json_atomic

log = logging.getLogger("rnnsearch.bench.peer")

# JoeyNMT's RNN decoder in our switches: GRU, additive attention queried with the new state, input feeding,
# o_t = tanh(W[a_t; s_t]) before the output layer, no dropout (the peer benchmark's README lists the differences
# from the paper's decoder). Bridge, reset-gate placement and biases differ in details that cost no FLOPs.
CLOSEST = ("luong", {"cell": "gru", "attention": "additive", "dropout": 0.0})
MODELS = {"closest": CLOSEST, "rnnsearch": ("rnnsearch", {})}
SIZES = TRAIN_SIZES["bench"]  # embeddings 256, hidden 512, alignment 512, maxout 256, 8000 words per side
# our training runs per round: (model, batching, precision); the decodes use the fp32 runs' weights
TRAIN_RUNS = (("closest", "sorted", "fp32"), ("closest", "random", "fp32"), ("rnnsearch", "sorted", "fp32"))
BF16_RUN = ("closest", "sorted", "bf16")  # where the CPU has native bf16 (runtime.native_bf16_cpu)


def train_runs(device: str = "cpu") -> tuple:
    return TRAIN_RUNS + ((BF16_RUN,) if device == "cuda" or native_bf16_cpu() else ())


def _shortlist_and_ids(path: str):
    """The 8,000 most frequent words of a training file (the peer's voc_limit) and its sentences as ids."""
    from rnnsearch.data.vocab import build_vocab

    sentences = [line.split() for line in read_lines(path)]
    vocab = build_vocab(Counter(w for words in sentences for w in words), SIZES["vocab"])
    return vocab, [vocab.encode(words) for words in sentences]


def _model(name: str, K_src: int, K_tgt: int):
    from rnnsearch.model import build_model

    arch, overrides = MODELS[name]
    return build_model({"arch": arch, **{k: SIZES[k] for k in ("m", "n", "n_align", "l")}, **overrides},
                       K_src, K_tgt)


def fixed_length(test_tgt: str) -> int:
    """N of the fixed-length decodes: the mean reference length with </s>, rounded (the peer script's rule)."""
    lengths = [len(line.split()) + 1 for line in read_lines(test_tgt)]
    return int(sum(lengths) / len(lengths) + 0.5)


def train_ours(name: str, data: str, src: str, tgt: str, batching: str, updates: int, warmup: int, threads: int,
               seed: int, save: str, precision: str = "fp32", device: str = "cpu") -> dict:
    """Train `name` for `updates` updates on data/train.{src,tgt} on `device`, the forward pass under bf16
    autocast if `precision` is bf16 (as train.py does); time the updates after `warmup` (the device synchronised
    at both ends); save the weights to `save` and the shortlists beside them (`save`.{src,tgt}.tsv) for
    `decode_ours`."""
    from rnnsearch.bench.flops import train_flops
    from rnnsearch.data.batching import PaperBatches
    from rnnsearch.data.binarized import TokenPairs
    from rnnsearch.runtime import keep_freed_memory
    from rnnsearch.training.train import batch_nll, make_optimizer

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
    for step in range(updates):
        if step == warmup:
            sync()
            start = time.perf_counter()
        b = next(batches)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = batch_nll(model, b.to(device))
        optimizer.zero_grad(set_to_none=True)
        (loss / len(b.index)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
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
    return {"model": name, "batching": batching, "precision": precision, "updates": updates, "warmup_updates": warmup,
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
    from rnnsearch.data.vocab import Vocab
    from rnnsearch.decoding.search import translate_ids
    from rnnsearch.runtime import keep_freed_memory

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
    from rnnsearch.peer.experiment import check_peer_python

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
    import yaml

    config = Path(script).parent / "joeynmt_rnnsearch.yaml"
    try:
        use_cuda = yaml.safe_load(config.read_text(encoding="utf-8")).get("use_cuda", True)
    except (OSError, yaml.YAMLError, AttributeError) as e:
        raise InputError(f"{config}: not a readable JoeyNMT config ({e})") from None
    if bool(use_cuda) != (device == "cuda"):
        raise InputError(f"{config}: use_cuda: {use_cuda}, but --device is {device}; the two systems would run on "
                         f"different devices (switch the peer's config: use_cuda: {device == 'cuda'})")


def _median(xs):
    """The median of the values that are there (None for none)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def run_bench_peer(script: str, peer_python: str, raw: str, datasets: list[str], updates: int, warmup: int,
                   rounds: int, decode: list[str], threads: int, seed: int, out: str, md: str, peer_log: str,
                   device: str = "cpu") -> dict:
    script, raw, versions = _checked_inputs(script, peer_python, raw, updates, warmup, device)
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
                runs["peer"].append({"round": r + 1, **run_peer_script(  # its gemm_peak.py times the CPU's
                    script, peer_python, dataset, "gemm train" if device == "cpu" else "train", updates, warmup,
                    threads, work, raw, peer_log)})
                fixed = fixed_length(f"{data}/test.fr")
                for name, batching, precision in train_runs(device):
                    res = in_fresh_process(train_ours, name, data, "en", "fr", batching, updates, warmup, threads,
                                           seed, f"{tmp}/{dataset}_{name}{'' if precision == 'fp32' else '_bf16'}.pt",
                                           precision, device)
                    log.info("%s ours %s %s %s: %.0f target tokens/s, %.0f executed positions/s", dataset, name,
                             batching, precision, res["target_tokens_per_s"], res["executed_target_positions_per_s"])
                    runs["ours_train"].append({"round": r + 1, **res})
                phases = " ".join(f"{d}_fixed" for d in decode)
                log.info("%s round %d/%d: JoeyNMT decoding (%s)", dataset, r + 1, rounds, phases)
                runs["peer"][-1].update({k: v for k, v in run_peer_script(
                    script, peer_python, dataset, phases, updates, warmup, threads, work, raw, peer_log).items()
                    if k.startswith("decode_") or k == "gemm"})
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


def summarise(runs: dict, decode: list[str]) -> dict:
    """Medians over rounds of each side's figures and the ratios ours/peer (the targets in docs/benchmarks.md)."""
    peer_train = [p["train"] for p in runs["peer"]]
    peer_tok = _median([p["trg_tok_per_s"] for p in peer_train])
    peer_exec = _median([p["trg_tok_per_s"] / p["trg_padding_efficiency"] for p in peer_train])

    def ours(name, batching, precision, key):
        return _median([o[key] for o in runs["ours_train"]
                        if (o["model"], o["batching"], o.get("precision", "fp32")) == (name, batching, precision)])

    s = {"peer": {"target_tokens_per_s": peer_tok, "executed_target_positions_per_s": round(peer_exec, 1),
                  "target_padding_efficiency": _median([p["trg_padding_efficiency"] for p in peer_train]),
                  "gflop_per_target_token": _median([p["gflop_per_trg_tok_useful"] for p in peer_train]),
                  "gflops_useful": _median([p["achieved_gflops_useful"] for p in peer_train]),
                  "peak_rss_mb": _median([p["process_peak_rss_mb"] for p in peer_train])}}
    for name, batching, precision in (*TRAIN_RUNS, BF16_RUN):
        if ours(name, batching, precision, "target_tokens_per_s") is None:
            continue
        s[f"{name}_{batching}" + ("_bf16" if precision == "bf16" else "")] = {"precision": precision, **{
            k: ours(name, batching, precision, k) for k in (
                "target_tokens_per_s", "executed_target_positions_per_s", "target_padding_efficiency",
                "gflop_per_target_token", "gflops_useful", "peak_rss_mb")}}
    ratios = {"train_target_tokens_per_s (closest, our batching)": s["closest_sorted"]["target_tokens_per_s"] / peer_tok,
              "train_executed_positions_per_s (closest, peer's random batches)":
                  s["closest_random"]["executed_target_positions_per_s"] / peer_exec,
              "train_target_tokens_per_s (rnnsearch, our batching)": s["rnnsearch_sorted"]["target_tokens_per_s"] / peer_tok}
    if "closest_sorted_bf16" in s:  # beside the fp32 targets, not one of them: the peer trains in fp32
        ratios["train_target_tokens_per_s (closest, our batching, bf16 autocast)"] = (
            s["closest_sorted_bf16"]["target_tokens_per_s"] / peer_tok)
    for d in decode:
        peer_rate = _median([p[f"decode_{d}_fixed"]["sent_per_s"] for p in runs["peer"]])
        s["peer"][f"{d}_fixed_sentences_per_s"] = peer_rate
        s["peer"][f"{d}_fixed_peak_rss_mb"] = _median([p[f"decode_{d}_fixed"]["process_peak_rss_mb"] for p in runs["peer"]])
        for name in MODELS:
            rate = _median([o["sentences_per_s"] for o in runs["ours_decode"] if o["model"] == name and o["search"] == d])
            s.setdefault(f"{name}_decode", {})[f"{d}_fixed_sentences_per_s"] = rate
            s[f"{name}_decode"][f"{d}_fixed_peak_rss_mb"] = _median(
                [o["peak_rss_mb"] for o in runs["ours_decode"] if o["model"] == name and o["search"] == d])
            ratios[f"{d}_fixed_sentences_per_s ({name})"] = rate / peer_rate
    s["ratios_ours_over_peer"] = {k: round(v, 2) for k, v in ratios.items()}
    return s


def best_gemm(results: dict) -> float:
    values = []
    for ds in results["datasets"].values():
        for p in ds["peer"]:
            values += [p.get("gemm", {}).get("peak_2048x2048x2048_gflops")]
        for o in ds["ours_train"]:
            values += o["gemm_peak_gflops"]
    return max(v for v in values if v)


def add_utilisation(ds: dict, gemm: float) -> None:
    s = ds["summary"]
    for key, row in s.items():
        if isinstance(row, dict) and "gflops_useful" in row and row.get("precision", "fp32") == "fp32":
            row["utilisation"] = round(row["gflops_useful"] / gemm, 3)  # of the fp32 peak: fp32 runs only


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [f"# Side by side with {results['peer']}", "",
             f"Machine: {m['processor']}, {m['cpus']} CPUs, torch {m['torch']}, {results['threads']} threads"
             f"{', both systems on ' + results['gpu'] + ' (CUDA ' + results['cuda'] + ')' if 'gpu' in results else ''}. "
             f"{results['rounds']} rounds (A, B, A, B), medians shown; {results['updates']} updates of 80 sentences "
             f"per training run, the first {results['warmup_updates']} untimed. "
             f"Best {gemm_size(results.get('device', 'cpu'))}³ fp32 GEMM in the run: "
             f"{results['gemm_peak_gflops']} GFLOP/s. closest = our `{results['closest']['arch']}` preset with "
             f"{', '.join(f'{k}: {v}' for k, v in results['closest'].items() if k != 'arch')}. bf16 autocast: "
             f"{results.get('bf16', 'measured')}.", ""]
    for name, ds in results["datasets"].items():
        s = ds["summary"]
        lines += [f"## {name} (fixed decoding length {ds['fixed_length']})", "",
                  "| training | target tok/s | executed positions/s | padding efficiency | GFLOP per target tok | "
                  "utilisation | peak RSS MB |", "|---|---|---|---|---|---|---|"]
        for key, label in (("peer", "JoeyNMT (random batches)"), ("closest_sorted", "ours, closest, our batching"),
                           ("closest_random", "ours, closest, peer's random batches"),
                           ("rnnsearch_sorted", "ours, RNNsearch, our batching"),
                           ("closest_sorted_bf16", "ours, closest, our batching, bf16 autocast")):
            if key in s:
                r = s[key]
                use = f"{r['utilisation']:.1%}" if "utilisation" in r else "n/a (bf16)"
                lines.append(f"| {label} | {r['target_tokens_per_s']:.0f} | {r['executed_target_positions_per_s']:.0f} | "
                             f"{r['target_padding_efficiency']:.3f} | {r['gflop_per_target_token']:.4f} | "
                             f"{use} | {r['peak_rss_mb']:.0f} |")
        lines += ["", "| fixed-length decoding, sentences/s (peak RSS MB) | " +
                  " | ".join(k.replace("_fixed_sentences_per_s", "") for k in s["peer"] if k.endswith("_sentences_per_s")) + " |",
                  "|---|" + "---|" * sum(k.endswith("_sentences_per_s") for k in s["peer"])]
        for key, label in (("peer", "JoeyNMT"), ("closest_decode", "ours, closest"), ("rnnsearch_decode", "ours, RNNsearch")):
            r = s[key]
            lines.append(f"| {label} | " + " | ".join(
                f"{r[k]:.1f} ({r[k.replace('sentences_per_s', 'peak_rss_mb')]:.0f})"
                for k in r if k.endswith("_sentences_per_s")) + " |")
        lines += ["", "| ratio ours / JoeyNMT | |", "|---|---|"]
        lines += [f"| {k} | {v:.2f}× |" for k, v in s["ratios_ours_over_peer"].items()]
        lines.append("")
    return "\n".join(lines)
