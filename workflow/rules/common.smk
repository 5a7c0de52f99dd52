# Validation, the model list, wildcard constraints and input helpers shared by all rules.
import json
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from rnnsearch import config as rcfg
from rnnsearch import slurm_plugin
from rnnsearch.data.corpus import SOURCES
from rnnsearch.data.binarized import paths as binarized_paths
from rnnsearch.commands import stage_code as stage_files

# Snakemake keeps only the last of several --configfile flags: the files of the others would be dropped unseen.
flags = [a for a in sys.argv[1:] if a.split("=")[0] in ("--configfile", "--configfiles")]
if len(flags) > 1:
    raise WorkflowError(f"{' and '.join(sorted({f.split('=')[0] for f in flags}))} given {len(flags)} times: Snakemake reads only the files of the "
                        "last flag. Give every file to one flag, in order: --configfile FILE1 FILE2")

# params.yaml, then any --configfile overlays in order (paths relative to the workflow directory when inside it).
PARAMS_FILES = ["params.yaml"] + [
    os.path.relpath(f) if not os.path.relpath(f).startswith("..") else str(f) for f in workflow.overwrite_configfiles
]
try:
    # Merged the way every stage merges them (an overlay's `remove:` drops an entry), validated against the JSON
    # schema snakemake.utils.validate would use, with messages that name the key.
    # --config key=value last (a section as YAML, merged key by key: --config 'train={lr: 0.001}').
    OVERRIDES = rcfg.command_line(workflow.config_settings.config or {})
    merged = rcfg.load_params(PARAMS_FILES, OVERRIDES)
except rcfg.ConfigError as e:
    raise WorkflowError(str(e)) from None
config.clear()
config.update(merged)

# How every stage is told where its params are: in the environment of its shell command, not on its command
# line nor in its `params:`, so that adding an overlay reruns only the jobs whose own keys (`stage_params`, in
# each rule's `params:`) change value. The stage logs the files and the values it read.
os.environ.update(RNNSEARCH_PARAMS=os.pathsep.join(PARAMS_FILES))
if OVERRIDES:
    os.environ[rcfg.CONFIG_ENV] = json.dumps(OVERRIDES, sort_keys=True)
else:
    os.environ.pop(rcfg.CONFIG_ENV, None)
SRC, TGT = config["data"]["src"], config["data"]["tgt"]
MODELS = list(config["models"])
# The models that train: all but the entries that decode another's checkpoints (models.<name>.decodes).
TRAINED = [m for m in MODELS if rcfg.trained(config, m) == m]
# Each model is trained `replicates` times (replicate r: seed + r - 1); Figure 3, the AER, the peer and the
# extra test sets use replicate 1.
REPLICATES = list(range(1, config["replicates"] + 1))
ALIGN_MODEL = config["figures"]["alignment_model"]
EXTRA_TESTS = config["extra_tests"]
AER_GOLD = {"synthetic": "results/data/raw/test.align", "none": None}.get(config["aer"]["gold"], config["aer"]["gold"])
TRAIN_LENS = rcfg.train_lengths(config)
ALIGN_LETTERS = list("abcdefghijklmnopqrstuvwxyz"[: 1 + config["figures"]["alignment_samples"]]) + ["long"]


wildcard_constraints:
    model="|".join(map(re.escape, MODELS)),
    replicate=r"[1-9]\d*",
    maxlen=r"\d+",
    split="train|dev|test",
    lang=f"{SRC}|{TGT}",
    file=r"[\w.+-]+",
    testset=r"[A-Za-z0-9_-]+",
    archive=r"[\w.+-]+",


def stage_params(stage, model=None):
    """The values a stage reads that can change what it writes (all but rcfg.SPEED_ONLY): declared as Snakemake
    params so that a change reruns exactly its jobs."""
    return rcfg.rerun_params(config, stage, model)


def stage_code(stage):
    """The stage's source files: inputs, so that editing the code reruns the stage."""
    return stage_files(stage)


