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
