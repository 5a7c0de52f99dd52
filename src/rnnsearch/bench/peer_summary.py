"""The side-by-side benchmark's summary (`rnnsearch bench-peer`, bench/peer.py): medians over rounds of each
side's figures, the ratios ours/JoeyNMT, utilisation against the best GEMM rate of the run, and its Markdown table."""

from __future__ import annotations

import statistics

from rnnsearch.bench.speed import gemm_size

# JoeyNMT's RNN decoder in our switches: GRU, additive attention queried with the new state, input feeding,
# o_t = tanh(W[a_t; s_t]) before the output layer, no dropout (the peer benchmark's README lists the differences
# from the paper's decoder). Bridge, reset-gate placement and biases differ in details that cost no FLOPs.
CLOSEST = ("luong", {"cell": "gru", "attention": "additive", "dropout": 0.0})
MODELS = {"closest": CLOSEST, "rnnsearch": ("rnnsearch", {})}
# our training runs per round: (model, batching, precision, CUDA graphs); the decodes use the first runs' weights
TRAIN_RUNS = (("closest", "sorted", "fp32", False), ("closest", "random", "fp32", False),
              ("rnnsearch", "sorted", "fp32", False))
BF16_RUN = ("closest", "sorted", "bf16", False)  # where the CPU has native bf16 (runtime.native_bf16_cpu)
# on a GPU, also as the training stage runs there by default (train.cuda_graphs: auto, training/graphs.py)
GRAPH_RUNS = (("closest", "sorted", "fp32", True), ("rnnsearch", "sorted", "fp32", True))


def run_key(name: str, batching: str, precision: str, graphs: bool) -> str:
    """A training run's name in the summary: closest_sorted, closest_sorted_bf16, rnnsearch_sorted_graphs, …"""
    return f"{name}_{batching}" + ("_bf16" if precision == "bf16" else "") + ("_graphs" if graphs else "")


def _median(xs):
    """The median of the values that are there (None for none)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(runs: dict, decode: list[str]) -> dict:
    """Medians over rounds of each side's figures and the ratios ours/peer (the targets in docs/benchmarks.md)."""
    peer_train = [p["train"] for p in runs["peer"]]
    peer_tok = _median([p["trg_tok_per_s"] for p in peer_train])
    peer_exec = _median([p["trg_tok_per_s"] / p["trg_padding_efficiency"] for p in peer_train])

    def ours(*run_and_key):
        return _median([o[run_and_key[-1]] for o in runs["ours_train"] if run_and_key[:-1] == (
            o["model"], o["batching"], o.get("precision", "fp32"), o.get("cuda_graphs", False))])

    s = {"peer": {"target_tokens_per_s": peer_tok, "executed_target_positions_per_s": round(peer_exec, 1),
                  "target_padding_efficiency": _median([p["trg_padding_efficiency"] for p in peer_train]),
                  "gflop_per_target_token": _median([p["gflop_per_trg_tok_useful"] for p in peer_train]),
                  "gflops_useful": _median([p["achieved_gflops_useful"] for p in peer_train]),
                  "peak_rss_mb": _median([p["process_peak_rss_mb"] for p in peer_train])}}
    for run in (*TRAIN_RUNS, BF16_RUN, *GRAPH_RUNS):
        if ours(*run, "target_tokens_per_s") is None:
            continue
        s[run_key(*run)] = {"precision": run[2], **({"cuda_graphs": True} if run[3] else {}), **{
            k: ours(*run, k) for k in ("target_tokens_per_s", "executed_target_positions_per_s",
                                       "target_padding_efficiency", "gflop_per_target_token", "gflops_useful",
                                       "peak_rss_mb")}}
    ratios = {"train_target_tokens_per_s (closest, our batching)": s["closest_sorted"]["target_tokens_per_s"] / peer_tok,
              "train_executed_positions_per_s (closest, peer's random batches)":
                  s["closest_random"]["executed_target_positions_per_s"] / peer_exec,
              "train_target_tokens_per_s (rnnsearch, our batching)": s["rnnsearch_sorted"]["target_tokens_per_s"] / peer_tok}
    if "closest_sorted_bf16" in s:  # beside the fp32 targets, not one of them: the peer trains in fp32
        ratios["train_target_tokens_per_s (closest, our batching, bf16 autocast)"] = (
            s["closest_sorted_bf16"]["target_tokens_per_s"] / peer_tok)
    for name in ("closest", "rnnsearch"):  # on a GPU: as the training stage runs there (train.cuda_graphs: auto)
        if f"{name}_sorted_graphs" in s:
            ratios[f"train_target_tokens_per_s ({name}, our batching, CUDA graphs)"] = (
                s[f"{name}_sorted_graphs"]["target_tokens_per_s"] / peer_tok)
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
                           ("closest_sorted_bf16", "ours, closest, our batching, bf16 autocast"),
                           ("closest_sorted_graphs", "ours, closest, our batching, CUDA graphs"),
                           ("rnnsearch_sorted_graphs", "ours, RNNsearch, our batching, CUDA graphs")):
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