def setting(key, rule):
    """A params value that `rule` needs and that has no default (a path on the user's machine): unset, the rule
    stops before it runs, saying what to set."""
    value = rcfg.lookup(config, key)
    if value is None:
        raise WorkflowError(f"'{key}' is unset, and the job {rule} needs it. Set it in params.yaml or an "
                            "overlay (docs/configuration.md, docs/benchmarks.md)")
    return value


def train_cost(model):
    """Relative cost of a training job, as its scheduling priority: the longest jobs start first. A model that
    continues another trains only the updates after its parent's."""
    entry = config["models"][model]
    return rcfg.job_updates(config, model) * entry["train_max_len"] * (2 if entry["arch"] == "rnnsearch" else 1) // 1000


def trained_dir(model, replicate):
    """The training folder whose checkpoints `model` is decoded from: its own, or the model's it `decodes`."""
    return f"results/models/{rcfg.trained(config, model)}/replicate{replicate}"


def search_flags(d):
    """The command-line flags of beam search with the decode settings `d` (decode.threads, speed only, is not
    among them: a change of it reruns nothing); GNMT's penalties only where set, so that their absence reruns
    nothing either."""
    gnmt = "".join(f" --{k.replace('_', '-')} {d[k]}" for k in ("length_penalty", "coverage_penalty") if d[k])
    return (f"--beam {d['beam']} --max-len-a {d['max_len_a']} --max-len-b {d['max_len_b']}"
            + ("" if d["length_norm"] else " --no-length-norm") + gnmt)


def continued(w):
    """The finished training a model continues (models.<model>.continues), same replicate: its statistics (an
    input, so that it trains first and a retraining of it trains this one again) and its final checkpoint."""
    parent = config["models"][w.model].get("continues")
    if parent is None:
        return {}
    folder = f"results/models/{parent}/replicate{w.replicate}"
    return {"stats": f"{folder}/train_stats.json", "checkpoint": f"{folder}/checkpoint.pt"}


def cluster_resources(kind, processes=1):
    """Slurm resources of a GPU-capable stage ("train" or "decode") from params.yaml's `cluster`. A job of
    `processes` > 1 (train.processes for training, decode.processes for translation) is one Slurm job of that many
    tasks (the executor's "mpi" jobs: the command starts them with `launcher`), each with the `threads` CPUs of
    params.yaml's `train` or `decode` and the cluster's `gpu`."""
    c = config["cluster"][kind]
    resources = {"mem_mb": c["mem_mb"], "runtime": c["runtime"], **({"gpu": c["gpu"]} if c["gpu"] else {})}
    if processes > 1:
        resources.update(tasks=processes, mpi="srun", cpus_per_task=config[kind]["threads"], nodes=c.get("nodes", 1))
        if c["gpu"]:
            resources.update(gpu=c["gpu"] * processes, tasks_per_gpu=1)
    return resources


def executor_name():
    return workflow.executor_plugin.name if workflow.executor_plugin is not None else ""


def train_retries():
    """Snakemake's retries of a training job: under the Slurm executor, `attempts` - 1 (a job stopped at its time
    limit saves a checkpoint and exits 75; the next attempt resumes); elsewhere none: no time limit to chain
    through, and Ctrl-C stops Snakemake too. The executor is known once the run starts (the Snakefile's `onstart`
    sets this on the rule), not while the rules are read; the rule's own `retries: 0` holds in the Snakemake inside
    each Slurm job, which would otherwise run a failed training again within its job (onstart does not run there).
    Snakemake retries whatever failed: a training's next attempt after a failure that running again repeats (a bad
    setting, a traceback, a diverged run) stops at once (`rnnsearch train --attempt`), asking Slurm for a minute and
    no GPU (train_resources)."""
    return config["cluster"]["train"]["attempts"] - 1 if executor_name() == "slurm" else 0


def train_resources():
    """cluster_resources("train"), each a function of Snakemake's attempt: a retry after a failure that repeats
    itself asks for one minute and no GPU, only to stop (train_retries)."""
    from rnnsearch.jobs import failed_for_good

    resources = cluster_resources("train", config["train"]["processes"])

    def doomed(wildcards, attempt):
        log = Path(f"results/models/{wildcards.model}/replicate{wildcards.replicate}/train.log")
        return attempt > 1 and failed_for_good(log) is not None

    def value(key, cheap):
        return lambda wildcards, attempt: cheap if doomed(wildcards, attempt) else resources[key]

    cheap = {"runtime": 1, "gpu": 0, "mem_mb": min(resources["mem_mb"], 2000)}
    return {**resources, **{k: value(k, v) for k, v in cheap.items() if k in resources},
            "attempt": lambda wildcards, attempt: attempt}


