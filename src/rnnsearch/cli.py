"""`rnnsearch <stage> …`: argument parsing only. Each stage validates the whole params.yaml (plus overlays),
takes the keys it declares in `config.STAGE_KEYS`, and calls one stage function."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from . import config as cfg
from .cpu import keep_freed_memory
from .textio import EXIT_INTERRUPTED, InputError, Interrupted

STAGES_HELP = {
    "download": "0. fetch one file of a downloaded source (resumed, retried, checked against recorded checksums)",
    "download-archive": "0. fetch one WMT'14 archive (resumed, retried, checked against workflow/resources/wmt14.yaml)",
    "extract": "0. extract the members the corpus needs from one WMT'14 archive (tarfile's data filter)",
    "corpus": "1. the raw train/dev/test text: generated (synthetic), copied (local) or from the downloads",
    "shard": "2. cut the raw training text into shards (scatter)",
    "tokenize": "2. Moses-tokenize one text file (sacremoses, no lowercasing)",
    "clean": "2. drop pairs with an empty side, too many words or a skewed length ratio from one shard",
    "gather": "2. concatenate the clean shards in order (gather)",
    "count": "4. word counts of one shard, sorted by word (merged by the vocab stage)",
    "bench-data": "benchmark: tokenization throughput per core and shortlist memory on real text; WMT'14 projection",
    "data-report": "9. the data report: pairs and words after each step, length histograms, shortlist coverage",
    "filter": "3. keep the pairs of at most N words (the ≤30 / ≤50 training sets)",
    "vocab": "4. build the source and target shortlists",
    "train": "5. train one model of params.yaml's `models`",
    "translate": "6. beam-search the test set (All, and No-UNK with [UNK] forbidden); without --out-dir: "
                 "translate raw sentences from --input or stdin to stdout",
    "score": "7. BLEU (tokenized and sacreBLEU), All / No UNK / by sentence length",
    "tables": "8. Table 1 and Table 2",
    "figures": "8. Figure 2 and Figure 3",
    "aer": "8. alignment error rate of the attention against gold links (reference forced)",
    "report": "9. the results page",
    "bench-decode": "benchmark: greedy and beam decoding speed of a trained model (not part of `all`)",
    "bench-train": "benchmark: training speed, utilisation and peak memory of one model size on random batches",
    "bench-scaling": "benchmark: training time and memory per update against sentence length (10-80 words)",
    "bench": "benchmark: the summary table of one `snakemake bench` run (training, scaling, JoeyNMT side by side)",
    "bench-peer": "benchmark: training and fixed-length decoding side by side with JoeyNMT 2.3.0 (A, B, A, B)",
    "peer": "experiment: JoeyNMT 2.3.0 trained on our data for as long as peer.model trained, then decoded",
    "compare-peer": "experiment: sacreBLEU, chrF, training time and words/s of our models and the peer",
    "score-extra": "7. sacreBLEU and chrF of every model on the extra test sets (extra_tests)",
}


def _params_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", action="append", metavar="YAML",
                   help="params.yaml, then any overlays merged over it in order (default: params.yaml)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rnnsearch", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="stage", required=True, metavar="<stage>")

    def stage(name: str, params: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=STAGES_HELP[name], description=STAGES_HELP[name])
        if params:
            _params_arg(p)
        p.add_argument("--log", metavar="FILE", help="write the full log here; only warnings go to stderr")
        return p

    p = stage("download")
    p.add_argument("--file", required=True, help="e.g. train.en (data.source multi30k)")
    p.add_argument("--out", required=True)
    p = stage("download-archive")
    p.add_argument("--name", required=True, help="an archive of workflow/resources/wmt14.yaml, e.g. dev.tgz")
    p.add_argument("--out", required=True)
    p = stage("extract", params=False)
    for a in ("--name", "--archive", "--out-dir"):
        p.add_argument(a, required=True)
    p = stage("corpus")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--downloads", help="the folder of the downloaded files (data.source multi30k)")
    p.add_argument("--extracted", help="the folder of the extracted archives (data.source wmt14)")
    p = stage("shard", params=False)
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--out-src", nargs="+", required=True, help="one file per shard")
    p.add_argument("--out-tgt", nargs="+", required=True)
    p = stage("tokenize")
    p.add_argument("--lang", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--pretokenized", action="store_true",
                   help="the text is Moses-tokenized already (LIUM): only undo its XML escapes")
    p = stage("clean")
    for a in ("--src", "--tgt", "--out-src", "--out-tgt", "--stats"):
        p.add_argument(a, required=True)
    p = stage("gather", params=False)
    p.add_argument("--inputs", nargs="+", required=True)
    p.add_argument("--output", required=True)
    p = stage("count", params=False)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p = stage("filter", params=False)
    p.add_argument("--max-len", type=int, required=True)
    for a in ("--src", "--tgt", "--out-src", "--out-tgt", "--stats"):
        p.add_argument(a, required=True)
    p = stage("vocab")
    p.add_argument("--src", nargs="+", required=True, help="tokenized text or per-shard .counts files")
    p.add_argument("--tgt", nargs="+", required=True)
    for a in ("--out-src", "--out-tgt", "--stats"):
        p.add_argument(a, required=True)
    p = stage("bench-data", params=False)
    p.add_argument("--raw", nargs=2, action="append", default=[], metavar=("LANG", "FILE"), help="raw text to tokenize")
    p.add_argument("--pretokenized", nargs=2, action="append", default=[], metavar=("LANG", "FILE"),
                   help="Moses-tokenized, XML-escaped text (the LIUM path)")
    p.add_argument("--out", required=True, help="JSON")
    p.add_argument("--md", required=True, help="Markdown table")
    p = stage("data-report")
    for a in ("--corpus", "--tok-dir", "--vocab-dir", "--out-md", "--out-json", "--out-png"):
        p.add_argument(a, required=True)
    p.add_argument("--clean-stats", nargs="+", required=True, help="the clean stage's JSON of every shard")
    p.add_argument("--filter-stats", nargs="+", required=True, help="the filter stage's JSON of every ≤N set")
    p.add_argument("--tok-shards-src", nargs="+", required=True, help="the tokenized training shards, in order")
    p.add_argument("--tok-shards-tgt", nargs="+", required=True)
    p = stage("train")
    p.add_argument("--model", required=True, help="a key of params.yaml's `models`")
    for a in ("--src-train", "--tgt-train", "--src-dev", "--tgt-dev", "--src-vocab", "--tgt-vocab", "--out-dir"):
        p.add_argument(a, required=True)
    p = stage("translate")
    p.add_argument("--checkpoint", required=True)
    for a in ("--src", "--ref", "--src-vocab", "--tgt-vocab", "--out-dir"):
        p.add_argument(a, help="pipeline stage: the tokenized test set, vocabularies and output folder")
    user = p.add_argument_group("translating your own sentences (no --out-dir)")
    user.add_argument("--input", default="-", help="raw sentences, one per line (default: stdin)")
    user.add_argument("--output", help="write the translations to this file (atomically) instead of stdout")
    user.add_argument("--beam", type=int, default=12)
    user.add_argument("--max-len-a", type=float, default=1.5)
    user.add_argument("--max-len-b", type=int, default=10)
    user.add_argument("--no-length-norm", action="store_true")
    user.add_argument("--n-best", type=int, default=1, metavar="N",
                      help="print the N best translations per sentence as 'sentence ||| translation ||| log-prob "
                           "||| log-prob per word' (sentences numbered from 0, as Moses does)")
    user.add_argument("--src-lang", default="en")
    user.add_argument("--tgt-lang", default="fr")
    user.add_argument("--alignment", action="store_true", help="draw each alignment as text on stderr")
    user.add_argument("--heatmap-dir", help="write each alignment as a PNG heatmap here")
    p = stage("score")
    for a in ("--model", "--src", "--ref-tok", "--ref", "--hyp-dir", "--out"):
        p.add_argument(a, required=True)
    p = stage("tables")
    p.add_argument("--scores", nargs="+", required=True)
    p.add_argument("--train-stats", nargs="+", required=True)
    p.add_argument("--hyps", nargs="+", required=True, help="tokenized translations, in the order of --scores")
    p.add_argument("--ref-tok", required=True)
    p.add_argument("--out-dir", required=True)
    p = stage("figures")
    p.add_argument("--scores", nargs="+", required=True)
    for a in ("--attention", "--src", "--hyp", "--nounk", "--out-dir"):
        p.add_argument(a, required=True)
    p = stage("aer")
    for a in ("--checkpoint", "--src", "--ref", "--src-vocab", "--tgt-vocab", "--gold", "--out"):
        p.add_argument(a, required=True)
    p = stage("report")
    p.add_argument("--table1", required=True)
    p.add_argument("--table2", required=True)
    p.add_argument("--figure2", required=True)
    p.add_argument("--alignments", nargs="+", required=True)
    p.add_argument("--scores", nargs="+", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--hyps", nargs="+", required=True, metavar="MODEL=FILE")
    p.add_argument("--aer", help="the aer stage's JSON, when there is one")
    p.add_argument("--out", required=True)

    p = stage("bench-decode")
    for a in ("--checkpoint", "--src", "--src-vocab", "--out"):
        p.add_argument(a, required=True)
    p.add_argument("--beams", type=int, nargs="+", default=[1, 12])
    for name in ("bench-train", "bench-scaling"):
        p = stage(name, params=False)
        p.add_argument("--size", default="paper", choices=["paper", "bench"], help="paper: App. A; bench: the peer's")
        p.add_argument("--batch", type=int, default=80)
        p.add_argument("--steps", type=int, default=3, help="timed updates after two warm-up updates")
        p.add_argument("--threads", type=int, default=os.cpu_count())
        p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
        p.add_argument("--seed", type=int, default=1234)
        p.add_argument("--out", required=True)
    p.add_argument("--archs", nargs="+", default=["rnnsearch", "rnnencdec"], choices=["rnnsearch", "rnnencdec", "luong"])
    p.add_argument("--lengths", type=int, nargs="+", default=[10, 20, 40, 60, 80])
    p.add_argument("--figure", required=True, help="PNG: time and memory per update against length")
    p = sub.choices["bench-train"]
    p.add_argument("--arch", default="rnnsearch", choices=["rnnsearch", "rnnencdec", "luong"])
    p.add_argument("--length", type=int, default=50, help="words per sentence, each side (</s> added)")

    p = stage("bench", params=False)
    p.add_argument("--train", nargs="+", required=True, help="bench-train JSON files")
    p.add_argument("--scaling", required=True, help="the bench-scaling JSON")
    p.add_argument("--peer", help="the bench-peer Markdown table")
    p.add_argument("--out", required=True)

    p = stage("bench-peer", params=False)
    p.add_argument("--peer-script", default="../shared/bench/peer_joeynmt.sh", help="the peer benchmark's script")
    p.add_argument("--peer-python", required=True, help="a Python with JoeyNMT 2.3.0 (../shared/bench/README.md)")
    p.add_argument("--raw", default="../shared/data", help="the raw corpora prep_data.py reads")
    p.add_argument("--datasets", nargs="+", default=["multi30k", "europarl"], choices=["multi30k", "europarl"])
    p.add_argument("--updates", type=int, default=60, help="training updates per run, the first --warmup untimed")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2, help="alternations peer, ours (A, B, A, B, …)")
    p.add_argument("--decode", nargs="*", default=["greedy", "beam"], choices=["greedy", "beam"],
                   help="fixed-length decodes (beam: 12)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", required=True)
    p.add_argument("--md", required=True, help="the Markdown table")
    p.add_argument("--peer-log", required=True, help="the output of the peer's runs")

    p = stage("score-extra", params=False)
    p.add_argument("--entry", nargs=4, action="append", required=True, metavar=("SET", "MODEL", "HYP", "REF"),
                   help="a test set's name, a model's name, its detokenized translations and the raw references")
    p.add_argument("--out-dir", required=True)
    p = stage("peer")
    p.add_argument("--train-stats", required=True, help="train_stats.json of peer.model: its training time")
    for a in ("--train", "--dev", "--test"):
        p.add_argument(a, required=True, help="tokenized files as a prefix: <prefix>.<src>, <prefix>.<tgt>")
    p.add_argument("--out-dir", required=True)
    p = stage("compare-peer")
    p.add_argument("--system", action="append", required=True, metavar="NAME=HYP=STATS",
                   help="a system's name, detokenized test translations and train/peer stats JSON")
    p.add_argument("--ref", required=True, help="the raw test references")
    p.add_argument("--out-dir", required=True)

    p = sub.add_parser("check-params", help="validate params.yaml (and overlays) and print the merged result")
    _params_arg(p)
    p = sub.add_parser("dvc-yaml", help="write dvc.yaml from the Snakemake workflow (keeps the two in step)")
    p.add_argument("--output", default="dvc.yaml")
    p.add_argument("--check", action="store_true", help="fail if dvc.yaml differs from what would be written")
    return parser


def run(args: argparse.Namespace) -> None:
    stage, model = args.stage, getattr(args, "model", None)
    user_translate = _user_translate(args)
    config = cfg.load_params(args.params or ["params.yaml"]) if hasattr(args, "params") and not user_translate else None
    if config is not None and stage in cfg.STAGE_KEYS:
        if model is not None and model not in config["models"]:
            raise cfg.ConfigError(f"--model {model!r} is not a key of 'models' ({', '.join(config['models'])})")
        p = cfg.stage_params(config, stage, model)  # a stage sees only the keys it declares

    if stage == "download":
        from .corpus.multi30k import fetch

        fetch(args.file, args.out, p["data.multi30k.url"])
    elif stage == "download-archive":
        from .corpus.wmt14 import fetch_archive

        fetch_archive(args.name, args.out, p["data.wmt14.records"], p["data.wmt14.lium_url"], p["data.wmt14.statmt_url"])
    elif stage == "extract":
        from .corpus.wmt14 import extract_archive

        extract_archive(args.name, args.archive, args.out_dir)
    elif stage == "corpus" and p["data"]["source"] == "wmt14":
        from .corpus.wmt14 import run_wmt14_corpus

        if not args.extracted:
            raise InputError("corpus: data.source wmt14 needs --extracted (the folder of the extracted archives)")
        w = p["data"]["wmt14"]
        run_wmt14_corpus(args.extracted, w["selection"], p["data"]["src"], p["data"]["tgt"], w["records"], args.out_dir)
    elif stage == "corpus" and p["data"]["source"] == "multi30k":
        from .corpus.multi30k import run_multi30k_corpus

        if not args.downloads:
            raise InputError("corpus: data.source multi30k needs --downloads (the folder of the downloaded files)")
        run_multi30k_corpus(args.downloads, p["data"]["multi30k"]["test"], p["data"]["src"], p["data"]["tgt"],
                            args.out_dir)
    elif stage == "corpus" and p["data"]["source"] == "local":
        from .corpus.local import run_local_corpus

        run_local_corpus(p["data"]["local"], p["data"]["src"], p["data"]["tgt"], args.out_dir)
    elif stage == "corpus":
        from .corpus import synthetic

        s = p["data"]["synthetic"]
        corpus = synthetic.generate(p["seed"], s["n_train"], s["n_dev"], s["n_test"], s["nouns"], s["adjectives"],
                                    s["verbs"], s["names"], s["max_len"], s["zipf"])
        synthetic.write_corpus(corpus, args.out_dir)
    elif stage == "tokenize":
        from .text import run_tokenize

        run_tokenize(args.input, args.output, args.lang, p["tokenize"]["aggressive_dash"], args.pretokenized)
    elif stage == "shard":
        from .prepare import run_shard

        run_shard(args.src, args.tgt, args.out_src, args.out_tgt)
    elif stage == "clean":
        from .prepare import run_clean

        run_clean(args.src, args.tgt, args.out_src, args.out_tgt, p["prepare.max_len"], p["prepare.max_ratio"], args.stats)
    elif stage == "gather":
        from .prepare import run_gather

        run_gather(args.inputs, args.output)
    elif stage == "count":
        from .vocab import run_count

        run_count(args.input, args.output)
    elif stage == "filter":
        from .prepare import run_filter

        run_filter(args.src, args.tgt, args.out_src, args.out_tgt, args.max_len, args.stats)
    elif stage == "vocab":
        from .vocab import run_vocab

        v = p["vocab"]
        run_vocab(args.src, args.tgt, args.out_src, args.out_tgt, v["src_size"], v["tgt_size"], args.stats, v["kind"],
                  p["seed"])
    elif stage == "bench-data":
        from .benchdata import run_bench_data

        run_bench_data([tuple(r) for r in args.raw], [tuple(r) for r in args.pretokenized], args.out, args.md)
    elif stage == "data-report":
        from .datareport import run_data_report

        run_data_report(args.corpus, args.tok_dir, args.clean_stats, args.filter_stats, args.vocab_dir, p["data.src"],
                        p["data.tgt"], args.out_md, args.out_json, args.out_png,
                        (args.tok_shards_src, args.tok_shards_tgt), p["prepare.max_len"], p["prepare.max_ratio"])
    elif stage == "train":
        from .train import run_train

        run_train(model, cfg.model_config(config, model), cfg.train_config(config, model), p["seed"], args.src_train,
                  args.tgt_train, args.src_dev, args.tgt_dev, args.src_vocab, args.tgt_vocab, args.out_dir)
    elif user_translate:
        translate_user(args)
    elif stage == "translate":
        from .translate import run_translate

        missing = [a for a in ("src", "ref", "src_vocab", "tgt_vocab") if not getattr(args, a)]
        if missing:
            raise InputError("the translate stage needs " + ", ".join("--" + a.replace("_", "-") for a in missing))
        run_translate(args.checkpoint, args.src, args.ref, args.src_vocab, args.tgt_vocab, args.out_dir,
                      p["decode"], p["data.tgt"])
    elif stage == "score":
        from .score import run_score

        run_score(model, args.src, args.ref_tok, args.ref, args.hyp_dir, p["score"]["length_buckets"], args.out,
                  p["score"]["bootstrap_samples"], p["seed"])
    elif stage == "tables":
        from .tables import run_tables

        run_tables(args.scores, args.train_stats, args.hyps, args.ref_tok, p["score"]["bootstrap_samples"],
                   args.out_dir)
    elif stage == "figures":
        from .plots import run_figures

        run_figures(args.scores, args.attention, args.src, args.hyp, args.nounk, p["figures"], p["seed"],
                    args.out_dir)
    elif stage == "aer":
        from .aer import run_aer

        run_aer(args.checkpoint, args.src, args.ref, args.src_vocab, args.tgt_vocab, args.gold, p["aer.format"],
                p["aer.threshold"], p["decode.batch_size"], p["decode.device"], args.out)
    elif stage == "report":
        from .report import run_report

        hyps = dict(h.split("=", 1) for h in args.hyps)
        run_report(config, args.table1, args.table2, args.figure2, args.alignments, args.scores, args.src, args.ref,
                   hyps, args.out, args.aer)
    elif stage == "bench-decode":
        from .bench import run_bench_decode

        d = p["decode"]
        run_bench_decode(args.checkpoint, args.src, args.src_vocab, args.beams, d["batch_size"], d["max_len_a"],
                         d["max_len_b"], d["threads"], args.out)
    elif stage == "bench-train":
        from .bench import run_bench_train

        run_bench_train(args.arch, args.size, args.batch, args.length, args.steps, args.threads, args.device,
                        args.seed, args.out)
    elif stage == "bench-scaling":
        from .bench import run_bench_scaling

        run_bench_scaling(args.archs, args.size, args.lengths, args.batch, args.steps, args.threads, args.device,
                          args.seed, args.out, args.figure)
    elif stage == "bench":
        from .bench import run_bench_summary

        run_bench_summary(args.train, args.scaling, args.peer, args.out)
    elif stage == "bench-peer":
        from .benchpeer import run_bench_peer

        run_bench_peer(args.peer_script, args.peer_python, args.raw, args.datasets, args.updates, args.warmup,
                       args.rounds, args.decode, args.threads, args.seed, args.out, args.md, args.peer_log)
    elif stage == "score-extra":
        from .score import run_extra_scores

        run_extra_scores([tuple(e) for e in args.entry], args.out_dir)
    elif stage == "peer":
        from .peer import run_peer

        run_peer(p["peer"]["python"], p["peer"]["config"], args.train_stats, args.train, args.dev, args.test,
                 p["data.src"], p["data.tgt"], (p["vocab"]["src_size"], p["vocab"]["tgt_size"]), p["decode.beam"],
                 p["train.threads"], p["seed"], args.out_dir)
    elif stage == "compare-peer":
        from .peer import run_compare

        systems = []
        for spec in args.system:
            parts = spec.split("=")
            if len(parts) != 3:
                raise InputError(f"--system {spec!r}: expected NAME=HYP=STATS")
            systems.append(tuple(parts))
        run_compare(systems, args.ref, args.out_dir)
    elif stage == "check-params":
        import yaml

        print(yaml.safe_dump(config, sort_keys=False), end="")
    elif stage == "dvc-yaml":
        from .dvcyaml import run_dvc_yaml

        run_dvc_yaml(args.output, args.check)


def _user_translate(args: argparse.Namespace) -> bool:
    """`translate` without --out-dir translates a user's sentences instead of running the pipeline stage."""
    return args.stage == "translate" and not args.out_dir


