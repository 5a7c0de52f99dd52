"""The stage registry: one record per `rnnsearch <stage>` command, the one place a stage is declared.

A record (`rnnsearch.stage.Stage`) names the stage, its help, the function it runs (imported only when it runs),
its command-line arguments, the params keys it reads, and how its arguments and params are passed to the
function. `cli.py` builds the parser from it; the Snakemake rules and `dvc.yaml` take each stage's params
(`stage_params`: a change of a value it reads reruns exactly its jobs) and source files (`stage_code`: the import
closure of its module). The pipeline's stages are here, the benchmarks' and the JoeyNMT experiment's in
`rnnsearch.bench.stages`. A new stage is one record and one rule in `workflow/rules/`.
"""

from __future__ import annotations

import argparse
from typing import Callable

from rnnsearch.bench.stages import BENCH_STAGES
from rnnsearch.closure import PACKAGE, REPO, import_closure
from rnnsearch.stage import Arg, Params, Stage, arg, at_least, required
from rnnsearch.textio import EXIT_INTERRUPTED, InputError

__all__ = ["Arg", "Params", "Stage", "STAGES", "BY_NAME", "each_replicate", "stage_code", "stage_of_rule"]


def _translate(fn: Callable, a: argparse.Namespace, p: Params) -> None:
    if not a.out_dir:  # a user's sentences
        from rnnsearch.decoding.user import UserOptions, translate_user

        opts = UserOptions(a.beam, a.max_len_a, a.max_len_b, not a.no_length_norm, a.n_best, a.max_src_len,
                           a.src_lang, a.tgt_lang, normalize_punctuation=False if a.no_normalize_punctuation else None)
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
    parent = config["models"][a.model].get("continues")
    if (parent is None) != (a.continue_from is None):
        raise InputError(f"--continue-from {a.continue_from} given, but models.{a.model} continues no model"
                         if parent is None else f"models.{a.model} continues {parent}: give --continue-from, the "
                         f"final checkpoint.pt of {parent}'s replicate {a.replicate}")
    fn(a.model, cfg.model_config(config, a.model), cfg.train_config(config, a.model), p["seed"] + a.replicate - 1,
       a.src_train, a.tgt_train, a.src_dev, a.tgt_dev, a.src_vocab, a.tgt_vocab, a.out_dir,
       {"src_lang": p["data.src"], "tgt_lang": p["data.tgt"], "unicode": p["data.unicode"],
        "normalize_punctuation": p["tokenize.normalize_punctuation"]}, a.binarized,
       (parent, a.continue_from) if parent else None)


def each_replicate(patterns: list[str], replicates: int) -> list[str]:
    """Files named by patterns with a `{replicate}` field, for replicates 1..N, pattern by pattern (a name without
    the field is taken as it is)."""
    return list(dict.fromkeys(p.replace("{replicate}", str(r)) for p in patterns for r in range(1, replicates + 1)))


_REPLICATED = dict(nargs="+", required=True,
                   help="one file per model, `{replicate}` in its name standing for 1..`replicates`")
_PAIR = required({"--src": "source side, one sentence per line", "--tgt": "target side, line by line with --src",
                  "--out-src": "the source lines kept", "--out-tgt": "the target lines kept",
                  "--stats": "a JSON of the pairs read, kept and dropped (and why)"})
_TEST = {"--src": "the tokenized test source", "--ref": "the tokenized test references",
         "--src-vocab": "the source shortlist (vocab stage)", "--tgt-vocab": "the target shortlist (vocab stage)"}
_USER = "translating your own sentences (no --out-dir): "

