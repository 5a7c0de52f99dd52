"""Stage 5: train one model (App. B.2): Adadelta (ε=1e-6, ρ=0.95), minibatches of 80 in the paper's
length-sorted blocks, gradient L2 norm rescaled to at most 1, a fixed update budget or early stopping on dev
BLEU (the paper's RNNsearch-50*).

Writes `model.pt` (the state with the best dev BLEU: model, optimizer, RNG, update count, data position,
config, git commit, vocabularies), a JSON of the learning statistics of Table 2 (updates, epochs, hours,
device, train NLL, dev NLL), the learning and validation curves as TSV, and dvclive metrics.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from .batching import Batch, PaperBatches, sequential_batches
from .checkpoint import check_vocabs, load_checkpoint, save_checkpoint
from .model import build_model
from .textio import InputError, Interrupted, read_parallel, write_json_atomic, write_lines_atomic
from .vocab import PAD_ID, Vocab

log = logging.getLogger("rnnsearch.train")


def resolve_device(name: str) -> torch.device:
    """`auto` takes CUDA when there is one; `cuda` without a usable GPU, or a GPU allocated by the scheduler
    (CUDA_VISIBLE_DEVICES set) that CUDA cannot use, falls back to the CPU and says so."""
    if name == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    allocated = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if name == "cuda" or allocated not in ("", "-1"):
        log.warning("a GPU was requested (device %s, CUDA_VISIBLE_DEVICES=%r) but CUDA is not available here: "
                    "running on the CPU", name, allocated)
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def encode_corpus(src_lines: list[str], tgt_lines: list[str], src_vocab: Vocab, tgt_vocab: Vocab):
    return ([src_vocab.encode(s.split()) for s in src_lines], [tgt_vocab.encode(t.split()) for t in tgt_lines])


def native_bf16_cpu() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX); elsewhere oneDNN emulates them."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's own probes (private)
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def batch_nll(model, batch: Batch) -> torch.Tensor:
    """Summed negative log-likelihood of the batch's target words (</s> included)."""
    logits = model(batch.x, batch.lengths, batch.y_in)  # (B, Ty, K)
    return F.cross_entropy(logits.flatten(0, 1), batch.y_out.flatten(), ignore_index=PAD_ID, reduction="sum")


@torch.no_grad()
def evaluate_nll(model, src: list[list[int]], tgt: list[list[int]], device, batch_size: int = 80) -> dict:
    """Dev NLL per sentence (the paper's Table 2 unit: summed over words, averaged over sentences) and per word."""
    model.eval()
    total, words = 0.0, 0
    for batch in sequential_batches(src, tgt, batch_size):
        batch = batch.to(device)
        total += float(batch_nll(model, batch))
        words += batch.target_words
    model.train()
    return {"nll_per_sentence": total / len(src), "nll_per_word": total / max(words, 1)}


def make_optimizer(params, cfg: dict) -> torch.optim.Optimizer:
    if cfg["optimizer"] == "adadelta":
        return torch.optim.Adadelta(params, lr=cfg["lr"], rho=cfg["rho"], eps=cfg["eps"])
    return torch.optim.Adam(params, lr=cfg["lr"], fused=True)  # one kernel per tensor (CPU and CUDA): ~5 % per update


# Train settings that shape the trajectory: a checkpoint written under other values cannot be resumed.
# The others (max_updates, patience, log_every, checkpoint_every, keep_checkpoints, validate_every,
# validate_beam, device, precision, threads) may change between a run and its resumption.
RESUME_KEYS = ("optimizer", "lr", "rho", "eps", "batch_size", "batch_tokens", "sort_batches", "clip_norm")


def _resume_mismatch(saved: dict, config: dict) -> list[str]:
    diffs = []
    for key in ("seed", "src_vocab", "tgt_vocab"):
        if saved.get(key) != config[key]:
            diffs.append(f"{key}: {saved.get(key)!r} in the checkpoint, {config[key]!r} now")
    for section, keys in (("model", sorted(set(saved["model"]) | set(config["model"]))), ("train", RESUME_KEYS)):
        for k in keys:
            a, b = saved[section].get(k), config[section].get(k)
            if a != b:
                diffs.append(f"{section}.{k}: {a!r} in the checkpoint, {b!r} now")
    return diffs


