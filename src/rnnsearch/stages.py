"""The stage registry: one record per `rnnsearch <stage>` command, the one place a stage is declared.

A record names the stage, its help, the function it runs (imported only when it runs), its command-line
arguments, the params keys it reads, and how its arguments and params are passed to the function. `cli.py`
builds the parser from it; the Snakemake rules and `dvc.yaml` take each stage's params (`stage_params`: a change
of a value it reads reruns exactly its jobs) and source files (`stage_code`: the import closure of its module).
A new stage is one record here and one rule in `workflow/rules/`.
"""

from __future__ import annotations

import argparse
import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from rnnsearch.closure import PACKAGE, REPO, import_closure


@dataclass(frozen=True)
class Arg:
    """One command-line argument: argparse's flags and keywords."""

    flags: tuple[str, ...]
    kw: dict = field(default_factory=dict)


def arg(*flags: str, **kw) -> Arg:
    return Arg(flags, kw)


def required(*flags: str, **kw) -> tuple[Arg, ...]:
    """Several required arguments with the same keywords."""
    return tuple(Arg((f,), {"required": True, **kw}) for f in flags)


@dataclass(frozen=True)
class Stage:
    """`call(function, args, params)` runs the stage: `args` is argparse's namespace, `params` maps each key of
    `keys` (dotted, `{model}` filled in from --model) to its value in the validated params files."""

    name: str
    help: str
    run: str  # "module:function", the function the stage runs
    call: Callable[[Callable, argparse.Namespace, "Params"], Any]
    args: tuple[Arg, ...] = ()
    keys: tuple[str, ...] = ()
    params: bool = True  # takes --params (params.yaml and overlays)
    rules: tuple[str, ...] = ()  # the Snakemake rules that run it (default: its name with _ for -)
    scripts: tuple[str, ...] = ()  # files it runs in another process, from src/rnnsearch
    runs_model: bool = False  # a process that trains or decodes: rnnsearch.runtime's allocator settings

    @property
    def module(self) -> str:
        return self.run.split(":")[0]

    def function(self) -> Callable:
        module, name = self.run.split(":")
        return getattr(importlib.import_module(module), name)

    def keys_for(self, model: str | None = None) -> list[str]:
        return [k.format(model=model) for k in self.keys]


class Params(dict):
    """{dotted key: value} of exactly the keys a stage declares, from the params files given with --params."""

    def nested(self) -> dict:
        """The same values as a nested mapping ({"models": {"rnnsearch-50": …}, …})."""
        out: dict = {}
        for key, value in self.items():
            *parents, leaf = key.split(".")
            node = out
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        return out


def _split_systems(specs: list[str]) -> list[tuple[str, str, str]]:
    from rnnsearch.textio import InputError

    if bad := [s for s in specs if s.count("=") != 2]:
        raise InputError(f"--system {bad[0]!r}: expected NAME=HYP=STATS")
    return [tuple(spec.split("=")) for spec in specs]


def _translate(fn: Callable, a: argparse.Namespace, p: Params) -> None:
    from rnnsearch.textio import InputError

    if not a.out_dir:  # a user's sentences
        from rnnsearch.decoding.user import UserOptions, translate_user

        opts = UserOptions(a.beam, a.max_len_a, a.max_len_b, not a.no_length_norm, a.n_best, a.max_src_len,
                           a.src_lang, a.tgt_lang, normalize_punctuation=not a.no_normalize_punctuation)
        return translate_user(a.checkpoint, a.input, a.output, opts, a.src_vocab, a.tgt_vocab, a.alignment,
                              a.heatmap_dir)
    missing = [x for x in ("src", "ref", "src_vocab", "tgt_vocab") if not getattr(a, x)]
    if missing:
        raise InputError("the translate stage needs " + ", ".join("--" + x.replace("_", "-") for x in missing))
    from rnnsearch.distributed import started_as
    from rnnsearch.settings import DecodeConfig, typed

    started_as("decode.processes", p["decode"]["processes"], "translate")
    fn(a.checkpoint, a.src, a.ref, a.src_vocab, a.tgt_vocab, a.out_dir, typed(DecodeConfig, p["decode"]), p["data.tgt"])


def _train(fn: Callable, a: argparse.Namespace, p: Params) -> None:
    from rnnsearch import config as cfg

    from rnnsearch.distributed import started_as

    config = p.nested()
    started_as("train.processes", config["train"]["processes"], "train")
    fn(a.model, cfg.model_config(config, a.model), cfg.train_config(config, a.model), p["seed"] + a.replicate - 1,
       a.src_train, a.tgt_train, a.src_dev, a.tgt_dev, a.src_vocab, a.tgt_vocab, a.out_dir)