STAGES: tuple[Stage, ...] = (
    # 0-4: data (rnnsearch.data)
    Stage("download", "0. fetch one file of a downloaded source (resumed, retried, checked against recorded "
          "checksums)", "rnnsearch.data.corpus.multi30k:fetch",
          lambda f, a, p: f(a.file, a.out, p["data.multi30k.url"]),
          (arg("--file", required=True, help="e.g. train.en (data.source multi30k)"),
           arg("--out", required=True, help="where the file goes (written atomically)")),
          keys=("data.multi30k.url",)),
    Stage("download-archive", "0. fetch one WMT'14 archive (resumed, retried, checked against "
          "workflow/resources/wmt14.yaml)", "rnnsearch.data.corpus.wmt14:fetch_archive",
          lambda f, a, p: f(a.name, a.out, p["data.wmt14.records"], p["data.wmt14.lium_url"],
                            p["data.wmt14.statmt_url"]),
          (arg("--name", required=True, help="an archive of workflow/resources/wmt14.yaml, e.g. dev.tgz"),
           arg("--out", required=True, help="where the archive goes (written atomically)")),
          keys=("data.wmt14.lium_url", "data.wmt14.statmt_url", "data.wmt14.records")),
    Stage("extract", "0. extract the members the corpus needs from one WMT'14 archive (tarfile's data filter)",
          "rnnsearch.data.corpus.wmt14:extract_archive", lambda f, a, p: f(a.name, a.archive, a.out_dir),
          required({"--name": "the archive's name in workflow/resources/wmt14.yaml", "--archive": "the archive file",
                    "--out-dir": "the folder the members go to"}), params=False),
    Stage("corpus", "1. the raw train/dev/test text: generated (synthetic), copied (local) or from the downloads",
          "rnnsearch.data.corpus:run_corpus",
          lambda f, a, p: f(p["data"], p["seed"], a.out_dir, a.downloads, a.extracted),
          (arg("--out-dir", required=True, help="the folder of the raw text (train, dev, test per language)"),
           arg("--downloads", help="the folder of the downloaded files (data.source multi30k)"),
           arg("--extracted", help="the folder of the extracted archives (data.source wmt14)")),
          keys=("seed", "data")),
    Stage("shard", "2. cut the raw training text into shards (scatter)", "rnnsearch.data.prepare:run_shard",
          lambda f, a, p: f(a.src, a.tgt, a.out_src, a.out_tgt),
          (*required({"--src": "the raw training source", "--tgt": "the raw training target"}),
           *required({"--out-src": "the source shards", "--out-tgt": "the target shards"}, nargs="+")),
          params=False),
    Stage("tokenize", "2. normalise the punctuation of one text file and Moses-tokenize it (sacremoses, no "
          "lowercasing)", "rnnsearch.data.text:run_tokenize",
          lambda f, a, p: f(a.input, a.output, a.lang, p["tokenize"]["aggressive_dash"], a.pretokenized,
                            p["data.unicode"], p["tokenize"]["normalize_punctuation"], a.stats),
          (*required({"--lang": "the text's language code (Moses' rules for it)", "--input": "raw text",
                      "--output": "the tokenized text (written atomically)"}),
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
          lambda f, a, p: f(a.inputs, a.output),
          (arg("--inputs", nargs="+", required=True, help="the shards, in order"),
           arg("--output", required=True, help="their concatenation (written atomically)")), params=False),
    Stage("count", "4. word counts of one shard, sorted by word (merged by the vocab stage)",
          "rnnsearch.data.vocab:run_count", lambda f, a, p: f(a.input, a.output),
          required({"--input": "a tokenized shard", "--output": "its word counts"}), params=False),
    Stage("filter", "3. keep the pairs of at most N words (the ≤30 / ≤50 training sets)",
          "rnnsearch.data.prepare:run_filter",
          lambda f, a, p: f(a.src, a.tgt, a.out_src, a.out_tgt, a.max_len, a.stats),
          (arg("--max-len", type=at_least(1), required=True, help="N: the most words a side may have"), *_PAIR),
          params=False),
    Stage("vocab", "4. build the source and target shortlists", "rnnsearch.data.vocab:run_vocab",
          lambda f, a, p: f(a.src, a.tgt, a.out_src, a.out_tgt, p["vocab"]["src_size"], p["vocab"]["tgt_size"],
                            a.stats, p["vocab"]["kind"], p["seed"]),
          (*required({"--src": "tokenized source text or per-shard .counts files",
                      "--tgt": "tokenized target text or per-shard .counts files"}, nargs="+"),
           *required({"--out-src": "the source shortlist (TSV)", "--out-tgt": "the target shortlist (TSV)",
                      "--stats": "a JSON of sizes and coverage"})),
          keys=("seed", "vocab")),
    Stage("binarize", "4. a training set as token ids (.bin), offsets (.idx) and a header (.json), for training to "
          "memory-map", "rnnsearch.data.binarized:run_binarize",
          lambda f, a, p: f(a.src, a.tgt, a.src_vocab, a.tgt_vocab, a.out),
          required({"--src": "the tokenized source training set (≤N words)", "--tgt": "its target side",
                    "--src-vocab": "the source shortlist", "--tgt-vocab": "the target shortlist",
                    "--out": "the prefix of the files written: PREFIX.src.bin, .tgt.bin, .idx, .json"})),
    Stage("data-report", "9. the data report: pairs and words after each step, length histograms, shortlist "
          "coverage", "rnnsearch.data.report:run_data_report",
          lambda f, a, p: f(a.corpus, a.tok_dir, a.clean_stats, a.filter_stats, a.vocab_dir, p["data.src"],
                            p["data.tgt"], a.out_md, a.out_json, a.out_png, (a.tok_shards_src, a.tok_shards_tgt),
                            p["prepare.max_len"], p["prepare.max_ratio"], a.binarized),
          (*required({"--corpus": "the corpus stage's JSON", "--tok-dir": "the folder of tokenized text",
                      "--vocab-dir": "the folder of the shortlists", "--out-md": "the report (Markdown)",
                      "--out-json": "its numbers (JSON)", "--out-png": "its length histograms"}),
           arg("--clean-stats", nargs="+", required=True, help="the clean stage's JSON of every shard"),
           arg("--filter-stats", nargs="+", required=True, help="the filter stage's JSON of every ≤N set"),
           arg("--tok-shards-src", nargs="+", required=True, help="the tokenized source training shards, in order"),
           arg("--tok-shards-tgt", nargs="+", required=True, help="the tokenized target training shards, in order"),
           arg("--binarized", nargs="+", default=[], help="the binarize stage's header (.json) of every ≤N set")),
          keys=("data.src", "data.tgt", "prepare.max_len", "prepare.max_ratio")),
    # 5: training (rnnsearch.training)
    Stage("train", "5. train one model of params.yaml's `models`", "rnnsearch.training.train:run_train", _train,
          (arg("--model", required=True, help="a key of params.yaml's `models`"),
           arg("--replicate", type=at_least(1), default=1,
               help="r ≥ 1: the r-th training of this model, with seed `seed` + r - 1"),
           *required({"--src-train": "the tokenized source training set (≤N words)",
                      "--tgt-train": "the tokenized target training set", "--src-dev": "the tokenized dev source",
                      "--tgt-dev": "the tokenized dev references", "--src-vocab": "the source shortlist",
                      "--tgt-vocab": "the target shortlist",
                      "--out-dir": "model.pt, checkpoints, statistics and curves go here; a checkpoint.pt in it "
                                   "is resumed"}),
           arg("--binarized", help="the binarize stage's files of --src-train/--tgt-train (their prefix), "
                                   "memory-mapped; without it the text is read and encoded in memory"),
           arg("--continue-from", metavar="CHECKPOINT",
               help="for a model that `continues` another: that model's final checkpoint.pt (same replicate), the "
                    "state this training starts from when --out-dir holds no checkpoint of its own"),
           arg("--attempt", type=at_least(1), default=1,
               help="Snakemake's attempt of this job: from 2 on, a job whose last attempt failed with another "
                    f"status than {EXIT_INTERRUPTED} (stopped, resumable) stops at once with status 2")),
          keys=("seed", "model", "train", "models.{model}", "data.src", "data.tgt", "data.unicode",
                "tokenize.normalize_punctuation"), runs_model=True),
    # 6: decoding (rnnsearch.decoding)
    Stage("translate", "6. beam-search the test set (All, and No-UNK with [UNK] forbidden) with params.yaml's "
          "decode settings; without --out-dir: translate your own raw sentences from --input or stdin to stdout",
          "rnnsearch.decoding.translate:run_translate", _translate,
          (arg("--checkpoint", required=True, help="a trained model (model.pt of the train stage)"),
           *(arg(flag, help=f"pipeline stage: {h}") for flag, h in _TEST.items()),
           arg("--out-dir", help="pipeline stage: the folder of the translations, attention and statistics"),
           arg("--input", default="-", help=_USER + "raw text, one sentence per line ('-': stdin)"),
           arg("--output", help=_USER + "write the translations to this file (atomically) instead of stdout"),
           arg("--beam", type=at_least(1), default=12, help=_USER + "beam width (1: greedy)"),
           arg("--max-len-a", type=at_least(0.0, float), default=1.5,
               help=_USER + "output limit a × source length + b: a"),
           arg("--max-len-b", type=at_least(0), default=10, help=_USER + "output limit a × source length + b: b"),
           arg("--no-length-norm", action="store_true",
               help=_USER + "rank finished translations by log-probability, not per word"),
           arg("--max-src-len", type=at_least(1), default=150, metavar="N",
               help=_USER + "split longer lines (in tokens) at sentence punctuation and translate them piece by "
                            "piece"),
           arg("--n-best", type=at_least(1), default=1, metavar="N",
               help=_USER + "print the N best translations per sentence as 'sentence ||| translation ||| log-prob "
                            "||| log-prob per token' (sentences numbered from 0, as Moses does)"),
           arg("--src-lang", help=_USER + "the source language's code for the tokenizer (default: the "
                                          "checkpoint's data.src, else en)"),
           arg("--tgt-lang", help=_USER + "the target language's code for the detokenizer (default: the "
                                          "checkpoint's data.tgt, else fr)"),
           arg("--no-normalize-punctuation", action="store_true",
               help=_USER + "leave typographic punctuation as it is (default: as the checkpoint's "
                            "tokenize.normalize_punctuation)"),
           arg("--alignment", action="store_true", help=_USER + "draw each alignment as text on stderr"),
           arg("--heatmap-dir", help=_USER + "write each alignment as a PNG heatmap into this folder")),
          keys=("decode", "data.tgt"), rules=("translate", "translate_extra"), runs_model=True),
    # 7-9: evaluation (rnnsearch.evaluation)
    Stage("score", "7. BLEU (tokenized and sacreBLEU), All / No UNK / by sentence length",
          "rnnsearch.evaluation.score:run_score",
          lambda f, a, p: f(a.model, a.src, a.ref_tok, a.ref, a.hyp_dir, p["score"]["length_buckets"], a.out,
                            p["score"]["bootstrap_samples"], p["seed"]),
          required({"--model": "the model's name (in the JSON)", "--src": "the tokenized test source",
                    "--ref-tok": "the tokenized references", "--ref": "the raw references (sacreBLEU)",
                    "--hyp-dir": "the translate stage's folder", "--out": "the scores (JSON)"}),
          keys=("seed", "score")),
    Stage("score-extra", "7. sacreBLEU and chrF of every model on the extra test sets (extra_tests)",
          "rnnsearch.evaluation.score:run_extra_scores", lambda f, a, p: f([tuple(e) for e in a.entry], a.out_dir),
          (arg("--entry", nargs=4, action="append", required=True, metavar=("SET", "MODEL", "HYP", "REF"),
               help="a test set's name, a model's name, its detokenized translations and the raw references"),
           arg("--out-dir", required=True, help="the folder of the table (extra_tests.md, .csv)")), params=False),
    Stage("tables", "8. Table 1 and Table 2, mean ± sd over replicates", "rnnsearch.evaluation.tables:run_tables",
          lambda f, a, p: f(*(each_replicate(x, p["replicates"]) for x in (a.scores, a.train_stats, a.hyps)),
                            a.ref_tok, p["score"]["bootstrap_samples"], a.out_dir),
          (arg("--scores", **_REPLICATED), arg("--train-stats", **_REPLICATED),
           arg("--hyps", **{**_REPLICATED, "help": "tokenized translations, in the order of --scores"}),
           *required({"--ref-tok": "the tokenized references (paired bootstrap)",
                      "--out-dir": "the folder of the tables"})),
          keys=("score", "replicates")),
    Stage("figures", "8. Figure 2 (mean over replicates) and Figure 3", "rnnsearch.evaluation.plots:run_figures",
          lambda f, a, p: f(each_replicate(a.scores, p["replicates"]), a.attention, a.src, a.hyp, a.nounk,
                            p["figures"], p["seed"], a.out_dir),
          (arg("--scores", **_REPLICATED),
           *required({"--attention": "attention.npz of figures.alignment_model's translation",
                      "--src": "the tokenized test source", "--hyp": "that model's tokenized translations",
                      "--nounk": "its nounk.json", "--out-dir": "the folder of the figures"})),
          keys=("seed", "figures", "replicates")),
    Stage("aer", "8. alignment error rate of the attention against gold links (reference forced)",
          "rnnsearch.evaluation.aer:run_aer",
          lambda f, a, p: f(a.checkpoint, a.src, a.ref, a.src_vocab, a.tgt_vocab, a.gold, p["aer.format"],
                            p["aer.threshold"], p["decode.batch_size"], p["decode.device"], a.out),
          required({"--checkpoint": "the model whose attention is scored", **_TEST,
                    "--gold": "the gold links (aer.format)", "--out": "the AER, precision and recall (JSON)"}),
          keys=("aer.format", "aer.threshold", "decode.batch_size", "decode.device"), runs_model=True),
    Stage("explorer", "9. the explorer: every test sentence, each model's output, scores and attention (HTML)",
          "rnnsearch.evaluation.explorer:run_explorer",
          lambda f, a, p: f(a.scores, dict(h.split("=", 1) for h in a.hyp_dirs), a.src, a.ref, a.src_tok,
                            a.ref_tok, a.tgt_vocab, a.figure2, a.out),
          (arg("--scores", nargs="+", required=True, help="each model's score JSON of replicate 1"),
           arg("--hyp-dirs", nargs="+", required=True, metavar="MODEL=DIR",
               help="each model's translate folder of replicate 1"),
           *required({"--src": "the raw test source", "--ref": "the raw test references",
                      "--src-tok": "the tokenized test source", "--ref-tok": "the tokenized test references",
                      "--tgt-vocab": "the target shortlist with its training counts (vocab stage)",
                      "--figure2": "Figure 2's CSV (bleu_by_length.csv)", "--out": "the page (HTML)"})),
          params=False, scripts=("evaluation/explorer_page.html",)),
    Stage("report", "9. the results page", "rnnsearch.evaluation.report:run_report",
          lambda f, a, p: f(p.nested(), a.table1, a.table2, a.figure2, a.alignments,
                            each_replicate(a.scores, p["replicates"]), a.src, a.ref,
                            dict(h.split("=", 1) for h in a.hyps), a.out, a.aer, a.explorer),
          (*required({"--table1": "Table 1 (Markdown)", "--table2": "Table 2 (Markdown)", "--figure2": "Figure 2"}),
           arg("--alignments", nargs="+", required=True, help="the Figure 3 images"),
           arg("--scores", **_REPLICATED),
           *required({"--src": "the raw test source", "--ref": "the raw test references"}),
           arg("--hyps", nargs="+", required=True, metavar="MODEL=FILE", help="each model's raw translations"),
           arg("--aer", help="the aer stage's JSON, when there is one"),
           arg("--explorer", help="the explorer page, which the report links"),
           arg("--out", required=True, help="the report (Markdown)")),
          keys=("seed", "replicates", "data", "tokenize", "vocab", "model", "models", "train", "decode", "score",
                "aer", "figures")),
    *BENCH_STAGES,
    # tools
    Stage("check-params", "validate params.yaml (and overlays) and print the merged result",
          "rnnsearch.config:dump", lambda f, a, p: print(f(a.params), end="")),
    Stage("dvc-yaml", "write dvc.yaml from the Snakemake workflow (keeps the two in step)",
          "rnnsearch.dvcyaml:run_dvc_yaml", lambda f, a, p: f(a.output, a.check),
          (arg("--output", default="dvc.yaml", help="the file to write"),
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