@contextlib.contextmanager
def _stop_on_signals():
    """SIGTERM (Slurm's time limit, preemption) and SIGINT set a flag that the loop checks after each update."""
    flag: dict = {}
    handler = lambda signum, frame: flag.setdefault("signal", signum)  # noqa: E731
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


@torch.no_grad()
def validate(model, dev_src: list[list[int]], dev_tgt: list[list[int]], dev_src_lines: list[str],
             dev_ref_lines: list[str], tgt_vocab: Vocab, beam: int, device, samples: int = 3) -> dict:
    """Dev NLL per sentence and per word, tokenized dev BLEU of greedy (beam 1) or beam decoding, and a few
    sample translations (source, reference, output) for the log."""
    from .score import tokenized_bleu
    from .search import translate_ids

    nll = evaluate_nll(model, dev_src, dev_tgt, device)
    model.eval()
    hyps = translate_ids(model, dev_src, beam=beam, batch_size=80, max_len_a=1.5, max_len_b=10, device=device)
    model.train()
    out = [" ".join(tgt_vocab.decode(h.tokens)) for h in hyps]
    picks = [round(k * (len(out) - 1) / max(samples - 1, 1)) for k in range(min(samples, len(out)))]
    return {**nll, "bleu": tokenized_bleu(out, dev_ref_lines).score,
            "samples": [(dev_src_lines[i], dev_ref_lines[i], out[i]) for i in picks]}


def run_train(name: str, model_cfg: dict, train_cfg: dict, seed: int, src_train: str, tgt_train: str,
              src_dev: str, tgt_dev: str, src_vocab_path: str, tgt_vocab_path: str, out_dir: str) -> dict:
    """Train `name` with its resolved model config; everything goes under `out_dir`.

    Every `checkpoint_every` updates, and on SIGTERM/SIGINT, the whole state goes to `checkpoint.pt` (the last
    `keep_checkpoints` of them also stay as checkpoint-<update>.pt); running the same training again continues
    from there and ends with the same parameters as an uninterrupted run. Every `validate_every` updates and at
    the end, the dev set is scored; the best state by dev BLEU is kept (best-<update>.pt) and becomes `model.pt`.
    With `patience` > 0, training stops after that many validations without a better dev BLEU.
    """
    with _stop_on_signals() as stop:  # from the start: a SIGTERM while the data loads is honoured at update 1
        return _train(stop, name, model_cfg, train_cfg, seed, src_train, tgt_train, src_dev, tgt_dev, src_vocab_path,
                      tgt_vocab_path, out_dir)


