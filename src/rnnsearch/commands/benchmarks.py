"""The benchmarks' records (not part of the default run) and the JoeyNMT experiment's: see
rnnsearch.commands.pipeline for the pipeline's and rnnsearch.commands.record for what a record is."""

from __future__ import annotations

import argparse
import os

from rnnsearch.commands.record import Stage, arg, at_least, required

_BENCH_MODEL = (
    arg("--size", default="paper", choices=["paper", "bench"], help="paper: App. A; bench: the peer's"),
    arg("--batch", type=at_least(1), default=80, help="sentence pairs per update"),
    arg("--steps", type=at_least(1), default=3, help="timed updates after two warm-up updates"),
    arg("--threads", type=at_least(1), default=os.cpu_count(), help="torch threads"),
    arg("--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: CUDA where there is a GPU"),
    arg("--seed", type=int, default=1234, help="seed of the weights and the random batches"),
    arg("--out", required=True, help="the measurements (JSON)"),
)
_ARCHS = ["rnnsearch", "rnnencdec", "luong"]
_BENCH_UPDATE = (  # one training update of a model at a size: bench-train, bench-profile
    *_BENCH_MODEL, arg("--arch", default="rnnsearch", choices=_ARCHS, help="the model's preset"),
    arg("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
        help="tf32: float32 products on a GPU's TF32 tensor cores; bf16: autocast, as train.precision"),
    arg("--length", type=at_least(1), default=50, help="words per sentence, each side (</s> added)"),
)


def _system(spec: str) -> tuple[str, str, str]:
    """An argparse type: NAME=HYP=STATS as (NAME, HYP, STATS)."""
    if spec.count("=") != 2:
        raise argparse.ArgumentTypeError(f"expected NAME=HYP=STATS, got {spec!r}")
    return tuple(spec.split("="))


