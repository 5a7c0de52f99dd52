"""Stage 5: train one model (App. B.2): Adadelta (ε=1e-6, ρ=0.95), minibatches of 80 in the paper's
length-sorted blocks, gradient L2 norm rescaled to at most 1, a fixed update budget.

Writes a checkpoint (model, optimizer, update count, data position, config), a JSON of the learning
statistics of Table 2 (updates, epochs, hours, device, train NLL, dev NLL), and dvclive metrics.
"""

from __future__ import annotations

import contextlib
import logging
import platform
import random
import signal
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from .batching import Batch, PaperBatches, sequential_batches
from .checkpoint import load_checkpoint, save_checkpoint
from .model import build_model
from .textio import InputError, Interrupted, read_parallel, write_json_atomic, write_lines_atomic
from .vocab import PAD_ID, Vocab

log = logging.getLogger("rnnsearch.train")


def resolve_device(name: str) -> torch.device:
    """`auto` takes CUDA when there is one; `cuda` without a GPU falls back to the CPU and says so."""
    if name == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if name == "cuda":
        log.warning("device 'cuda' requested but CUDA is not available here: running on the CPU")
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def encode_corpus(src_lines: list[str], tgt_lines: list[str], src_vocab: Vocab, tgt_vocab: Vocab):
    return ([src_vocab.encode(s.split()) for s in src_lines], [tgt_vocab.encode(t.split()) for t in tgt_lines])


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
    return torch.optim.Adam(params, lr=cfg["lr"])


# Train settings that shape the trajectory: a checkpoint written under other values cannot be resumed.
# max_updates, log_every, checkpoint_every, device and threads may change between a run and its resumption.
RESUME_KEYS = ("optimizer", "lr", "rho", "eps", "batch_size", "sort_batches", "clip_norm")


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


def run_train(name: str, model_cfg: dict, train_cfg: dict, seed: int, src_train: str, tgt_train: str,
              src_dev: str, tgt_dev: str, src_vocab_path: str, tgt_vocab_path: str, out_dir: str) -> dict:
    """Train `name` with its resolved model config; everything goes under `out_dir`.

    Every `checkpoint_every` updates, and on SIGTERM/SIGINT, the whole state goes to `checkpoint.pt`; running
    the same training again continues from there and ends with the same parameters as an uninterrupted run.
    """
    out = Path(out_dir)
    seed_everything(seed)
    torch.set_num_threads(train_cfg["threads"])
    device = resolve_device(train_cfg["device"])
    src_vocab, tgt_vocab = Vocab.load(src_vocab_path), Vocab.load(tgt_vocab_path)
    src, tgt = encode_corpus(*read_parallel(src_train, tgt_train), src_vocab, tgt_vocab)
    dev_src, dev_tgt = encode_corpus(*read_parallel(src_dev, tgt_dev), src_vocab, tgt_vocab)
    config = {"name": name, "model": model_cfg, "train": train_cfg, "seed": seed,
              "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)}

    model = build_model(model_cfg, len(src_vocab), len(tgt_vocab)).to(device)
    optimizer = make_optimizer(model.parameters(), train_cfg)
    batches = PaperBatches(src, tgt, train_cfg["batch_size"], train_cfg["sort_batches"], seed)
    # window: summed NLL, sentences and words since the last log line; curve: the logged windows
    progress = {"update": 0, "seconds": 0.0, "window": [0.0, 0, 0], "curve": []}
    ckpt_path = out / "checkpoint.pt"
    if ckpt_path.exists():
        state = load_checkpoint(ckpt_path, device)
        diffs = _resume_mismatch(state["config"], config)
        if diffs:
            raise InputError(f"{ckpt_path}: written for another configuration ({'; '.join(diffs)}); "
                             "delete it to train from scratch")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        batches.restore(state["data_position"])
        progress = state["progress"]
        torch.set_rng_state(state["rng"])
        log.info("%s: resuming from %s at update %d", name, ckpt_path, progress["update"])
    log.info("%s: %s, %s parameters, %d training pairs, device %s", name,
             ", ".join(f"{k} {v}" for k, v in model.cfg.items()), f"{model.num_parameters():,}", len(src), device)

    def save(path: Path) -> None:
        progress["seconds"] = seconds_before + time.perf_counter() - start
        save_checkpoint(path, model, optimizer, progress["update"], batches.state(), config,
                        progress=progress, rng=torch.get_rng_state(),
                        vocab={"src": src_vocab.words, "tgt": tgt_vocab.words})  # self-contained for translation

    max_updates, log_every, every = train_cfg["max_updates"], train_cfg["log_every"], train_cfg["checkpoint_every"]
    live = _live(out / "dvclive")
    curve, window = progress["curve"], progress["window"]
    seconds_before, start = progress["seconds"], time.perf_counter()
    t_window, first_update = start, progress["update"]
    model.train()
    with _stop_on_signals() as stop:
        for batch in batches if progress["update"] < max_updates else ():
            batch = batch.to(device)
            loss = batch_nll(model, batch)
            optimizer.zero_grad(set_to_none=True)
            (loss / batch.x.size(0)).backward()  # the cost is the mean over sentences of the summed word NLL
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg["clip_norm"])
            optimizer.step()
            progress["update"] = update = progress["update"] + 1
            window[0] += loss.item()
            window[1] += batch.x.size(0)
            window[2] += batch.source_words + batch.target_words
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
                    live.log_metric("train/nll_per_sentence", nll)
                    live.log_metric("train/words_per_s", words_per_s)
                    live.next_step()
                window[:] = [0.0, 0, 0]
                t_window = now
            if update >= max_updates:
                break
            if stop or (every and update % every == 0):
                save(ckpt_path)
                if stop:
                    log.warning("%s: signal %d at update %d: checkpoint saved to %s; rerun to continue",
                                name, stop["signal"], update, ckpt_path)
                    raise Interrupted(f"{name}: interrupted at update {progress['update']}")
    seconds = seconds_before + time.perf_counter() - start

    dev = evaluate_nll(model, dev_src, dev_tgt, device)
    last = [row["train_nll"] for row in curve[-3:]]
    train_nll = sum(last) / len(last)  # the last logged windows, as a smoothed training cost
    stats = {
        "model": name, "arch": model_cfg["arch"], "parameters": model.num_parameters(),
        "updates": progress["update"], "epochs": round(batches.position, 4), "hours": seconds / 3600,
        "seconds": round(seconds, 2), "device": _device_name(device), "threads": train_cfg["threads"],
        "train_nll": train_nll, "dev_nll": dev["nll_per_sentence"], "dev_nll_per_word": dev["nll_per_word"],
        "train_pairs": len(src),
    }
    save(out / "model.pt")
    write_json_atomic(out / "train_stats.json", stats)
    write_lines_atomic(out / "learning_curve.tsv",
                       ["\t".join(curve[0])] + ["\t".join(str(v) for v in row.values()) for row in curve])
    ckpt_path.unlink(missing_ok=True)  # finished: model.pt holds the final state
    if live:
        live.summary.update({"dev/nll_per_sentence": dev["nll_per_sentence"]})
        live.end()
    log.info("%s done: %d updates in %s, dev NLL/sent %.2f (%.3f per word)", name, progress["update"],
             _hms(seconds), dev["nll_per_sentence"], dev["nll_per_word"])
    return stats


def _live(path: Path):
    """dvclive logger (metrics and plots DVC reads), or None when dvclive is not installed."""
    try:
        from dvclive import Live
    except ImportError:  # pragma: no cover - dvclive is a declared dependency
        return None
    try:
        return Live(str(path), save_dvc_exp=False, dvcyaml=None, report=None)
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