def _train(stop: dict, name: str, model_cfg: dict, train_cfg: dict, seed: int, src_train: str, tgt_train: str,
           src_dev: str, tgt_dev: str, src_vocab_path: str, tgt_vocab_path: str, out_dir: str) -> dict:
    out = Path(out_dir)
    seed_everything(seed)
    torch.set_num_threads(train_cfg["threads"])
    device = resolve_device(train_cfg["device"])
    bf16 = train_cfg["precision"] == "bf16"  # autocast on resolve_device's cuda or cpu
    if bf16 and device.type == "cpu" and not native_bf16_cpu():
        log.warning("precision bf16: this CPU has no bf16 matrix instructions (AVX512-BF16 or AMX), so its bf16 "
                    "products are emulated and training will be slower than in fp32")
    src_vocab, tgt_vocab = Vocab.load(src_vocab_path), Vocab.load(tgt_vocab_path)
    src, tgt = encode_corpus(*read_parallel(src_train, tgt_train), src_vocab, tgt_vocab)
    dev_lines = read_parallel(src_dev, tgt_dev)
    dev_src, dev_tgt = encode_corpus(*dev_lines, src_vocab, tgt_vocab)
    config = {"name": name, "model": model_cfg, "train": train_cfg, "seed": seed,
              "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)}

    model = build_model(model_cfg, len(src_vocab), len(tgt_vocab)).to(device)
    optimizer = make_optimizer(model.parameters(), train_cfg)
    batches = PaperBatches(src, tgt, train_cfg["batch_size"], train_cfg["sort_batches"], seed, train_cfg["batch_tokens"])
    # window: summed NLL, sentences and words since the last log line; curve: the logged windows;
    # validations: one row per dev evaluation; best: the best dev BLEU so far; bad: validations since then
    # runs: one entry per process that worked on this training (a chain of cluster jobs has several)
    progress = {"update": 0, "seconds": 0.0, "window": [0.0, 0, 0], "curve": [], "validations": [],
                "best": None, "bad": 0, "runs": []}
    ckpt_path = out / "checkpoint.pt"
    resumed = ckpt_path.exists()
    if resumed:
        state = load_checkpoint(ckpt_path, device)
        diffs = _resume_mismatch(state["config"], config)
        if diffs and state.get("progress", {}).get("finished"):  # a finished training of other settings: start afresh
            log.info("%s: %s holds a finished training of another configuration (%s): training from scratch", name,
                     ckpt_path, "; ".join(diffs))
            resumed = False
        elif diffs:
            raise InputError(f"{ckpt_path}: written for another configuration ({'; '.join(diffs)}); "
                             "delete it to train from scratch")
    if resumed:
        check_vocabs(state, ckpt_path, src=(src_vocab_path, src_vocab), tgt=(tgt_vocab_path, tgt_vocab))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        batches.restore(state["data_position"])
        progress = state["progress"]
        torch.set_rng_state(state["rng"])
        if device.type == "cuda" and state.get("cuda_rng") is not None:  # dropout masks on the GPU
            torch.cuda.set_rng_state(state["cuda_rng"], device)
        log.info("%s: resuming from %s at update %d", name, ckpt_path, progress["update"])
        runs = progress.setdefault("runs", [])
        if runs and runs[-1]["ended_by"] is None:  # killed without a signal: it lost what followed its checkpoint
            runs[-1]["ended_by"] = "killed (lost the updates after its last checkpoint)"
        progress["finished"] = False
    else:  # states left by an earlier run that did not finish, or by a finished one of other settings
        for old in [*out.glob("best-*.pt"), *out.glob("checkpoint-*.pt"), ckpt_path]:
            old.unlink(missing_ok=True)
    run = {"start": progress["update"], "end": progress["update"], "ended_by": None,
           "slurm_job": os.environ.get("SLURM_JOB_ID"), "host": platform.node()}
    progress["runs"].append(run)
    commit = git_commit()
    log.info("%s: %s", name, ", ".join(f"{k} {v}" for k, v in model.cfg.items()))
    log.info("%s: %s parameters, %d training pairs, %d dev pairs, device %s%s, git %s", name,
             f"{model.num_parameters():,}", len(src), len(dev_src), device, " (bf16 autocast)" if bf16 else "", commit)

    def save(path: Path) -> None:
        progress["seconds"] = seconds_before + time.perf_counter() - start
        save_checkpoint(path, model, optimizer, progress["update"], batches.state(), config,
                        progress=progress, rng=torch.get_rng_state(), git=commit,
                        cuda_rng=torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                        vocab={"src": src_vocab.words, "tgt": tgt_vocab.words,  # self-contained for translation
                               **{f"{side}_spm": v.spm for side, v in (("src", src_vocab), ("tgt", tgt_vocab))
                                  if v.spm is not None}})

    def run_validation(update: int) -> bool:
        """Score the dev set, keep the best state; True when patience has run out."""
        v = validate(model, dev_src, dev_tgt, *dev_lines, tgt_vocab, train_cfg["validate_beam"], device)
        best = progress["best"]  # better: a higher dev BLEU, or the same BLEU (e.g. 0 early on) and a lower NLL
        improved = best is None or (v["bleu"], -v["nll_per_sentence"]) > (best["bleu"], -best["nll"])
        if improved:
            progress["best"], progress["bad"] = {"update": update, "bleu": v["bleu"], "nll": v["nll_per_sentence"]}, 0
        else:
            progress["bad"] += 1
        row = {"update": update, "epoch": round(batches.position, 4), "dev_nll": round(v["nll_per_sentence"], 4),
               "dev_nll_per_word": round(v["nll_per_word"], 4), "dev_bleu": round(v["bleu"], 2)}
        progress["validations"].append(row)
        log.info("%s update %d  dev NLL/sent %.2f  NLL/word %.3f  BLEU %.2f (beam %d)  %s", name, update,
                 v["nll_per_sentence"], v["nll_per_word"], v["bleu"], train_cfg["validate_beam"],
                 "new best" if improved else f"best {progress['best']['bleu']:.2f} at update "
                 f"{progress['best']['update']}, {progress['bad']} without improvement")
        for k, (s, r, h) in enumerate(v["samples"], 1):
            log.info("%s sample %d\n    source:    %s\n    reference: %s\n    output:    %s", name, k, s, r, h)
        if live:
            live.step = update
            for key in ("dev_nll", "dev_nll_per_word", "dev_bleu"):
                live.log_metric(key.replace("_", "/", 1), row[key])
            live.make_summary()
        if improved:
            save(_best_path(out, update))
        patience = train_cfg["patience"]
        return bool(patience) and progress["bad"] >= patience

    max_updates, log_every, every = train_cfg["max_updates"], train_cfg["log_every"], train_cfg["checkpoint_every"]
    validate_every = train_cfg["validate_every"]
    live = _live(out / "dvclive", resume=resumed)
    curve, window = progress["curve"], progress["window"]
    seconds_before, start = progress["seconds"], time.perf_counter()
    t_window, first_update = start, progress["update"]
    done = progress["update"] >= max_updates or _patience_spent(progress, train_cfg)
    bar = _progress_bar(progress["update"], max_updates, name)
    model.train()
    for batch in batches if not done else ():
        batch = batch.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = batch_nll(model, batch)
        optimizer.zero_grad(set_to_none=True)
        (loss / batch.x.size(0)).backward()  # the cost is the mean over sentences of the summed word NLL
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg["clip_norm"])
        optimizer.step()
        progress["update"] = update = progress["update"] + 1
        window[0] += loss.item()
        window[1] += batch.x.size(0)
        window[2] += batch.source_words + batch.target_words
        progress["words"] = progress.get("words", 0) + batch.source_words + batch.target_words
        if bar is not None:
            bar.update(1)
        if update % log_every == 0 or update == max_updates:
            now = time.perf_counter()
            nll, words_per_s = window[0] / window[1], window[2] / (now - t_window)
            eta = (now - start) / (update - first_update) * (max_updates - update)
            log.info("%s update %d/%d  epoch %.2f  train NLL/sent %.2f  %.0f words/s  %.2f updates/s  ETA %s",
                     name, update, max_updates, batches.position, nll, words_per_s,
                     (update - max(first_update, curve[-1]["update"] if curve else 0)) / (now - t_window),
                     _hms(eta))
            curve.append({"update": update, "epoch": round(batches.position, 4), "train_nll": round(nll, 4),
                          "words_per_s": round(words_per_s, 1),
                          "seconds": round(seconds_before + now - start, 2)})
            if live:
                live.step = update
                live.log_metric("train/nll_per_sentence", nll)
                live.log_metric("train/words_per_s", words_per_s)
                live.make_summary()
            window[:] = [0.0, 0, 0]
            t_window = now
        if update >= max_updates:
            break
        if validate_every and update % validate_every == 0 and run_validation(update):
            log.info("%s: early stop at update %d: dev BLEU has not improved for %d validations", name, update,
                     progress["bad"])
            break
        if stop or (every and update % every == 0):
            run.update(end=update, ended_by=f"signal {stop['signal']}" if stop else None)
            save(ckpt_path)
            _keep_last(out, update, train_cfg["keep_checkpoints"])
            _prune_best(out, progress["best"])
            if stop:
                log.warning("%s: signal %d at update %d: checkpoint saved to %s; rerun to continue",
                            name, stop["signal"], update, ckpt_path)
                raise Interrupted(f"{name}: interrupted at update {progress['update']}")
    if bar is not None:
        bar.close()
    seconds = seconds_before + time.perf_counter() - start
    if not progress["validations"] or progress["validations"][-1]["update"] != progress["update"]:
        run_validation(progress["update"])  # the final state is always validated
    final_update, train_nll = progress["update"], _smoothed_train_nll(curve)
    run.update(end=final_update, ended_by="early stop" if _patience_spent(progress, train_cfg) else "update budget")

    # The final state stays in checkpoint.pt (marked finished) and the best in best-<update>.pt, model.pt being a
    # hard link to it: a job killed after this point (Slurm's time limit while Snakemake wraps up, which then
    # deletes the outputs of the "failed" job) is completed by the next attempt without training again.
    progress["finished"] = True
    save(ckpt_path)
    best = progress["best"]
    _prune_best(out, best)
    best_path = _best_path(out, best["update"])
    model.load_state_dict(load_checkpoint(best_path, device)["model"])  # the selected model: the best dev BLEU
    selected = next(v for v in progress["validations"] if v["update"] == best["update"])
    stats = {
        "model": name, "arch": model_cfg["arch"], "parameters": model.num_parameters(),
        "updates": final_update, "epochs": round(batches.position, 4), "hours": seconds / 3600,
        "seconds": round(seconds, 2), "device": _device_name(device), "threads": train_cfg["threads"],
        "train_nll": train_nll, "dev_nll": selected["dev_nll"], "dev_nll_per_word": selected["dev_nll_per_word"],
        "dev_bleu": selected["dev_bleu"], "selected_update": best["update"],
        "early_stopped": _patience_spent(progress, train_cfg) and final_update < max_updates,
        "train_pairs": len(src), "git": commit, "runs": progress["runs"],
        "words": progress.get("words", 0),  # source + target words trained on (all updates)
    }
    _link(best_path, out / "model.pt")
    write_json_atomic(out / "train_stats.json", stats)
    write_lines_atomic(out / "learning_curve.tsv",
                       ["\t".join(curve[0])] + ["\t".join(str(v) for v in row.values()) for row in curve])
    rows = progress["validations"]
    write_lines_atomic(out / "validation.tsv",
                       ["\t".join(rows[0])] + ["\t".join(str(v) for v in row.values()) for row in rows])
    if live:
        live.summary.update({"dev/nll_per_sentence": selected["dev_nll"], "dev/bleu": selected["dev_bleu"]})
        live.end()
    log.info("%s done: %d updates in %s; model.pt is update %d: dev BLEU %.2f, NLL/sent %.2f (%.3f per word)",
             name, final_update, _hms(seconds), best["update"], selected["dev_bleu"], selected["dev_nll"],
             selected["dev_nll_per_word"])
    return stats