BENCHMARKS: tuple[Stage, ...] = (
    Stage("bench-decode", "benchmark: greedy and beam decoding speed of a trained model (not part of `all`)",
          "rnnsearch.bench.speed:run_bench_decode",
          (*required({"--checkpoint": "a trained model", "--src": "the tokenized sentences to decode",
                      "--src-vocab": "the source shortlist", "--out": "the measurements (JSON)"}),
           arg("--beams", type=at_least(1), nargs="+", default=[1, 12], help="the beam widths timed, in turn")),
          settings={"decode": "decode"}, runs_model=True),
    Stage("bench-train", "benchmark: training speed, utilisation and peak memory of one model size on random "
          "batches", "rnnsearch.bench.speed:run_bench_train",
          (*_BENCH_UPDATE, arg("--graph", action="store_true", help="CUDA: the update captured in a CUDA graph and "
                               "replayed (checked against the eager update)")), params=False, runs_model=True),
    Stage("bench-search", "benchmark: greedy and beam search speed of a model size (random weights, every output "
          "the reference's mean length) on a tokenized test set", "rnnsearch.bench.search_speed:run_bench_search",
          (*(x for x in _BENCH_MODEL if x.flags[0] != "--steps"),
           *required({"--src": "the tokenized source sentences", "--ref": "their tokenized references (the length)"}),
           arg("--arch", default="rnnsearch", choices=_ARCHS, help="the model's preset"),
           arg("--precision", default="fp32", choices=["fp32", "tf32"],
               help="tf32: float32 products on a GPU's TF32 tensor cores (decoding has no bf16 path)"),
           arg("--beams", type=at_least(1), nargs="+", default=[1, 12], help="the beam widths timed, in turn")),
          params=False, runs_model=True),
    Stage("bench-profile", "benchmark: where one training update's time goes (torch.profiler: operations, busy "
          "and GEMM time, launch gap) and its arithmetic and launch floors", "rnnsearch.bench.profile:run_bench_profile",
          (*_BENCH_UPDATE, arg("--graph", action="store_true", help="CUDA: the update replayed from a CUDA graph, as "
                               "training replays it")), params=False, runs_model=True),
    Stage("bench-ddp", "benchmark: data-parallel training, 1 process against N under torchrun (gloo, this "
          "machine's cores), and the projected 8-GPU all-reduce of a paper-size update", "rnnsearch.bench.ddp:run_bench_ddp",
          (*(x for x in _BENCH_MODEL if x.flags[0] not in ("--device", "--seed")),
           arg("--length", type=at_least(1), default=50, help="words per sentence, each side (</s> added)"),
           arg("--processes", type=at_least(1), default=2, help="data-parallel processes, --threads / N threads each")),
          params=False, runs_model=True),
    Stage("bench-dp-graphs", "benchmark: data-parallel updates from CUDA graphs, 1 process against N under "
          "torchrun (each process's replay alone, the all-reduce apart) and the 4- and 8-GPU projection from them",
          "rnnsearch.bench.dp_graphs:run_bench_dp_graphs",
          (*(x for x in _BENCH_MODEL if x.flags[0] != "--seed"),
           arg("--length", type=at_least(1), default=50, help="words per sentence, each side (</s> added)"),
           arg("--precisions", nargs="+", default=["bf16", "fp32"], choices=["fp32", "tf32", "bf16"],
               help="the precisions timed, in turn"),
           arg("--processes", type=at_least(2), default=2, help="N: the processes compared with 1 (RNNSEARCH_DIST_"
               "BACKEND=gloo puts them on one GPU)")),
          params=False, runs_model=True),
    Stage("bench-scaling", "benchmark: training time and memory per update against sentence length (10-80 words)",
          "rnnsearch.bench.speed:run_bench_scaling",
          (*_BENCH_MODEL, arg("--archs", nargs="+", default=["rnnsearch", "rnnencdec"], choices=_ARCHS,
                              help="the presets timed"),
           arg("--lengths", type=at_least(1), nargs="+", default=[10, 20, 40, 60, 80],
               help="sentence lengths (words, each side)"),
           arg("--figure", required=True, help="PNG: time and memory per update against length")),
          params=False, runs_model=True),
    Stage("bench-memory", "benchmark: a training update of RNNsearch with each alignment model with memory "
          "against the paper's RNNsearch on the CPU, in one process, at the paper's and the embedded corpus's sizes",
          "rnnsearch.bench.memory:run_bench_memory",
          (arg("--sizes", nargs="+", default=["paper", "embedded"], choices=["paper", "embedded", "bench"],
               help="paper: App. A, batch 80; embedded: params.yaml's model, batch 40; bench: the peer's"),
           arg("--length", type=at_least(1), default=50, help="words per sentence, each side (</s> added)"),
           arg("--steps", type=at_least(1), default=5, help="timed rounds (one update of each model) after two "
               "untimed ones"),
           arg("--threads", type=at_least(1), default=os.cpu_count(), help="torch threads"),
           arg("--seed", type=int, default=1234, help="seed of the weights and the random batches"),
           arg("--out", required=True, help="the measurements (JSON)")),
          params=False, runs_model=True),
    Stage("bench-data", "benchmark: tokenization throughput per core and shortlist memory on real text; WMT'14 "
          "projection", "rnnsearch.bench.data:run_bench_data",
          (arg("--raw", nargs=2, action="append", default=[], metavar=("LANG", "FILE"), help="raw text to tokenize"),
           arg("--pretokenized", nargs=2, action="append", default=[], metavar=("LANG", "FILE"),
               help="Moses-tokenized, XML-escaped text (the LIUM path)"),
           arg("--out", required=True, help="JSON"), arg("--md", required=True, help="Markdown table")),
          params=False),
    Stage("bench-scale", "benchmark: every data stage and training start-up on generated WMT-shaped corpora of "
          "millions of pairs (time, peak RSS, PSS of 2 processes); a projection to 12M and 36M",
          "rnnsearch.bench.scale:run_bench_scale",
          (arg("--millions", type=float, nargs="+", default=[1.0, 4.0], help="N: corpus sizes, millions of pairs"),
           arg("--out", required=True, help="JSON"), arg("--md", required=True, help="Markdown table"),
           arg("--work", help="a folder for the corpora (several GB at 4M pairs; default: scale-work beside --out)")),
          params=False),
    Stage("bench-explorer", "benchmark: the explorer page at the paper's scale (generated: 3,003 sentences, 5 "
          "models): its size, build time and load time in headless Chromium", "rnnsearch.bench.explorer_load:run_bench_explorer",
          (arg("--sentences", type=at_least(1), default=3003, help="test sentences (newstest2014: 3,003)"),
           arg("--loads", type=at_least(1), default=3, help="page loads timed in Chromium (the median is reported)"),
           arg("--seed", type=int, default=1234, help="seed of the generated text and attention"),
           arg("--out", required=True, help="JSON")),
          params=False),
    Stage("rehearse", "benchmark: the paper's configuration end to end on this machine (paper.yaml's DAG on a "
          "generated corpus of N million pairs and your real dev and test text, a few hundred updates per model): "
          "every job's time and memory, and the projection of the paper's run (rehearsal.json)",
          "rnnsearch.bench.rehearsal:run_rehearse",
          (arg("--dev", nargs="+", required=True, metavar="PREFIX",
               help="the dev text: <PREFIX>.en and <PREFIX>.fr, raw (the paper: newstest2012 newstest2013)"),
           arg("--test", required=True, metavar="PREFIX", help="the test text (the paper: newstest2014)"),
           arg("--out-dir", required=True, help="a new folder: the workspace, its results and rehearsal.json"),
           arg("--millions", type=float, default=4.0, help="generated training pairs, in millions"),
           arg("--updates", type=at_least(2), default=300, help="updates of each model"),
           arg("--validations", type=at_least(1), default=2, help="validations of each model"),
           arg("--cores", type=at_least(1), default=os.cpu_count(), help="Snakemake's --cores"),
           arg("--shards", type=at_least(1), help="prepare.shards (default: --cores; the paper's overlay: 64)"),
           arg("--models", nargs="+", help="a subset of paper.yaml's models (default: all five)"),
           arg("--seed", type=int, default=1, help="seed of the generated corpus"),
           arg("--precision", choices=["fp32", "bf16"],
               help="train.precision of the trainings (default: paper.yaml's, bf16; fp32 on a CPU without bf16 "
                    "matrix instructions, where bf16 products are emulated and many times slower)")),
          params=False),
    Stage("bench-peer", "benchmark: training and fixed-length decoding side by side with JoeyNMT 2.3.0 "
          "(A, B, A, B)", "rnnsearch.bench.peer:run_bench_peer",
          (arg("--peer-script", required=True, help="the peer benchmark's script (peer_joeynmt.sh)"),
           arg("--peer-python", required=True, help="a Python with JoeyNMT 2.3.0 (peer.python)"),
           arg("--raw", required=True, help="the raw corpora the peer's prep_data.py reads"),
           arg("--datasets", nargs="+", default=["multi30k", "europarl"], choices=["multi30k", "europarl"],
               help="the corpora both systems train on"),
           arg("--updates", type=at_least(1), default=60, help="training updates per run, the first --warmup untimed"),
           arg("--warmup", type=at_least(1), default=10, help="untimed updates at the start of each run (ours "
               "and the peer's)"),
           arg("--rounds", type=at_least(1), default=2, help="alternations peer, ours (A, B, A, B, …)"),
           arg("--decode", nargs="*", default=["greedy", "beam"], choices=["greedy", "beam"],
               help="fixed-length decodes (beam: 12)"),
           arg("--threads", type=at_least(1), default=2, help="torch threads of each system"),
           arg("--device", default="cpu", choices=["cpu", "cuda"], help="where both systems run (cuda: the peer's "
               "config beside its script must say use_cuda: True)"),
           arg("--seed", type=int, default=42, help="both systems' seed"),
           arg("--out", required=True, help="the measurements (JSON)"), arg("--md", required=True, help="the Markdown table"),
           arg("--peer-log", required=True, help="the output of the peer's runs")),
          params=False, runs_model=True),
    Stage("bench", "benchmark: the summary table of one `snakemake bench` run (training, scaling, JoeyNMT side by "
          "side)", "rnnsearch.bench.speed:run_bench_summary",
          (arg("--train", nargs="+", required=True, help="bench-train JSON files"),
           arg("--scaling", required=True, help="the bench-scaling JSON"),
           arg("--peer", help="the bench-peer Markdown table"), arg("--out", required=True, help="the summary (Markdown)")),
          params=False),
    # the JoeyNMT experiment (rnnsearch.peer)
    Stage("peer", "experiment: JoeyNMT 2.3.0 trained on our data for as long as peer.model trained, then decoded",
          "rnnsearch.peer.experiment:run_peer",
          (arg("--train-stats", required=True, help="train_stats.json of peer.model: its training time"),
           *required({f"--{s}": f"the tokenized {s} files as a prefix: <prefix>.<src>, <prefix>.<tgt>"
                      for s in ("train", "dev", "test")}),
           arg("--out-dir", required=True, help="the peer's model, translations and statistics")),
          settings={"peer": "peer", "vocab": "vocab", "seed": "seed", "beam": "decode.beam",
                    "threads": "train.threads", "src": "data.src", "tgt": "data.tgt"},
          rules=("peer_joeynmt",), scripts=("peer/joeynmt_driver.py",)),
    Stage("compare", "experiment: two models of one run over their replicates: BLEU All, No UNK and by length, "
          "dev NLL, mean ± sd and Welch's p, and their dev-NLL curves", "rnnsearch.evaluation.compare:run_compare",
          (arg("--results", default="results", help="the run's results folder (scores/, models/)"),
           *required({"--a": "the first model (a key of params.yaml's `models`)", "--b": "the second model",
                      "--out-dir": "comparison.md, comparison.json and dev_nll.png"})),
          settings={"replicates": "replicates"}),
    Stage("compare-peer", "experiment: sacreBLEU, chrF, training time and words/s of our models and the peer",
          "rnnsearch.peer.experiment:run_compare",
          (arg("--system", action="append", required=True, metavar="NAME=HYP=STATS", type=_system,
               help="a system's name, detokenized test translations and train/peer stats JSON"),
           arg("--ref", required=True, help="the raw test references"),
           arg("--out-dir", required=True, help="the folder of the comparison (comparison.md, .json)")),
          rules=("peer",)),
)