def each_replicate(patterns: list[str], replicates: int) -> list[str]:
    """Files named by patterns with a `{replicate}` field, for replicates 1..N, pattern by pattern (a name without
    the field is taken as it is)."""
    return list(dict.fromkeys(p.replace("{replicate}", str(r)) for p in patterns for r in range(1, replicates + 1)))


_REPLICATED = dict(nargs="+", required=True,
                   help="one file per model, `{replicate}` in its name standing for 1..`replicates`")


_PAIR = required("--src", "--tgt", "--out-src", "--out-tgt", "--stats")
_BENCH_MODEL = (
    arg("--size", default="paper", choices=["paper", "bench"], help="paper: App. A; bench: the peer's"),
    arg("--batch", type=int, default=80),
    arg("--steps", type=int, default=3, help="timed updates after two warm-up updates"),
    arg("--threads", type=int, default=os.cpu_count()),
    arg("--device", default="auto", choices=["auto", "cpu", "cuda"]),
    arg("--seed", type=int, default=1234),
    arg("--out", required=True),
)
_ARCHS = ["rnnsearch", "rnnencdec", "luong"]
_BENCH_UPDATE = (  # one training update of a model at a size: bench-train, bench-profile
    *_BENCH_MODEL, arg("--arch", default="rnnsearch", choices=_ARCHS),
    arg("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
        help="tf32: float32 products on a GPU's TF32 tensor cores; bf16: autocast, as train.precision"),
    arg("--length", type=int, default=50, help="words per sentence, each side (</s> added)"),
)