def _patience_spent(progress: dict, train_cfg: dict) -> bool:
    return bool(train_cfg["patience"]) and progress["bad"] >= train_cfg["patience"]


def _smoothed_train_nll(curve: list[dict]) -> float:
    """The mean of the last three logged windows, as Table 2's training cost."""
    last = [row["train_nll"] for row in curve[-3:]]
    return sum(last) / len(last) if last else float("nan")


def _best_path(out: Path, update: int) -> Path:
    return out / f"best-{update:09d}.pt"


def _prune_best(out: Path, best: dict | None) -> None:
    """Delete best-<update>.pt files other than the current best. Called only when checkpoint.pt has just been
    written (or at the end), so a run killed later and resumed from that checkpoint still finds its best."""
    keep = _best_path(out, best["update"]) if best else None
    for path in out.glob("best-*.pt"):
        if path != keep:
            path.unlink()


def _link(source: Path, target: Path) -> None:
    """`target` as a hard link to `source` (a copy on a filesystem without hard links), replaced atomically."""
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _keep_last(out: Path, update: int, keep: int) -> None:
    """checkpoint-<update>.pt beside checkpoint.pt for the last `keep` checkpoints (hard links: no copy)."""
    if keep <= 0:
        return
    _link(out / "checkpoint.pt", out / f"checkpoint-{update:09d}.pt")
    for old in sorted(out.glob("checkpoint-*.pt"))[:-keep]:
        old.unlink()


def git_commit() -> str:
    """The commit of the code that runs (with +dirty when the tree has changes), or 'unknown' outside git."""
    repo = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _progress_bar(initial: int, total: int, name: str):
    """A progress bar over updates when stderr is a terminal (tqdm turns itself off otherwise)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with dvc
        return None
    return tqdm(total=total, initial=initial, desc=name, unit="upd", disable=None, leave=False, mininterval=2)


def _live(path: Path, resume: bool = False):
    """dvclive logger (metrics and plots DVC reads), or None when dvclive is not installed."""
    try:
        from dvclive import Live
    except ImportError:  # pragma: no cover - dvclive is a declared dependency
        return None
    try:
        return Live(str(path), save_dvc_exp=False, dvcyaml=None, report=None, resume=resume)
    except Exception as e:  # dvclive inspects the git repository; outside one (or in an empty one) it can fail
        log.warning("dvclive disabled (%s: %s); the learning curve is still in the log", type(e).__name__, e)
        return None


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"


def _hms(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
