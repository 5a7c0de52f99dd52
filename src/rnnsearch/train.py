"""Stage 5: train one model (App. B.2): Adadelta (ε=1e-6, ρ=0.95), minibatches of 80 in the paper's
length-sorted blocks, gradient L2 norm rescaled to at most 1, a fixed update budget.

Writes a checkpoint (model, optimizer, update count, data position, config), a JSON of the learning
statistics of Table 2 (updates, epochs, hours, device, train NLL, dev NLL), and dvclive metrics.
"""

from __future__ import annotations

import logging
import platform
import random
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from .batching import Batch, PaperBatches, sequential_batches
from .checkpoint import save_checkpoint
from .model import build_model
from .textio import read_parallel, write_json_atomic, write_lines_atomic
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


def run_train(name: str, model_cfg: dict, train_cfg: dict, seed: int, src_train: str, tgt_train: str,
              src_dev: str, tgt_dev: str, src_vocab_path: str, tgt_vocab_path: str, out_dir: str) -> dict:
    """Train `name` with its resolved model config; everything goes under `out_dir`."""
    out = Path(out_dir)
    seed_everything(seed)
    torch.set_num_threads(train_cfg["threads"])
    device = resolve_device(train_cfg["device"])
    src_vocab, tgt_vocab = Vocab.load(src_vocab_path), Vocab.load(tgt_vocab_path)
    src, tgt = encode_corpus(*read_parallel(src_train, tgt_train), src_vocab, tgt_vocab)
    dev_src, dev_tgt = encode_corpus(*read_parallel(src_dev, tgt_dev), src_vocab, tgt_vocab)

    model = build_model(model_cfg, len(src_vocab), len(tgt_vocab)).to(device)
    optimizer = make_optimizer(model.parameters(), train_cfg)
    log.info("%s: %s, %s parameters, %d training pairs, device %s", name, model_cfg["arch"],
             f"{model.num_parameters():,}", len(src), device)

    batches = PaperBatches(src, tgt, train_cfg["batch_size"], train_cfg["sort_batches"], seed)
    max_updates, log_every = train_cfg["max_updates"], train_cfg["log_every"]
    live = _live(out / "dvclive")
    window_nll, window_sents, window_words, curve = 0.0, 0, 0, []
    start = time.perf_counter()
    t_window = start
    model.train()
    for update, batch in enumerate(batches, 1):
        batch = batch.to(device)
        loss = batch_nll(model, batch)
        optimizer.zero_grad(set_to_none=True)
        (loss / batch.x.size(0)).backward()  # the cost is the mean over sentences of the summed word NLL
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg["clip_norm"])
        optimizer.step()
        window_nll += loss.item()
        window_sents += batch.x.size(0)
        window_words += batch.source_words + batch.target_words
        if update % log_every == 0 or update == max_updates:
            now = time.perf_counter()
            nll = window_nll / window_sents
            eta = (now - start) / update * (max_updates - update)
            words_per_s = window_words / (now - t_window)
            log.info("%s update %d/%d  epoch %.2f  train NLL/sent %.2f  %.0f words/s  %.2f updates/s  ETA %s",
                     name, update, max_updates, batches.position, nll, words_per_s,
                     (update - curve[-1]["update"] if curve else update) / (now - t_window), _hms(eta))
            curve.append({"update": update, "epoch": round(batches.position, 4), "train_nll": round(nll, 4),
                          "words_per_s": round(words_per_s, 1), "seconds": round(now - start, 2)})
            if live:
                live.log_metric("train/nll_per_sentence", nll)
                live.log_metric("train/words_per_s", words_per_s)
                live.next_step()
            window_nll, window_sents, window_words, t_window = 0.0, 0, 0, now
        if update >= max_updates:
            break
    seconds = time.perf_counter() - start

    dev = evaluate_nll(model, dev_src, dev_tgt, device)
    last = [row["train_nll"] for row in curve[-3:]]
    train_nll = sum(last) / len(last)  # the last logged windows, as a smoothed training cost
    stats = {
        "model": name, "arch": model_cfg["arch"], "parameters": model.num_parameters(),
        "updates": update, "epochs": round(batches.position, 4), "hours": seconds / 3600,
        "seconds": round(seconds, 2), "device": _device_name(device), "threads": train_cfg["threads"],
        "train_nll": train_nll, "dev_nll": dev["nll_per_sentence"], "dev_nll_per_word": dev["nll_per_word"],
        "train_pairs": len(src),
    }
    config = {"name": name, "model": model_cfg, "train": train_cfg, "seed": seed,
              "src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)}
    save_checkpoint(out / "model.pt", model, optimizer, update, {"epoch": batches.epoch, "offset": batches.offset}, config)
    write_json_atomic(out / "train_stats.json", stats)
    write_lines_atomic(out / "learning_curve.tsv",
                       ["\t".join(curve[0])] + ["\t".join(str(v) for v in row.values()) for row in curve])
    if live:
        live.summary.update({"dev/nll_per_sentence": dev["nll_per_sentence"]})
        live.end()
    log.info("%s done: %d updates in %s, dev NLL/sent %.2f (%.3f per word)", name, update, _hms(seconds),
             dev["nll_per_sentence"], dev["nll_per_word"])
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
