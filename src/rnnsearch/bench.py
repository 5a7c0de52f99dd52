"""Benchmarks that report what they measured, where, and with which settings (never part of `snakemake all`).

`rnnsearch bench-decode`: greedy and beam-search decoding speed of a trained model on a tokenized test set,
measured in one run, each setting after a short warm-up, so the ratio beam/greedy is from the same conditions.
"""

from __future__ import annotations

import logging
import os
import platform
import time

import torch

from .checkpoint import load_model
from .search import translate_ids
from .textio import read_lines, write_json_atomic
from .vocab import Vocab

log = logging.getLogger("rnnsearch.bench")


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads()}


def run_bench_decode(checkpoint: str, src_tok: str, src_vocab: str, beams: list[int], batch_size: int,
                     max_len_a: float, max_len_b: int, threads: int, out: str) -> dict:
    torch.set_num_threads(threads)
    model, config = load_model(checkpoint)
    sv = Vocab.load(src_vocab)
    src = [sv.encode(s.split()) for s in read_lines(src_tok)]
    runs = []
    for beam in beams:
        opts = dict(beam=beam, batch_size=batch_size, max_len_a=max_len_a, max_len_b=max_len_b)
        translate_ids(model, src[:batch_size], **opts)  # warm-up: allocator, thread pool
        start = time.perf_counter()
        hyps = translate_ids(model, src, **opts)
        seconds = time.perf_counter() - start
        words = sum(len(h.tokens) for h in hyps)
        runs.append({"beam": beam, "batch_size": batch_size, "sentences": len(src), "seconds": round(seconds, 3),
                     "sentences_per_s": round(len(src) / seconds, 2), "output_words_per_s": round(words / seconds, 1),
                     "mean_output_length": round(words / len(src), 2)})
        log.info("%s beam %d: %.1f sentences/s, %.0f output words/s", config["name"], beam,
                 runs[-1]["sentences_per_s"], runs[-1]["output_words_per_s"])
    result = {"benchmark": "decode", "model": config["name"], "arch": config["model"]["arch"],
              "sizes": {k: config["model"][k] for k in ("m", "n", "n_align", "l")}, "test_set": src_tok,
              "machine": machine(), "runs": runs}
    write_json_atomic(out, result)
    return result


# Model sizes of the training benchmark: the paper's (App. A) and the peer benchmark's (../shared/bench, JoeyNMT).
TRAIN_SIZES = {
    "paper": {"m": 620, "n": 1000, "n_align": 1000, "l": 500, "vocab": 30000},
    "bench": {"m": 256, "n": 512, "n_align": 512, "l": 256, "vocab": 8000},
}


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports kilobytes)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_bench_train(arch: str, size: str, batch: int, length: int, steps: int, threads: int, device_name: str,
                    seed: int, out: str) -> dict:
    """Training speed and memory of one model for batches of `batch` sentence pairs of `length` words each side.

    Random word ids (uniform over the shortlist; speed does not depend on the words), two untimed warm-up
    updates (the allocator grows and the optimizer creates its state in the first two), then `steps` timed updates: forward, backward, clipping, Adadelta step. Words/s counts source and
    target words (</s> included). Run one configuration per process: peak RSS is the process's.
    """
    from .model import build_model
    from .train import batch_nll, make_optimizer, resolve_device
    from .batching import make_batch

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    device = resolve_device(device_name)
    sizes = TRAIN_SIZES[size]
    K = sizes["vocab"] + 3  # the shortlist plus <pad>, </s>, [UNK]
    model = build_model({"arch": arch, **sizes}, K, K).to(device).train()
    optimizer = make_optimizer(model.parameters(), {"optimizer": "adadelta", "lr": 1.0, "rho": 0.95, "eps": 1e-6})
    g = torch.Generator().manual_seed(seed)
    sents = [torch.randint(3, K, (length,), generator=g).tolist() + [1] for _ in range(2 * batch)]
    b = make_batch(sents[:batch], sents[batch:], list(range(batch))).to(device)
    times = []
    warmup = 2
    for step in range(warmup + steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = batch_nll(model, b)
        optimizer.zero_grad(set_to_none=True)
        (loss / batch).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
        log.info("%s %s update %d: %.2f s", arch, size, step, time.perf_counter() - start)
    seconds = sum(times) / len(times)
    words = b.source_words + b.target_words
    result = {"benchmark": "train", "arch": arch, "size": size, "sizes": sizes, "parameters": model.num_parameters(),
              "batch": batch, "length": length, "warmup_updates": warmup, "timed_updates": steps, "seconds_per_update": round(seconds, 3),
              "words_per_s": round(words / seconds, 1), "sentences_per_s": round(batch / seconds, 2),
              "peak_rss_mb": round(peak_rss_mb(), 1), "device": str(device), "machine": machine()}
    if device.type == "cuda":
        result["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    log.info("%s %s: %s parameters, %.2f s/update, %.0f words/s, peak RSS %.0f MB", arch, size,
             f"{result['parameters']:,}", seconds, result["words_per_s"], result["peak_rss_mb"])
    write_json_atomic(out, result)
    return result
