"""The pipeline's stages and tools, one record each (rnnsearch.commands.record.Stage): the one place a stage is
declared. The benchmarks' and the JoeyNMT experiment's records are in rnnsearch.commands.benchmarks; a new stage is
one record here and one rule in `workflow/rules/` (docs/contributing.md).
"""

from __future__ import annotations

from rnnsearch.decoding.user import UserOptions
from rnnsearch.commands.record import Stage, arg, at_least, name_value, required
from rnnsearch.textio import EXIT_INTERRUPTED



_REPLICATED = dict(nargs="+", required=True,
                   help="one file per model, `{replicate}` in its name standing for 1..`replicates`")
_PAIR = required({"--src": "source side, one sentence per line", "--tgt": "target side, line by line with --src",
                  "--out-src": "the source lines kept", "--out-tgt": "the target lines kept",
                  "--stats": "a JSON of the pairs read, kept and dropped (and why)"})
_TEST = {"--src": "the tokenized test source", "--ref": "the tokenized test references",
         "--src-vocab": "the source shortlist (vocab stage)", "--tgt-vocab": "the target shortlist (vocab stage)"}
_USER = "translating your own sentences (no --out-dir): "

PIPELINE: tuple[Stage, ...] = (
    # 0-4: data (rnnsearch.data)
    Stage("download", "0. fetch one file of the downloaded data.source (resumed, retried, checked against what "
          "the source records)", "rnnsearch.data.corpus:fetch",
          (arg("--file", required=True, help="e.g. train.en (multi30k), dev.tgz (wmt14: an archive of "
                                             "workflow/resources/wmt14.yaml)"),
           arg("--out", required=True, help="where the file goes (written atomically)")),
          settings={"source": "data.source", "section": "data.{source}"}),
    Stage("extract", "0. extract the members the corpus needs from one WMT'14 archive (tarfile's data filter)",
          "rnnsearch.data.corpus.wmt14:extract_archive",
          required({"--name": "the archive's name in workflow/resources/wmt14.yaml", "--archive": "the archive file",
                    "--out-dir": "the folder the members go to"}), params=False),
    Stage("corpus", "1. the raw train/dev/test text: generated (synthetic), copied (local) or from the downloads",
          "rnnsearch.data.corpus:run_corpus",
          (arg("--out-dir", required=True, help="the folder of the raw text (train, dev, test per language)"),
           arg("--fetched", help="a downloaded source: the folder of its downloads (or of the archives "
                                 "extracted from them)")),
          settings={"seed": "seed", "data": "data"}),
    Stage("shard", "2. cut the raw training text into shards (scatter)", "rnnsearch.data.prepare:run_shard",
          (*required({"--src": "the raw training source", "--tgt": "the raw training target"}),
           *required({"--out-src": "the source shards", "--out-tgt": "the target shards"}, nargs="+")),
          params=False),
    Stage("tokenize", "2. normalise the punctuation of one text file and Moses-tokenize it (sacremoses, no "
          "lowercasing)", "rnnsearch.data.text:run_tokenize",
          (*required({"--lang": "the text's language code (Moses' rules for it)", "--input": "raw text",
                      "--output": "the tokenized text (written atomically)"}),
           arg("--stats", help="a JSON of the lines and of those whose punctuation was normalised"),
           arg("--pretokenized", action="store_true",
               help="the text is Moses-tokenized already (LIUM): undo its XML escapes, normalise token by token")),
          settings={"aggressive_dash": "tokenize.aggressive_dash", "unicode": "data.unicode",
                    "normalize_punctuation": "tokenize.normalize_punctuation"}, rules=("tokenize", "tokenize_shard")),
    Stage("clean", "2. drop pairs with an empty side, too many words or a skewed length ratio from one shard",
          "rnnsearch.data.prepare:run_clean",
          _PAIR, settings={"max_len": "prepare.max_len", "max_ratio": "prepare.max_ratio"}),
    Stage("gather", "2. concatenate the clean shards in order (gather)", "rnnsearch.data.prepare:run_gather",
          (arg("--inputs", nargs="+", required=True, help="the shards, in order"),
           arg("--output", required=True, help="their concatenation (written atomically)")), params=False),
    Stage("count", "4. word counts of one shard, sorted by word (merged by the vocab stage)",
          "rnnsearch.data.vocab:run_count",
          required({"--input": "a tokenized shard", "--output": "its word counts"}), params=False),
    Stage("filter", "3. keep the pairs of at most N words (the ≤30 / ≤50 training sets)",
          "rnnsearch.data.prepare:run_filter",
          (arg("--max-len", type=at_least(1), required=True, help="N: the most words a side may have"), *_PAIR),
          params=False),
    Stage("vocab", "4. build the source and target shortlists", "rnnsearch.data.vocab:run_vocab",
          (*required({"--src": "tokenized source text or per-shard .counts files",
                      "--tgt": "tokenized target text or per-shard .counts files"}, nargs="+"),
           *required({"--out-src": "the source shortlist (TSV)", "--out-tgt": "the target shortlist (TSV)",
                      "--stats": "a JSON of sizes and coverage"})),
          settings={"seed": "seed", "vocab": "vocab"}),
    Stage("binarize", "4. a training set as token ids (.bin), offsets (.idx) and a header (.json), for training to "
          "memory-map", "rnnsearch.data.binarized:run_binarize",
          required({"--src": "the tokenized source training set (≤N words)", "--tgt": "its target side",
                    "--src-vocab": "the source shortlist", "--tgt-vocab": "the target shortlist",
                    "--out": "the prefix of the files written: PREFIX.src.bin, .tgt.bin, .idx, .json"})),
    Stage("data-report", "9. the data report: pairs and words after each step, length histograms, shortlist "
          "coverage", "rnnsearch.data.data_report:run_data_report",
          (*required({"--corpus": "the corpus stage's JSON", "--tok-dir": "the folder of tokenized text",
                      "--vocab-dir": "the folder of the shortlists", "--out-md": "the report (Markdown)",
                      "--out-json": "its numbers (JSON)", "--out-png": "its length histograms"}),
           arg("--clean-stats", nargs="+", required=True, help="the clean stage's JSON of every shard"),
           arg("--filter-stats", nargs="+", required=True, help="the filter stage's JSON of every ≤N set"),
           arg("--tok-shards-src", nargs="+", required=True, help="the tokenized source training shards, in order"),
           arg("--tok-shards-tgt", nargs="+", required=True, help="the tokenized target training shards, in order"),
           arg("--binarized", nargs="+", default=[], help="the binarize stage's header (.json) of every ≤N set")),
          settings={"src": "data.src", "tgt": "data.tgt", "max_len": "prepare.max_len",
                    "max_ratio": "prepare.max_ratio"}),
    # 5: training (rnnsearch.training)
    Stage("train", "5. train one model of params.yaml's `models`", "rnnsearch.training.train:run_train",
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
           arg("--attempt", type=at_least(1), default=1, job=True,
               help="Snakemake's attempt of this job: from 2 on, a job whose last attempt failed with another "
                    f"status than {EXIT_INTERRUPTED} (stopped, resumable) stops at once with status 2")),
          settings={"config": ("seed", "model", "train", "models.{model}", "decode.max_len_a", "decode.max_len_b",
                               "data.src", "data.tgt", "data.unicode", "tokenize.normalize_punctuation")},
          runs_model=True, job_log=True),
    # 6: decoding (rnnsearch.decoding)
    Stage("translate", "6. beam-search the test set (All, and No-UNK with [UNK] forbidden) with params.yaml's "
          "decode settings; without --out-dir: translate your own raw sentences from --input or stdin to stdout",
          "rnnsearch.decoding.translate:translate",
          (arg("--checkpoint", required=True, help="a trained model (model.pt of the train stage)"),
           arg("--model", help="pipeline stage: the key of `models` these translations are filed under (the "
                               "checkpoint's own, or an entry that `decodes` it with its own `decode` settings)"),
           *(arg(flag, help=f"pipeline stage: {h}") for flag, h in _TEST.items()),
           arg("--out-dir", help="pipeline stage: the folder of the translations, attention and statistics"),
           arg("--input", default="-", help=_USER + "raw text, one sentence per line ('-': stdin)"),
           arg("--output", help=_USER + "write the translations to this file (atomically) instead of stdout"),
           arg("--beam", type=at_least(1), default=UserOptions.beam, help=_USER + "beam width (1: greedy)"),
           arg("--max-len-a", type=at_least(0.0, float), default=UserOptions.max_len_a,
               help=_USER + "output limit a × source length + b: a"),
           arg("--max-len-b", type=at_least(0), default=UserOptions.max_len_b,
               help=_USER + "output limit a × source length + b: b"),
           arg("--no-length-norm", dest="length_norm", action="store_false",
               help=_USER + "rank finished translations by log-probability, not per word"),
           arg("--length-penalty", type=at_least(0.0, float), default=UserOptions.length_penalty, metavar="α",
               help=_USER + "GNMT's length penalty: rank by log-prob / ((5 + length) / 6)^α instead of per word"),
           arg("--coverage-penalty", type=at_least(0.0, float), default=UserOptions.coverage_penalty, metavar="β",
               help=_USER + "GNMT's coverage penalty: + β Σ_j log(min(Σ_i α_ij, 1)), a model with attention only"),
           arg("--max-src-len", type=at_least(1), default=UserOptions.max_src_len, metavar="N",
               help=_USER + "split longer lines (in tokens) at sentence punctuation and translate them piece by "
                            "piece"),
           arg("--n-best", type=at_least(1), default=UserOptions.n_best, metavar="N",
               help=_USER + "print the N best translations per sentence as 'sentence ||| translation ||| log-prob "
                            "||| log-prob per token' (sentences numbered from 0, as Moses does)"),
           arg("--src-lang", help=_USER + "the source language's code for the tokenizer (default: the "
                                          "checkpoint's data.src, else en)"),
           arg("--tgt-lang", help=_USER + "the target language's code for the detokenizer (default: the "
                                          "checkpoint's data.tgt, else fr)"),
           arg("--no-normalize-punctuation", dest="normalize_punctuation", action="store_const", const=False,
               help=_USER + "leave typographic punctuation as it is (default: as the checkpoint's "
                            "tokenize.normalize_punctuation)"),
           arg("--alignment", action="store_true", help=_USER + "draw each alignment as text on stderr"),
           arg("--heatmap-dir", help=_USER + "write each alignment as a PNG heatmap into this folder")),
          settings={"decode": "decode", "decodes": "models.{model}.decodes", "own": "models.{model}.decode",
                    "detok_lang": "data.tgt"},
          rules=("translate", "translate_extra"),
          runs_model=True, job_log=True),
    # 7-9: evaluation (rnnsearch.evaluation)
    Stage("score", "7. BLEU (tokenized and sacreBLEU), All / No UNK / by sentence length",
          "rnnsearch.evaluation.score:run_score",
          required({"--model": "the model's name (in the JSON)", "--src": "the tokenized test source",
                    "--ref-tok": "the tokenized references", "--ref": "the raw references (sacreBLEU)",
                    "--hyp-dir": "the translate stage's folder", "--out": "the scores (JSON)"}),
          settings={"seed": "seed", "score": "score"}),
    Stage("score-extra", "7. sacreBLEU and chrF of every model on the extra test sets (extra_tests)",
          "rnnsearch.evaluation.score:run_extra_scores",
          (arg("--entry", nargs=4, action="append", required=True, metavar=("SET", "MODEL", "HYP", "REF"),
               help="a test set's name, a model's name, its detokenized translations and the raw references"),
           arg("--out-dir", required=True, help="the folder of the table (extra_tests.md, .csv)")), params=False),
    Stage("tables", "8. Table 1 and Table 2, mean ± sd over replicates", "rnnsearch.evaluation.tables:run_tables",
          (arg("--scores", **_REPLICATED), arg("--train-stats", **_REPLICATED),
           arg("--hyps", **{**_REPLICATED, "help": "tokenized translations, in the order of --scores"}),
           *required({"--ref-tok": "the tokenized references (paired bootstrap)",
                      "--out-dir": "the folder of the tables"})),
          settings={"score": "score", "replicates": "replicates"}),
    Stage("figures", "8. Figure 2 (mean over replicates) and Figure 3", "rnnsearch.evaluation.plots:run_figures",
          (arg("--scores", **_REPLICATED),
           *required({"--attention": "attention.npz of figures.alignment_model's translation",
                      "--src": "the tokenized test source", "--hyp": "that model's tokenized translations",
                      "--nounk": "its nounk.json", "--out-dir": "the folder of the figures"})),
          settings={"seed": "seed", "figures": "figures", "replicates": "replicates"}),
    Stage("aer", "8. alignment error rate of the attention against gold links (reference forced)",
          "rnnsearch.evaluation.aer:run_aer",
          required({"--checkpoint": "the model whose attention is scored", **_TEST,
                    "--gold": "the gold links (aer.format)", "--out": "the AER, precision and recall (JSON)"}),
          settings={"format": "aer.format", "threshold": "aer.threshold", "batch_size": "decode.batch_size",
                    "device": "decode.device"}, runs_model=True),
    Stage("explorer", "9. the explorer: every test sentence, each model's output, scores and attention (HTML)",
          "rnnsearch.evaluation.explorer:run_explorer",
          (arg("--scores", nargs="+", required=True, help="each model's score JSON of replicate 1"),
           arg("--hyp-dirs", nargs="+", required=True, metavar="MODEL=DIR", type=name_value,
               help="each model's translate folder of replicate 1"),
           *required({"--src": "the raw test source", "--ref": "the raw test references",
                      "--src-tok": "the tokenized test source", "--ref-tok": "the tokenized test references",
                      "--tgt-vocab": "the target shortlist with its training counts (vocab stage)",
                      "--figure2": "Figure 2's CSV (bleu_by_length.csv)", "--out": "the page (HTML)"})),
          params=False, scripts=("evaluation/explorer_page.html",)),
    Stage("report", "9. the results page", "rnnsearch.evaluation.report:run_report",
          (*required({"--table1": "Table 1 (Markdown)", "--table2": "Table 2 (Markdown)", "--figure2": "Figure 2"}),
           arg("--alignments", nargs="+", required=True, help="the Figure 3 images"),
           arg("--scores", **_REPLICATED),
           *required({"--src": "the raw test source", "--ref": "the raw test references"}),
           arg("--hyps", nargs="+", required=True, metavar="MODEL=FILE", type=name_value,
               help="each model's raw translations"),
           arg("--aer", help="the aer stage's JSON, when there is one"),
           arg("--explorer", help="the explorer page, which the report links"),
           arg("--alignment-table", help="the tables stage's alignment.md: dropped and repeated words by length"),
           arg("--alignment-figure", help="the figures stage's alignment_by_length.png: the same, drawn"),
           arg("--out", required=True, help="the report (Markdown)")),
          settings={"config": ("seed", "replicates", "data", "tokenize", "vocab", "model", "models", "train",
                               "decode", "score", "aer", "figures")}),
    # tools
    Stage("check-params", "validate params.yaml (and overlays) and print the merged result",
          "rnnsearch.config:print_params",
          (arg("--params", action="append", metavar="YAML",
               help="params.yaml, then any overlays merged over it in order (default: $RNNSEARCH_PARAMS, else "
                    "params.yaml)"),), params=False, log=False),
    Stage("dvc-yaml", "write dvc.yaml from the Snakemake workflow (keeps the two in step)",
          "rnnsearch.dvcyaml:run_dvc_yaml",
          (arg("--output", default="dvc.yaml", help="the file to write"),
           arg("--check", action="store_true", help="fail if dvc.yaml differs from what would be written")),
          params=False, log=False),
)