def translate_user(args: argparse.Namespace) -> None:
    """`rnnsearch translate --checkpoint M [--input F]`: translations on stdout, one per line, in order."""
    from .translate import alignment_text, translate_text

    if args.input == "-":
        lines = sys.stdin.read().splitlines()
    else:
        from .textio import read_lines

        lines = read_lines(args.input)
    if args.n_best > args.beam:
        raise InputError(f"--n-best {args.n_best} needs --beam of at least {args.n_best} (got {args.beam})")
    results = translate_text(args.checkpoint, lines, args.beam, args.max_len_a, args.max_len_b,
                             not args.no_length_norm, args.src_lang, args.tgt_lang, args.src_vocab, args.tgt_vocab,
                             n_best=args.n_best)
    written: list[str] = []
    emit = written.append if args.output else (lambda line: print(line, flush=True))
    for i, nbest in enumerate(results, 1):
        if args.n_best > 1:
            for text, _, out, _, score in nbest:
                emit(f"{i - 1} ||| {text} ||| {score:.4f} ||| {score / (len(out) - 1 or 1):.4f}")
        else:
            emit(nbest[0][0])
        text, src, out, alpha, _ = nbest[0]
        if alpha is None and (args.alignment or args.heatmap_dir):
            raise InputError(f"{args.checkpoint}: this model has no alignment model (RNNencdec): no alignments")
        if args.alignment:
            print(f"[{i}]\n{alignment_text(alpha, src, out)}", file=sys.stderr)
        if args.heatmap_dir:
            from .plots import alignment_figure

            alignment_figure(alpha.numpy(), src, out, f"sentence {i}", Path(args.heatmap_dir) / f"alignment_{i}.png")
    if args.output:
        from .textio import write_lines_atomic

        write_lines_atomic(args.output, written)


