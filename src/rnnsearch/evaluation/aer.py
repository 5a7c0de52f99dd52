"""Alignment error rate of RNNsearch's attention against gold word alignments (Och & Ney 2003).

The model is forced to produce the reference translation (teacher forcing), and the α_ij of each reference
word j become hard links: the source word with the largest weight (argmax, the usual reading of Figure 3),
plus, with `threshold` > 0, every source word whose weight reaches it. A target word whose largest weight is on
the source </s> gets no link. With sure links S ⊆ possible links P and hard links A:

    precision = |A ∩ P| / |A|      recall = |A ∩ S| / |S|      AER = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Gold formats (positions 1-based, English/source first, as in the NAACL 2003 shared task):
    naacl   one link per line: "sentence source-position target-position [S|P] [confidence]" (no letter: S;
            position 0 is NULL and is ignored)
    talp    one line per sentence: "i-j" sure links and "ipj" possible links, separated by spaces
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from rnnsearch.checkpoint import check_vocabs, load_checkpoint, model_of
from rnnsearch.data.batching import sequential_batches
from rnnsearch.data.vocab import Vocab
from rnnsearch.runtime import resolve_device
from rnnsearch.textio import InputError, read_lines, write_json_atomic

log = logging.getLogger("rnnsearch.aer")

Gold = tuple[set[tuple[int, int]], set[tuple[int, int]]]  # sure, possible (possible includes sure)


def _position(text: str, limit: int, what: str, where: str) -> int:
    if not text.isdigit():
        raise InputError(f"{where}: {what} position {text!r} is not a number")
    value = int(text)
    if value > limit:
        raise InputError(f"{where}: {what} position {value} is beyond the sentence's {limit} words")
    return value


def read_gold(path: str, fmt: str, src_lens: list[int], tgt_lens: list[int]) -> list[Gold]:
    """Gold links per sentence, checked against the sentence lengths; errors name the file and line."""
    n = len(src_lens)
    gold: list[Gold] = [(set(), set()) for _ in range(n)]
    lines = read_lines(path)
    if fmt == "talp":
        if len(lines) != n:
            raise InputError(f"{path}: {len(lines)} lines, but the test set has {n} sentences (talp: one line each)")
        for k, line in enumerate(lines):
            for item in line.split():
                sep = "-" if "-" in item else "p" if "p" in item else None
                where = f"{path}:{k + 1}"
                if sep is None:
                    raise InputError(f"{where}: {item!r} is neither 'i-j' (sure) nor 'ipj' (possible)")
                i, j = item.split(sep, 1)
                link = (_position(i, src_lens[k], "source", where), _position(j, tgt_lens[k], "target", where))
                _add(gold[k], link, sep == "-")
        return gold
    for number, line in enumerate(lines, 1):
        fields = line.split()
        where = f"{path}:{number}"
        if not fields:
            continue
        if len(fields) < 3 or (len(fields) > 3 and fields[3] not in ("S", "P")):
            raise InputError(f"{where}: expected 'sentence source-position target-position [S|P]', got {line!r}")
        k = _position(fields[0], n, "sentence", where) - 1
        if k < 0:
            raise InputError(f"{where}: sentence numbers start at 1")
        link = (_position(fields[1], src_lens[k], "source", where), _position(fields[2], tgt_lens[k], "target", where))
        _add(gold[k], link, len(fields) < 4 or fields[3] == "S")
    return gold


def _add(gold: Gold, link: tuple[int, int], sure: bool) -> None:
    if link[0] == 0 or link[1] == 0:  # NULL
        return
    if sure:
        gold[0].add(link)
    gold[1].add(link)


@torch.no_grad()
def forced_attention(model, src_ids: list[list[int]], tgt_ids: list[list[int]], batch_size: int,
                     device) -> list[np.ndarray]:
    """α of every reference word over the source (both with </s>), by teacher forcing: (Ty, Tx) per sentence."""
    out: list[np.ndarray | None] = [None] * len(src_ids)
    for batch in sequential_batches(src_ids, tgt_ids, batch_size):  # y_in: the reference shifted, y_0 = PAD
        batch = batch.to(device)
        memory = model.encode(batch.x, batch.lengths)
        state, alphas = memory.s0, []
        for t in range(batch.y_in.size(1)):
            _, state, alpha = model.step(batch.y_in[:, t], state, memory)
            alphas.append(alpha)
        A = torch.stack(alphas, 1).cpu().numpy()  # (B, Ty, Tx)
        for b, i in enumerate(batch.index):
            out[i] = A[b, : len(tgt_ids[i]), : len(src_ids[i])]
    return out  # type: ignore[return-value]


def hard_links(alpha: np.ndarray, threshold: float = 0.0) -> set[tuple[int, int]]:
    """1-based (source, target) links from α (Ty, Tx) with </s> last on both axes: argmax per target word,
    plus weights ≥ threshold when threshold > 0; links to the source </s> are dropped."""
    n_tgt, n_src = alpha.shape[0] - 1, alpha.shape[1] - 1
    links = set()
    for j in range(n_tgt):
        best = int(alpha[j].argmax())
        if best < n_src:
            links.add((best + 1, j + 1))
        if threshold > 0:
            links |= {(i + 1, j + 1) for i in np.flatnonzero(alpha[j, :n_src] >= threshold)}
    return links


def alignment_scores(hyp: list[set[tuple[int, int]]], gold: list[Gold]) -> dict:
    """Corpus-level precision, recall and AER (counts summed over sentences)."""
    a = s = a_s = a_p = 0
    for A, (S, P) in zip(hyp, gold):
        a, s = a + len(A), s + len(S)
        a_s, a_p = a_s + len(A & S), a_p + len(A & P)
    return {"aer": 1 - (a_s + a_p) / max(a + s, 1), "precision": a_p / max(a, 1), "recall": a_s / max(s, 1),
            "links": a, "sure": s}


@dataclass(frozen=True)
class AerSettings:
    """aer.format and aer.threshold of params.yaml, and the decode.batch_size and decode.device it decodes with."""

    format: str
    threshold: float
    batch_size: int
    device: str


def run_aer(checkpoint: str, src: str, ref: str, src_vocab: str, tgt_vocab: str, gold: str, settings: AerSettings,
            out: str) -> dict:
    """The AER of the checkpoint's attention on the tokenized test set (`src`, `ref`), the references forced,
    against the `gold` links."""
    src_tok, ref_tok, src_vocab_path, tgt_vocab_path, gold_path = src, ref, src_vocab, tgt_vocab, gold
    fmt, threshold, batch_size = settings.format, settings.threshold, settings.batch_size
    device = resolve_device(settings.device, "decode.device")
    state = load_checkpoint(checkpoint, device)
    model, config = model_of(state, checkpoint, device)
    if model.attention is None:
        raise InputError(f"{checkpoint}: {config['name']} has no alignment model (attention: none)")
    src_vocab, tgt_vocab = Vocab.load(src_vocab_path), Vocab.load(tgt_vocab_path)
    check_vocabs(state, checkpoint, src=(src_vocab_path, src_vocab), tgt=(tgt_vocab_path, tgt_vocab))
    src, ref = read_lines(src_tok), read_lines(ref_tok)
    if len(src) != len(ref):
        raise InputError(f"{src_tok} has {len(src)} lines but {ref_tok} has {len(ref)}")
    gold = read_gold(gold_path, fmt, [len(s.split()) for s in src], [len(r.split()) for r in ref])
    alphas = forced_attention(model, [src_vocab.encode(s.split()) for s in src],
                              [tgt_vocab.encode(r.split()) for r in ref], batch_size, device)
    result = {"model": config["name"], "gold": gold_path, "format": fmt, "sentences": len(src),
              "method": "argmax" if not threshold else f"argmax + alpha >= {threshold}", "threshold": threshold,
              "argmax": alignment_scores([hard_links(a) for a in alphas], gold)}
    if threshold:
        result["with_threshold"] = alignment_scores([hard_links(a, threshold) for a in alphas], gold)
    main = result.get("with_threshold", result["argmax"])
    log.info("%s: AER %.3f (precision %.3f, recall %.3f) on %d sentences, %s", config["name"], main["aer"],
             main["precision"], main["recall"], len(src), result["method"])
    write_json_atomic(out, result)
    return result