STAGES: tuple[Stage, ...] = (
    # 0-4: data (rnnsearch.data)
    Stage("download", "0. fetch one file of a downloaded source (resumed, retried, checked against recorded "
          "checksums)", "rnnsearch.data.corpus.multi30k:fetch",
          lambda f, a, p: f(a.file, a.out, p["data.multi30k.url"]),
          (arg("--file", required=True, help="e.g. train.en (data.source multi30k)"), arg("--out", required=True)),
          keys=("data.multi30k.url",)),
    Stage("download-archive", "0. fetch one WMT'14 archive (resumed, retried, checked against "
          "workflow/resources/wmt14.yaml)", "rnnsearch.data.corpus.wmt14:fetch_archive",
          lambda f, a, p: f(a.name, a.out, p["data.wmt14.records"], p["data.wmt14.lium_url"],
                            p["data.wmt14.statmt_url"]),
          (arg("--name", required=True, help="an archive of workflow/resources/wmt14.yaml, e.g. dev.tgz"),
           arg("--out", required=True)),
          keys=("data.wmt14.lium_url", "data.wmt14.statmt_url", "data.wmt14.records")),
    Stage("extract", "0. extract the members the corpus needs from one WMT'14 archive (tarfile's data filter)",
          "rnnsearch.data.corpus.wmt14:extract_archive", lambda f, a, p: f(a.name, a.archive, a.out_dir),
          required("--name", "--archive", "--out-dir"), params=False),
    Stage("corpus", "1. the raw train/dev/test text: generated (synthetic), copied (local) or from the downloads",
          "rnnsearch.data.corpus:run_corpus",
          lambda f, a, p: f(p["data"], p["seed"], a.out_dir, a.downloads, a.extracted),
          (arg("--out-dir", required=True),
           arg("--downloads", help="the folder of the downloaded files (data.source multi30k)"),
           arg("--extracted", help="the folder of the extracted archives (data.source wmt14)")),
          keys=("seed", "data")),
    Stage("shard", "2. cut the raw training text into shards (scatter)", "rnnsearch.data.prepare:run_shard",
          lambda f, a, p: f(a.src, a.tgt, a.out_src, a.out_tgt),
          (*required("--src", "--tgt"), *required("--out-src", "--out-tgt", nargs="+", help="one file per shard")),
          params=False),
    Stage("tokenize", "2. normalise the punctuation of one text file and Moses-tokenize it (sacremoses, no "
          "lowercasing)", "rnnsearch.data.text:run_tokenize",
          lambda f, a, p: f(a.input, a.output, a.lang, p["tokenize"]["aggressive_dash"], a.pretokenized,
                            p["data.unicode"], p["tokenize"]["normalize_punctuation"], a.stats),
          (*required("--lang", "--input", "--output"),
           arg("--stats", help="a JSON of the lines and of those whose punctuation was normalised"),
           arg("--pretokenized", action="store_true",
               help="the text is Moses-tokenized already (LIUM): undo its XML escapes, normalise token by token")),
          keys=("tokenize", "data.unicode"), rules=("tokenize", "tokenize_shard")),
    Stage("clean", "2. drop pairs with an empty side, too many words or a skewed length ratio from one shard",
          "rnnsearch.data.prepare:run_clean",
          lambda f, a, p: f(a.src, a.tgt, a.out_src, a.out_tgt, p["prepare.max_len"], p["prepare.max_ratio"],
                            a.stats),
          _PAIR, keys=("prepare.max_len", "prepare.max_ratio")),
    Stage("gather", "2. concatenate the clean shards in order (gather)", "rnnsearch.data.prepare:run_gather",
          lambda f, a, p: f(a.inputs, a.output), (arg("--inputs", nargs="+", required=True),
                                                  arg("--output", required=True)), params=False),
    Stage("count", "4. word counts of one shard, sorted by word (merged by the vocab stage)",
          "rnnsearch.data.vocab:run_count", lambda f, a, p: f(a.input, a.output), required("--input", "--output"),
          params=False),
    Stage("filter", "3. keep the pairs of at most N words (the ≤30 / ≤50 training sets)",
          "rnnsearch.data.prepare:run_filter",
          lambda f, a, p: f(a.src, a.tgt, a.out_src, a.out_tgt, a.max_len, a.stats),
          (arg("--max-len", type=int, required=True), *_PAIR), params=False),
    Stage("vocab", "4. build the source and target shortlists", "rnnsearch.data.vocab:run_vocab",
          lambda f, a, p: f(a.src, a.tgt, a.out_src, a.out_tgt, p["vocab"]["src_size"], p["vocab"]["tgt_size"],
                            a.stats, p["vocab"]["kind"], p["seed"]),
          (*required("--src", "--tgt", nargs="+", help="tokenized text or per-shard .counts files"),
           *required("--out-src", "--out-tgt", "--stats")),
          keys=("seed", "vocab")),
    Stage("data-report", "9. the data report: pairs and words after each step, length histograms, shortlist "
          "coverage", "rnnsearch.data.report:run_data_report",
          lambda f, a, p: f(a.corpus, a.tok_dir, a.clean_stats, a.filter_stats, a.vocab_dir, p["data.src"],
                            p["data.tgt"], a.out_md, a.out_json, a.out_png, (a.tok_shards_src, a.tok_shards_tgt),
                            p["prepare.max_len"], p["prepare.max_ratio"]),
          (*required("--corpus", "--tok-dir", "--vocab-dir", "--out-md", "--out-json", "--out-png"),
           arg("--clean-stats", nargs="+", required=True, help="the clean stage's JSON of every shard"),
           arg("--filter-stats", nargs="+", required=True, help="the filter stage's JSON of every ≤N set"),
           arg("--tok-shards-src", nargs="+", required=True, help="the tokenized training shards, in order"),
           arg("--tok-shards-tgt", nargs="+", required=True)),
          keys=("data.src", "data.tgt", "prepare.max_len", "prepare.max_ratio")),
    # 5: training (rnnsearch.training)
    Stage("train", "5. train one model of params.yaml's `models`", "rnnsearch.training.train:run_train", _train,
          (arg("--model", required=True, help="a key of params.yaml's `models`"),
           arg("--replicate", type=int, default=1, help="r: the r-th training of this model, with seed `seed` + r - 1"),
           *required("--src-train", "--tgt-train", "--src-dev", "--tgt-dev", "--src-vocab", "--tgt-vocab",
                     "--out-dir")),
          keys=("seed", "model", "train", "models.{model}"), runs_model=True),
    # 6: decoding (rnnsearch.decoding)
    Stage("translate", "6. beam-search the test set (All, and No-UNK with [UNK] forbidden); without --out-dir: "
          "translate raw sentences from --input or stdin to stdout", "rnnsearch.decoding.translate:run_translate",
          _translate,
          (arg("--checkpoint", required=True),
           *(arg(a, help="pipeline stage: the tokenized test set, vocabularies and output folder")
             for a in ("--src", "--ref", "--src-vocab", "--tgt-vocab", "--out-dir")),
           # translating your own sentences (no --out-dir)
           arg("--input", default="-", help="your own sentences: raw text, one per line (default: stdin)"),
           arg("--output", help="write the translations to this file (atomically) instead of stdout"),
           arg("--beam", type=int, default=12), arg("--max-len-a", type=float, default=1.5),
           arg("--max-len-b", type=int, default=10), arg("--no-length-norm", action="store_true"),
           arg("--max-src-len", type=int, default=150, metavar="N",
               help="split longer lines (in tokens) at sentence punctuation and translate them piece by piece"),
           arg("--n-best", type=int, default=1, metavar="N",
               help="print the N best translations per sentence as 'sentence ||| translation ||| log-prob ||| "
                    "log-prob per word' (sentences numbered from 0, as Moses does)"),
           arg("--src-lang", default="en"), arg("--tgt-lang", default="fr"),
           arg("--no-normalize-punctuation", action="store_true",
               help="leave typographic punctuation as it is (a model trained with tokenize.normalize_punctuation "
                    "off)"),
           arg("--alignment", action="store_true", help="draw each alignment as text on stderr"),
           arg("--heatmap-dir", help="write each alignment as a PNG heatmap here")),
          keys=("decode", "data.tgt"), rules=("translate", "translate_extra"), runs_model=True),
    # 7-9: evaluation (rnnsearch.evaluation)
    Stage("score", "7. BLEU (tokenized and sacreBLEU), All / No UNK / by sentence length",
          "rnnsearch.evaluation.score:run_score",
          lambda f, a, p: f(a.model, a.src, a.ref_tok, a.ref, a.hyp_dir, p["score"]["length_buckets"], a.out,
                            p["score"]["bootstrap_samples"], p["seed"]),
          required("--model", "--src", "--ref-tok", "--ref", "--hyp-dir", "--out"), keys=("seed", "score")),
    Stage("score-extra", "7. sacreBLEU and chrF of every model on the extra test sets (extra_tests)",
          "rnnsearch.evaluation.score:run_extra_scores", lambda f, a, p: f([tuple(e) for e in a.entry], a.out_dir),
          (arg("--entry", nargs=4, action="append", required=True, metavar=("SET", "MODEL", "HYP", "REF"),
               help="a test set's name, a model's name, its detokenized translations and the raw references"),
           arg("--out-dir", required=True)), params=False),
    Stage("tables", "8. Table 1 and Table 2, mean ± sd over replicates", "rnnsearch.evaluation.tables:run_tables",
          lambda f, a, p: f(*(each_replicate(x, p["replicates"]) for x in (a.scores, a.train_stats, a.hyps)),
                            a.ref_tok, p["score"]["bootstrap_samples"], a.out_dir),
          (arg("--scores", **_REPLICATED), arg("--train-stats", **_REPLICATED),
           arg("--hyps", **{**_REPLICATED, "help": "tokenized translations, in the order of --scores"}),
           *required("--ref-tok", "--out-dir")),
          keys=("score", "replicates")),
    Stage("figures", "8. Figure 2 (mean over replicates) and Figure 3", "rnnsearch.evaluation.plots:run_figures",
          lambda f, a, p: f(each_replicate(a.scores, p["replicates"]), a.attention, a.src, a.hyp, a.nounk,
                            p["figures"], p["seed"], a.out_dir),
          (arg("--scores", **_REPLICATED), *required("--attention", "--src", "--hyp", "--nounk", "--out-dir")),
          keys=("seed", "figures", "replicates")),
    Stage("aer", "8. alignment error rate of the attention against gold links (reference forced)",
          "rnnsearch.evaluation.aer:run_aer",
          lambda f, a, p: f(a.checkpoint, a.src, a.ref, a.src_vocab, a.tgt_vocab, a.gold, p["aer.format"],
                            p["aer.threshold"], p["decode.batch_size"], p["decode.device"], a.out),
          required("--checkpoint", "--src", "--ref", "--src-vocab", "--tgt-vocab", "--gold", "--out"),
          keys=("aer.format", "aer.threshold", "decode.batch_size", "decode.device"), runs_model=True),
    Stage("report", "9. the results page", "rnnsearch.evaluation.report:run_report",
          lambda f, a, p: f(p.nested(), a.table1, a.table2, a.figure2, a.alignments,
                            each_replicate(a.scores, p["replicates"]), a.src, a.ref,
                            dict(h.split("=", 1) for h in a.hyps), a.out, a.aer),
          (*required("--table1", "--table2", "--figure2"), arg("--alignments", nargs="+", required=True),
           arg("--scores", **_REPLICATED),
           *required("--src", "--ref"), arg("--hyps", nargs="+", required=True, metavar="MODEL=FILE"),
           arg("--aer", help="the aer stage's JSON, when there is one"), arg("--out", required=True)),
          keys=("seed", "replicates", "data", "tokenize", "vocab", "model", "models", "train", "decode", "score",
                "aer", "figures")),
    # benchmarks (rnnsearch.bench), not part of the default run
    Stage("bench-decode", "benchmark: greedy and beam decoding speed of a trained model (not part of `all`)",
          "rnnsearch.bench.speed:run_bench_decode",
          lambda f, a, p: f(a.checkpoint, a.src, a.src_vocab, a.beams, p["decode"]["batch_size"],
                            p["decode"]["max_len_a"], p["decode"]["max_len_b"], p["decode"]["threads"], a.out),
          (*required("--checkpoint", "--src", "--src-vocab", "--out"), arg("--beams", type=int, nargs="+",
                                                                            default=[1, 12])),
          keys=("decode",), runs_model=True),
    Stage("bench-train", "benchmark: training speed, utilisation and peak memory of one model size on random "
          "batches", "rnnsearch.bench.speed:run_bench_train",
          lambda f, a, p: f(a.arch, a.size, a.batch, a.length, a.steps, a.threads, a.device, a.seed, a.out,
                            precision=a.precision),
          _BENCH_UPDATE, params=False, runs_model=True),
    Stage("bench-profile", "benchmark: where one training update's time goes (torch.profiler: operations, busy "
          "and GEMM time, launch gap) and its arithmetic and launch floors", "rnnsearch.bench.profile:run_bench_profile",
          lambda f, a, p: f(a.arch, a.size, a.batch, a.length, a.steps, a.threads, a.device, a.seed, a.precision,
                            a.out),
          _BENCH_UPDATE, params=False, runs_model=True),
    Stage("bench-ddp", "benchmark: data-parallel training, 1 process against N under torchrun (gloo, this "
          "machine's cores), and the projected 8-GPU all-reduce of a paper-size update", "rnnsearch.bench.ddp:run_bench_ddp",
          lambda f, a, p: f(a.size, a.batch, a.length, a.steps, a.threads, a.processes, a.out),
          (*(x for x in _BENCH_MODEL if x.flags[0] not in ("--device", "--seed")),
           arg("--length", type=int, default=50, help="words per sentence, each side (</s> added)"),
           arg("--processes", type=int, default=2, help="data-parallel processes, --threads / N threads each")),
          params=False, runs_model=True),
    Stage("bench-scaling", "benchmark: training time and memory per update against sentence length (10-80 words)",
          "rnnsearch.bench.speed:run_bench_scaling",
          lambda f, a, p: f(a.archs, a.size, a.lengths, a.batch, a.steps, a.threads, a.device, a.seed, a.out,
                            a.figure),
          (*_BENCH_MODEL, arg("--archs", nargs="+", default=["rnnsearch", "rnnencdec"], choices=_ARCHS),
           arg("--lengths", type=int, nargs="+", default=[10, 20, 40, 60, 80]),
           arg("--figure", required=True, help="PNG: time and memory per update against length")),
          params=False, runs_model=True),
    Stage("bench-data", "benchmark: tokenization throughput per core and shortlist memory on real text; WMT'14 "
          "projection", "rnnsearch.bench.data:run_bench_data",
          lambda f, a, p: f([tuple(r) for r in a.raw], [tuple(r) for r in a.pretokenized], a.out, a.md),
          (arg("--raw", nargs=2, action="append", default=[], metavar=("LANG", "FILE"), help="raw text to tokenize"),
           arg("--pretokenized", nargs=2, action="append", default=[], metavar=("LANG", "FILE"),
               help="Moses-tokenized, XML-escaped text (the LIUM path)"),
           arg("--out", required=True, help="JSON"), arg("--md", required=True, help="Markdown table")),
          params=False),
    Stage("bench-peer", "benchmark: training and fixed-length decoding side by side with JoeyNMT 2.3.0 "
          "(A, B, A, B)", "rnnsearch.bench.peer:run_bench_peer",
          lambda f, a, p: f(a.peer_script, a.peer_python, a.raw, a.datasets, a.updates, a.warmup, a.rounds,
                            a.decode, a.threads, a.seed, a.out, a.md, a.peer_log),
          (arg("--peer-script", required=True, help="the peer benchmark's script (peer_joeynmt.sh)"),
           arg("--peer-python", required=True, help="a Python with JoeyNMT 2.3.0 (peer.python)"),
           arg("--raw", required=True, help="the raw corpora the peer's prep_data.py reads"),
           arg("--datasets", nargs="+", default=["multi30k", "europarl"], choices=["multi30k", "europarl"]),
           arg("--updates", type=int, default=60, help="training updates per run, the first --warmup untimed"),
           arg("--warmup", type=int, default=10),
           arg("--rounds", type=int, default=2, help="alternations peer, ours (A, B, A, B, …)"),
           arg("--decode", nargs="*", default=["greedy", "beam"], choices=["greedy", "beam"],
               help="fixed-length decodes (beam: 12)"),
           arg("--threads", type=int, default=2), arg("--seed", type=int, default=42),
           arg("--out", required=True), arg("--md", required=True, help="the Markdown table"),
           arg("--peer-log", required=True, help="the output of the peer's runs")),
          keys=("peer.python",), params=False, runs_model=True),
    Stage("bench", "benchmark: the summary table of one `snakemake bench` run (training, scaling, JoeyNMT side by "
          "side)", "rnnsearch.bench.speed:run_bench_summary",
          lambda f, a, p: f(a.train, a.scaling, a.peer, a.out),
          (arg("--train", nargs="+", required=True, help="bench-train JSON files"),
           arg("--scaling", required=True, help="the bench-scaling JSON"),
           arg("--peer", help="the bench-peer Markdown table"), arg("--out", required=True)),
          params=False),
    # the JoeyNMT experiment (rnnsearch.peer)
    Stage("peer", "experiment: JoeyNMT 2.3.0 trained on our data for as long as peer.model trained, then decoded",
          "rnnsearch.peer.experiment:run_peer",
          lambda f, a, p: f(p["peer"]["python"], p["peer"]["config"], a.train_stats, a.train, a.dev, a.test,
                            p["data.src"], p["data.tgt"], (p["vocab"]["src_size"], p["vocab"]["tgt_size"]),
                            p["decode.beam"], p["train.threads"], p["seed"], a.out_dir),
          (arg("--train-stats", required=True, help="train_stats.json of peer.model: its training time"),
           *required("--train", "--dev", "--test", help="tokenized files as a prefix: <prefix>.<src>, <prefix>.<tgt>"),
           arg("--out-dir", required=True)),
          keys=("seed", "peer", "vocab", "decode.beam", "train.threads", "data.src", "data.tgt"),
          rules=("peer_joeynmt",), scripts=("peer/joeynmt_driver.py",)),
    Stage("compare-peer", "experiment: sacreBLEU, chrF, training time and words/s of our models and the peer",
          "rnnsearch.peer.experiment:run_compare",
          lambda f, a, p: f(_split_systems(a.system), a.ref, a.out_dir),
          (arg("--system", action="append", required=True, metavar="NAME=HYP=STATS",
               help="a system's name, detokenized test translations and train/peer stats JSON"),
           arg("--ref", required=True, help="the raw test references"), arg("--out-dir", required=True)),
          rules=("peer",)),
    # tools
    Stage("check-params", "validate params.yaml (and overlays) and print the merged result",
          "rnnsearch.config:dump", lambda f, a, p: print(f(a.params), end="")),
    Stage("dvc-yaml", "write dvc.yaml from the Snakemake workflow (keeps the two in step)",
          "rnnsearch.dvcyaml:run_dvc_yaml", lambda f, a, p: f(a.output, a.check),
          (arg("--output", default="dvc.yaml"),
           arg("--check", action="store_true", help="fail if dvc.yaml differs from what would be written")),
          params=False),
)

BY_NAME = {s.name: s for s in STAGES}


def stage_of_rule(rule: str) -> Stage | None:
    """The stage a Snakemake rule runs (None for rules that run no stage)."""
    for s in STAGES:
        if rule in (s.rules or (s.name.replace("-", "_"),)):
            return s
    return None


def stage_code(name: str) -> list[str]:
    """The source files of a stage, as paths from the repository root: the rules list them as inputs, so that
    editing one reruns the stage (under Snakemake by modification time, under DVC by content). The command-line
    layer (cli.py, stages.py) only parses arguments and is not listed."""
    stage = BY_NAME[name]
    files = import_closure(stage.module) + [PACKAGE / s for s in stage.scripts]
    return [str(f.relative_to(REPO)) for f in sorted(set(files))]