def _setup_logging(log_file: str | None, quiet: bool = False, append: bool = False) -> None:
    fmt = logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(fmt)
    console.setLevel(logging.WARNING if log_file or quiet else logging.INFO)
    handlers: list[logging.Handler] = [console]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file, mode="a" if append else "w", encoding="utf-8")
        handler.setFormatter(fmt)
        handlers.append(handler)
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)
    logging.captureWarnings(True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # a training that resumes (a chain of cluster jobs) continues the log of the run it continues
    resuming = args.stage == "train" and (Path(args.out_dir) / "checkpoint.pt").exists()
    _setup_logging(getattr(args, "log", None), quiet=_user_translate(args), append=resuming)
    log = logging.getLogger("rnnsearch")
    log.info("rnnsearch %s: %s", args.stage, " ".join(sys.argv[1:] if argv is None else argv))
    if os.environ.get("SLURM_JOB_ID"):  # evidence of where a job ran, for the log and the Slurm tests
        log.info("Slurm job %s on %s, CUDA_VISIBLE_DEVICES=%r", os.environ["SLURM_JOB_ID"],
                 os.environ.get("SLURMD_NODENAME", "?"), os.environ.get("CUDA_VISIBLE_DEVICES"))
    keep_freed_memory()  # rnnsearch.cpu: no page faults on the tensors every update allocates again
    try:
        run(args)
    except Interrupted as e:
        log.warning("%s; exit status %d", e, EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except InputError as e:
        log.error("%s", e)
        if getattr(args, "log", None):  # the console handler shows errors already; say where the log is
            print(f"rnnsearch {args.stage}: see {args.log}", file=sys.stderr)
        return 2
    except Exception:
        log.exception("rnnsearch %s failed", args.stage)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
