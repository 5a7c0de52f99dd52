"""`rnnsearch bench-search`: decoding speed of a model size (the paper's, App. A, or the peer benchmark's) on a
tokenized test set such as newstest2014, without a trained model.

The weights are drawn at random (seeded): the time of a search does not depend on their values once every output
has the same length, so each output is forced to be exactly N words long, N the mean reference length with
</s> (the peer benchmark's fixed-length decodes: </s> blocked before step N, every hypothesis stopped at N).
The source words map to a shortlist of the test source's own most frequent words (their ids below the model's
K); the model's output layer has the size's full K. Greedy and beam searches run in turn in one process, each
after a warm-up on the first batch, with the device synchronised around the timed search.
"""

from __future__ import annotations

import logging
import time
from dataclasses import astuple
from collections import Counter

import torch

from rnnsearch.bench.data import peak_rss_mb
from rnnsearch.bench.peer import fixed_length
from rnnsearch.bench.speed import Setup, TRAIN_SIZES, machine, set_tf32, synchronizer
from rnnsearch.data.vocab import build_vocab
from rnnsearch.decoding.search import translate_ids
from rnnsearch.model import build_model
from rnnsearch.runtime import resolve_device
from rnnsearch.textio import InputError, read_lines, write_json_atomic

log = logging.getLogger("rnnsearch.bench")


def run_bench_search(setup: Setup, src: str, ref: str, beams: list[int], out: str) -> dict:
    """Sentences/s of greedy (beam 1) and beam search over the sentences of `src`, outputs `ref`'s mean length."""
    arch, size, batch, threads, device_name, seed, precision = astuple(setup)
    if precision not in ("fp32", "tf32"):
        raise InputError(f"--precision {precision!r}: expected fp32 or tf32 (decoding has no bf16 path)")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    device = resolve_device(device_name, "--device")
    set_tf32(device, precision)
    sizes = TRAIN_SIZES[size]
    K = sizes["vocab"] + 3
    model = build_model({"arch": arch, **{k: sizes[k] for k in ("m", "n", "n_align", "l")}}, K, K).to(device).eval()
    sentences = [line.split() for line in read_lines(src)]
    vocab = build_vocab(Counter(w for words in sentences for w in words), sizes["vocab"])
    ids = [vocab.encode(words) for words in sentences]
    fixed = fixed_length(ref)
    sync, runs = synchronizer(device.type), []
    for beam in beams:
        opts = dict(beam=beam, batch_size=batch, max_len_a=0.0, max_len_b=fixed, min_len=fixed, device=device)
        translate_ids(model, ids[:batch], **opts)  # warm-up: allocator, handles, kernels
        sync()
        start = time.perf_counter()
        hyps = translate_ids(model, ids, **opts)
        sync()
        seconds = time.perf_counter() - start
        if {len(h.tokens) for h in hyps} != {fixed}:
            raise RuntimeError(f"fixed-length search gave lengths {sorted({len(h.tokens) for h in hyps})}, not {fixed}")
        runs.append({"beam": beam, "sentences": len(ids), "seconds": round(seconds, 3),
                     "sentences_per_s": round(len(ids) / seconds, 2),
                     "output_words_per_s": round(len(ids) * fixed / seconds, 1)})
        log.info("%s %s %s beam %d: %.1f sentences/s (%d sentences, every output %d words)", arch, size, precision,
                 beam, runs[-1]["sentences_per_s"], len(ids), fixed)
    result = {"benchmark": "search", "arch": arch, "size": size, "sizes": sizes, "precision": precision,
              "test_set": src, "sentences": len(ids), "mean_source_length": round(sum(map(len, ids)) / len(ids), 2),
              "fixed_output_length": fixed, "batch": batch, "weights": f"random (seed {seed})", "runs": runs,
              "peak_rss_mb": peak_rss_mb(), "device": str(device), "machine": machine()}
    if device.type == "cuda":
        result.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                      peak_cuda_mb=round(torch.cuda.max_memory_allocated() / 2**20, 1))
    write_json_atomic(out, result)
    return result
