"""`rnnsearch rehearse`: the paper's configuration (`workflow/configs/paper.yaml`) run end to end as one pipeline
on one machine, at the paper's data scale, before a cluster run finds what breaks or runs slow.

The run is paper.yaml's DAG (its models and sizes, 30,000-word shortlists, Adadelta, batch 80, beam 12) in a
workspace of its own (`--out-dir`: a copy of the workflow, its `params.yaml` the rehearsal's merged
configuration), with these differences and no other:

- the training text: `--millions` million generated pairs, written as raw text (tokens separated by spaces), each
  pair's two lengths those of a dev pair drawn at random, its words drawn from the tokenized dev and test text by
  their frequency there, so that the dev and test sentences are in the shortlists and decoding behaves as on
  real input, with 1 % filler words that take each side to 40,000 types (`vocabulary`): 30,000-word shortlists
  full, as the paper's, and some [UNK] in the training text;
- dev and test: the user's real text, `--dev` prefixes (newstest2012 and newstest2013) and `--test`
  (newstest2014), each `<prefix>.en` and `<prefix>.fr`; there is no default;
- each model trains `--updates` updates and validates `--validations` times; `prepare.shards` is `--shards`
  (default: the machine's cores).

It writes `rehearsal.json` in `--out-dir`: every job's wall time and peak host memory (and GPU memory where it used
CUDA) from the last line of its log; for each training the steady updates/s, the seconds per validation and the
CUDA graphs recorded; for each translation the sentences/s; and a projection of the paper's full run from those
rates: each model's paper budget at its measured rate plus a validation every `train.validate_every` of
paper.yaml, and its test translation, on one device (one model after the other) and on five (one model each).
On a GPU that is the paper's run on one GPU and on five; on a CPU the command is only kept working
(tests/test_rehearsal.py)."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import astuple, dataclass
from collections import Counter
from pathlib import Path

import numpy as np
import yaml

from rnnsearch import config as cfg
from rnnsearch.closure import REPO
from rnnsearch.data.text import tokenize_lines
from rnnsearch.runtime import cpu_name, git_commit
from rnnsearch.textio import InputError, Interrupted, read_json, read_lines, read_parallel, write_json_atomic

PIPELINE = ("Snakefile", "params.yaml", "workflow", "envs", "src/rnnsearch")
PAPER = REPO / "workflow" / "configs" / "paper.yaml"
CHUNK = 100_000  # generated pairs written at a time
FILL_TYPES, FILL_SHARE = 40_000, 0.01  # word types a side of the generated text, and the fillers' share of its tokens
END = re.compile(r"rnnsearch (\S+): exit status (\d+) after ([\d.]+) s; peak RSS (\d+) MB"
                 r"(?:; peak GPU memory (\d+) MB allocated, (\d+) MB reserved)?")


def workspace(out: Path) -> Path:
    """A copy of the pipeline's files in `out` (the stages' code among them: the rules list it as inputs)."""
    for name in PIPELINE:
        src, dest = REPO / name, out / name
        if src.is_dir():
            shutil.copytree(src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    return out


def real_text(prefixes: list[str], langs: tuple[str, str]) -> list[tuple[str, str]]:
    """The sentence pairs of `prefixes` (<prefix>.<lang>, line-aligned)."""
    pairs: list[tuple[str, str]] = []
    for prefix in prefixes:
        paths = [Path(f"{prefix}.{lang}") for lang in langs]
        for path in paths:
            if not path.is_file():
                raise InputError(f"{path}: no such file (a --dev or --test prefix names <prefix>.{langs[0]} and "
                                 f"<prefix>.{langs[1]})")
        pairs += zip(*read_parallel(*paths))
    return pairs


def write_pairs(pairs: list[tuple[str, str]], langs: tuple[str, str], dest: Path) -> None:
    for k, lang in enumerate(langs):
        dest.with_suffix(f".{lang}").write_text("".join(p[k] + "\n" for p in pairs), encoding="utf-8")


def vocabulary(tokenized: list[str], types: int = FILL_TYPES, share: float = FILL_SHARE) -> tuple[np.ndarray, np.ndarray]:
    """The words of tokenized text and the cumulative distribution of their frequencies there; then, up to `types`
    types in all, filler words (`zz<k>`) sharing `share` of the tokens equally. The news text has about 20,000
    types a side, fewer than the 30,000 of a shortlist: the fillers fill it, as the paper's output layer is, and
    leave some words outside it, each rarer than the real text's rarest word at `share` 1 %."""
    counts = Counter(w for line in tokenized for w in line.split())
    words, freq = zip(*counts.most_common())
    fill = max(0, types - len(words))
    weights = np.array(freq, dtype=np.float64) / sum(freq) * (1 - share if fill else 1)
    if fill:
        words += tuple(f"zz{k}" for k in range(fill))
        weights = np.concatenate([weights, np.full(fill, share / fill)])
    return np.array(words, dtype=object), np.cumsum(weights)