def launcher(kind):
    """What starts the processes of a training or translation job (`processes` of params.yaml's `train` or
    `decode`; docs/cluster.md), as the rule's `launch` param: nothing for one; under the Slurm executor (the slurm
    profile's) and inside a Slurm job, srun, as the job's tasks; elsewhere torchrun, on this machine. The same
    value in the process that submits the job and in the one that runs it."""

    def launch(wildcards):
        n, threads, gpu = config[kind]["processes"], config[kind]["threads"], config["cluster"][kind]["gpu"]
        if n == 1:
            return ""
        executor = executor_name()
        if "slurm" in executor or os.environ.get("SLURM_JOB_ID"):  # submitting to Slurm, or inside its job
            gpus = f"--gpus-per-task={gpu} " if gpu else ""
            return f"srun --ntasks={n} --cpus-per-task={threads} {gpus}--kill-on-bad-exit=1 "
        return f"torchrun --standalone --nproc-per-node={n} --no-python -- "

    return launch


# Under Slurm, the jobs that stream the whole training text at once (extraction, corpus, shard, gather, filter,
# binarize, vocab, data report) get this time limit instead of the profile's 20 minutes: WMT'14 is 850M words.
LONG_JOB_MINUTES = 240


# data.source's record (rnnsearch.data.corpus.SOURCES): what it downloads, where stage 1 reads it (the
# downloads, or the folders extracted from them), what else it reads and writes.
SOURCE = SOURCES[config["data"]["source"]]
FETCHED = f"results/data/{'extract' if SOURCE.extracted else 'download'}/{SOURCE.name}"


# vocab.kind: sentencepiece keeps each language's SentencePiece model beside its vocabulary TSV.
SPM_FILES = (
    [f"results/data/vocab.{lang}.spm" for lang in (SRC, TGT)] if config["vocab"]["kind"] == "sentencepiece" else []
)

# The LIUM bitexts come Moses-tokenized: their tokenize jobs only undo Moses' XML escapes.
PRETOKENIZED_TRAIN = SOURCE.pretokenized(config["data"])


def each_replicate(pattern):
    """`pattern` ({model}, {replicate}) for every model and replicate, model by model."""
    return expand(pattern, model=MODELS, replicate=REPLICATES)


def replicate_patterns(pattern, models=MODELS):
    """A rule's param: `pattern` for every model (of `models`), {replicate} left for the stage to fill in from
    `replicates`, so that the command (and dvc.yaml's) stays the same whatever the number of replicates."""
    names = " ".join(pattern.format(model=m, replicate="{replicate}") for m in models)
    return lambda wildcards: names  # a function: Snakemake formats params strings with the job's wildcards


def train_file(model, lang):
    return f"results/data/train{config['models'][model]['train_max_len']}.{lang}"


def binarized_prefix(model):
    """The prefix of the binarize stage's files of the model's training set."""
    return f"results/data/bin/train{config['models'][model]['train_max_len']}"


def binarized_files(model):
    return [str(p) for p in binarized_paths(binarized_prefix(model)).values()]


def final_outputs():
    return [
        "results/tables/table1.csv",
        "results/tables/table1.md",
        "results/tables/table1_replicates.csv",
        "results/tables/table2.csv",
        "results/tables/table2.md",
        "results/tables/alignment.md",
        "results/figures/bleu_by_length.png",
        "results/figures/bleu_by_length.pdf",
        "results/figures/bleu_by_length.csv",
        *expand("results/figures/alignment_{letter}.png", letter=ALIGN_LETTERS),
        "results/report.md",
        "results/explorer.html",
        "results/data/report.md",
        *(["results/scores/aer.json"] if AER_GOLD else []),
        *(["results/tables/extra_tests.md"] if EXTRA_TESTS else []),
    ]