def generate(pairs: int, lengths: np.ndarray, vocabs: list[tuple[np.ndarray, np.ndarray]], dest: Path,
             langs: tuple[str, str], seed: int) -> None:
    """dest.<lang>: `pairs` generated pairs, each pair's lengths a row of `lengths` (source, target), its words
    drawn from `vocabs` (one per side), CHUNK pairs at a time."""
    rng = np.random.default_rng(seed)
    files = [open(dest.with_suffix(f".{lang}"), "w", encoding="utf-8") for lang in langs]
    try:
        for start in range(0, pairs, CHUNK):
            pick = lengths[rng.integers(0, len(lengths), min(CHUNK, pairs - start))]
            for side, ((words, cdf), f) in enumerate(zip(vocabs, files)):
                n = pick[:, side]
                drawn = words[np.searchsorted(cdf, rng.random(int(n.sum())) * cdf[-1], side="right")]
                sep = np.full(len(drawn), " ", dtype=object)
                sep[np.cumsum(n) - 1] = "\n"
                f.write("".join(itertools.chain.from_iterable(zip(drawn.tolist(), sep.tolist()))))
    finally:
        for f in files:
            f.close()


def rehearsal_params(models: list[str] | None, updates: int, validations: int, shards: int,
                     precision: str | None = None, cores: int | None = None) -> dict:
    """paper.yaml over params.yaml, with the rehearsal's data, budgets (`updates` per training job: a model that
    continues another trains that many after it), shards and `precision` (None: paper.yaml's); `models`: a
    subset, which keeps figures.alignment_model in the config (the figures need it) though only the subset is
    built. The trainings' and translations' threads are at most Snakemake's `cores` (paper.yaml's 8 and 4 on a
    2-core machine made each orthogonal initialisation of a paper-size matrix 20 times slower)."""
    config = cfg.load_params([REPO / "params.yaml", PAPER])
    unknown = sorted(set(models or []) - set(config["models"]))
    if unknown:
        raise InputError(f"--models {unknown[0]}: not a model of paper.yaml (its models: {', '.join(config['models'])})")
    kept = set(models or config["models"]) | {config["figures"]["alignment_model"]}
    changes = {"data": {"source": "local", "local": {"train": "data/train", "dev": "data/dev", "test": "data/test"}},
               "prepare": {"shards": shards},
               "models": {m: {"max_updates": updates * (1 + len(cfg.ancestors(config, m)))} for m in config["models"]},
               "train": {"validate_every": max(1, updates // validations), "checkpoint_every": updates,
                         "log_every": max(1, updates // 20), **({"precision": precision} if precision else {}),
                         "threads": min(config["train"]["threads"], cores or config["train"]["threads"])},
               "decode": {"threads": min(config["decode"]["threads"], cores or config["decode"]["threads"])},
               "remove": [f"models.{m}" for m in config["models"] if m not in kept]}
    merged = cfg.overlay(config, changes, "rnnsearch rehearse")
    cfg.validate(merged)
    return merged


def targets(models: list[str] | None, params: dict) -> list[str]:
    """Snakemake's targets: the whole DAG (of a subset that holds figures.alignment_model too), else the subset's
    scores: its data, trainings and translations (the figures need the alignment model's attention)."""
    if not models or params["figures"]["alignment_model"] in models:
        return []
    return [f"results/scores/{m}/replicate1.json" for m in models]


def run_pipeline(ws: Path, cores: int, goals: list[str]) -> dict:
    """`snakemake --cores <cores> [goals]` in the workspace, one GPU job at a time (paper.yaml's trainings and
    translations each ask for a GPU); its output in snakemake.log. SIGTERM or SIGINT to the rehearsal stops
    Snakemake and every job it started (their own process group), waits for them, and raises Interrupted."""
    bin_dir = Path(sys.executable).parent  # this environment's snakemake and rnnsearch first
    command = ["snakemake", *goals, "--cores", str(cores), "--resources", "gpu=1"]
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    start, stopped = time.monotonic(), {}
    with open(ws / "snakemake.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, cwd=ws, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

        def stop(signum, frame):
            stopped.setdefault("signal", signum)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            status = proc.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if stopped:
        _reap(proc.pid)
        raise Interrupted(f"rehearse: signal {stopped['signal']}: Snakemake and its jobs stopped; {ws} is left "
                          "as it was (a new --out-dir starts again)")
    return {"command": " ".join(command), "exit_status": status, "seconds": round(time.monotonic() - start, 1)}


def _reap(group: int, seconds: float = 60) -> None:
    """Wait up to `seconds` for the process group's last members (jobs saving a checkpoint), then SIGKILL them."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def jobs(ws: Path) -> list[dict]:
    """Each job's stage, exit status, wall seconds and peak memory, from the last line of its log."""
    found = []
    for log in sorted((ws / "results" / "logs").rglob("*.log")):
        ends = END.findall(log.read_text(encoding="utf-8", errors="replace"))
        if ends:
            stage, status, seconds, rss, gpu, reserved = ends[-1]
            found.append({"log": str(log.relative_to(ws)), "stage": stage, "exit_status": int(status),
                          "seconds": float(seconds), "peak_rss_mb": int(rss),
                          "peak_gpu_allocated_mb": int(gpu) if gpu else None,
                          "peak_gpu_reserved_mb": int(reserved) if reserved else None})
    return found


def training(folder: Path) -> dict:
    """A training's measured rates: steady updates/s (the median of the learning curve's windows in its second
    half, recording graphs and the first validations behind), seconds per validation, CUDA graphs, and on CUDA
    the GPU memory allocated and reserved with the graphs recorded at each progress line, from its files and
    train.log."""
    stats = read_json(folder / "train_stats.json")
    rows = [line.split("\t") for line in read_lines(folder / "learning_curve.tsv")[1:]]
    points = [(int(r[0]), float(r[4])) for r in rows]  # update, seconds since the training began
    windows = [(u2 - u1) / (s2 - s1) for (u1, s1), (u2, s2) in zip(points, points[1:]) if s2 > s1]
    steady = windows[len(windows) // 2:]
    text = (folder / "train.log").read_text(encoding="utf-8", errors="replace")
    validations = [float(s) for s in re.findall(r"dev NLL/sent .* \(beam \d+\) in ([\d.]+) s", text)]
    graphs = re.findall(r"updates replayed from (\d+) CUDA graphs \((\d+) padded minibatch shapes", text)
    memory = [{"update": int(u), "allocated_gb": float(a), "reserved_gb": float(r), "cuda_graphs": int(g or 0)}
              for u, a, r, g in re.findall(r"update (\d+)/\d+ .*GPU memory ([\d.]+) GB allocated, ([\d.]+) GB "
                                           r"reserved(?:, (\d+) CUDA graphs)?", text)]
    return {"updates": stats["updates"], "seconds": stats["seconds"], "device": stats["device"],
            "parameters": stats["parameters"], "updates_per_s": figure(np.median(steady)) if steady else None,
            "validation_seconds": validations, "cuda_graphs": int(graphs[-1][0]) if graphs else 0,
            "padded_shapes": int(graphs[-1][1]) if graphs else None, "gpu_memory_by_update": memory}


def figure(x: float) -> float:
    """A measured rate or time as JSON shows it: 4 significant digits (0.116, not 0.11600928074245938)."""
    return float(f"{float(x):.4g}")


# The paper's Table 2: the updates each model trained. RNNsearch-50*'s 6.67 × 10⁵ is where early stopping ended it;
# paper.yaml gives it a budget of 10⁶, which early stopping may cut short.
TABLE2_UPDATES = {"rnnencdec-30": 846_000, "rnnsearch-30": 471_000, "rnnencdec-50": 600_000, "rnnsearch-50": 288_000,
                  "rnnsearch-50-star": 667_000}


def projection(trainings: dict, decoding: dict, paper: dict, update_seconds: dict | None = None) -> dict:
    """The paper's full run from the measured rates: each model's paper.yaml budget at its steady rate (a model
    that continues another: only the updates after its parent's), a validation every train.validate_every at its
    measured time, and its translation job as measured; where Table 2's updates differ from the budget
    (RNNsearch-50*, which early stopping ended at 6.67 × 10⁵), the hours at Table 2's updates too (`table2_*`).
    With one device per model, a continued model's chain (parent, then it) is the longest wait. `update_seconds`
    (arch → seconds per update) replaces the measured rates, e.g. by another device's or precision's."""
    every = paper["train"]["validate_every"]
    models = {}
    for m, t in trainings.items():
        if update_seconds:
            t = {**t, "updates_per_s": 1 / update_seconds[paper["models"][m]["arch"]]}
        budget, own = cfg.train_config(paper, m).max_updates, cfg.job_updates(paper, m)
        parent = paper["models"][m].get("continues")
        if not t["updates_per_s"] or not t["validation_seconds"]:
            models[m] = {"budget": budget, "hours": None, "why": "no steady rate or validation was measured"}
            continue
        validation = figure(np.median(t["validation_seconds"]))

        def hours(updates: int) -> float:
            seconds = updates / t["updates_per_s"] + updates // every * validation
            return round((seconds + decoding.get(m, {}).get("seconds", 0)) / 3600, 2)

        models[m] = {"budget": budget, **({"continues": parent, "trains": own} if parent else {}),
                     "updates_per_s": t["updates_per_s"], "validation_seconds": validation,
                     "validations": own // every, "hours": hours(own)}
        table2 = TABLE2_UPDATES.get(m, budget)
        if table2 != budget:
            table2_own = own - (budget - table2)  # its parent's updates are the same either way
            models[m].update(table2_updates=table2, table2_trains=table2_own, table2_hours=hours(table2_own))
    return {"validate_every": every, "models": models, "devices": len(models), **_totals(models),
            "note": f"on this machine's device (machine.gpu, else its CPU): one device trains and translates the "
                    f"models one after the other, {len(models)} devices one model each (a continued model after "
                    "its parent); data preparation, scoring and queueing are not included; table2_*: with Table 2's "
                    "updates where they differ from paper.yaml's budget"}


def _totals(models: dict) -> dict:
    """The projection's hours on one device and with one device per model, at the budgets and at Table 2's
    updates; None where a model has no hours."""
    if not models or any(x["hours"] is None for x in models.values()):
        return {k: None for k in ("one_device_hours", "one_model_per_device_hours", "table2_one_device_hours",
                                  "table2_one_model_per_device_hours")}
    out = {}
    for prefix, key in (("", "hours"), ("table2_", "table2_hours")):
        hours = {m: x.get(key, x["hours"]) for m, x in models.items()}

        def chain(m: str) -> float:  # a model's hours after those of the models it continues
            return hours[m] + (chain(models[m]["continues"]) if models[m].get("continues") in hours else 0)

        out[f"{prefix}one_device_hours"] = round(sum(hours.values()), 2)
        out[f"{prefix}one_model_per_device_hours"] = round(max(map(chain, hours)), 2)
    return out


@dataclass(frozen=True)
class Rehearsal:
    """The rehearsal's scale: `millions` of generated training pairs, `updates` and `validations` per model,
    Snakemake's `cores`, prepare.`shards` (None: the cores), a subset of paper.yaml's `models` (None: all), the
    corpus's `seed` and the trainings' `precision` (None: paper.yaml's)."""

    millions: float = 4.0
    updates: int = 300
    validations: int = 2
    cores: int = 1
    shards: int | None = None
    models: list[str] | None = None
    seed: int = 1
    precision: str | None = None


def run_rehearse(dev: list[str], test: str, out_dir: str, plan: Rehearsal) -> dict:
    """paper.yaml's DAG on `plan`'s generated corpus and the real `dev` and `test` text, in `out_dir`."""
    millions, updates, validations, cores, shards, models, seed, precision = astuple(plan)

    ws, start = Path(out_dir), time.monotonic()
    if (ws / "results").exists():
        raise InputError(f"{ws}/results exists: give the rehearsal a new --out-dir (nothing there is overwritten)")
    params = rehearsal_params(models, updates, validations, shards or os.cpu_count() or 1, precision, cores)
    langs = (params["data"]["src"], params["data"]["tgt"])
    dev_pairs, test_pairs = real_text(dev, langs), real_text([test], langs)  # read before anything is made
    workspace(ws)
    (ws / "params.yaml").write_text("# rnnsearch rehearse: paper.yaml over params.yaml, with the rehearsal's data, "
                                    "budgets, shards and threads\n" + yaml.safe_dump(params, sort_keys=False),
                                    encoding="utf-8")
    (ws / "data").mkdir(exist_ok=True)
    write_pairs(dev_pairs, langs, ws / "data" / "dev")
    write_pairs(test_pairs, langs, ws / "data" / "test")
    tokenized = [tokenize_lines([p[k] for p in dev_pairs + test_pairs], lang) for k, lang in enumerate(langs)]
    lengths = np.array([[max(1, len(s.split())), max(1, len(t.split()))]
                        for s, t in zip(*(side[: len(dev_pairs)] for side in tokenized))])
    pairs = int(round(millions * 1e6))
    generate(pairs, lengths, [vocabulary(side) for side in tokenized], ws / "data" / "train", langs, seed)
    generated = time.monotonic() - start
    pipeline = run_pipeline(ws, cores, targets(models, params))
    paper = cfg.load_params([REPO / "params.yaml", PAPER])
    models_dir, tr_dir = ws / "results" / "models", ws / "results" / "translations"
    built = models or list(params["models"])
    trainings = {m: training(models_dir / m / "replicate1") for m in built
                 if (models_dir / m / "replicate1" / "train_stats.json").exists()}
    decoding = {m: read_json(tr_dir / m / "replicate1" / "decode_stats.json") for m in built
                if (tr_dir / m / "replicate1" / "decode_stats.json").exists()}
    found = jobs(ws)
    for m, d in decoding.items():  # the translation job's whole wall time (model loading, All and No UNK)
        job = next((j for j in found if j["log"].endswith(f"translate/{m}/replicate1.log")), None)
        d["seconds"] = job["seconds"] if job else d["seconds_all"]
    import torch

    result = {"benchmark": "rehearsal", "pairs": pairs, "dev_sentences": len(dev_pairs),
              "test_sentences": len(test_pairs), "updates": updates, "validations": validations,
              "shards": params["prepare"]["shards"], "cores": cores, "models": built,
              "generate_seconds": round(generated, 1), "pipeline": pipeline, "jobs": found,
              "trainings": trainings, "decoding": decoding, "projection": projection(trainings, decoding, paper),
              "machine": {"processor": cpu_name(), "cpus": os.cpu_count(), "torch": torch.__version__,
                          "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0)
                          if torch.cuda.is_available() else None}, "git": git_commit()}
    write_json_atomic(ws / "rehearsal.json", result)
    if pipeline["exit_status"] != 0:
        raise InputError(f"the rehearsal's pipeline failed (exit status {pipeline['exit_status']}): see "
                         f"{ws / 'snakemake.log'} and the logs under {ws / 'results' / 'logs'}; "
                         f"{ws / 'rehearsal.json'} holds what was measured")
    return result
