"""Stage 9b: the explorer, `results/explorer.html`: every test sentence with its source, reference and each model's
translation, sentence-level BLEU and chrF, and the attention α_ij each RNNsearch produced for its output (§5.2 and
Figure 3, for every sentence); beside it, for any two models a reader picks, BLEU by length (Figure 2's numbers),
word accuracy by frequency in the training text, and the output/reference length ratio by length.

One self-contained page: the data is gzip-compressed JSON and 8-bit attention in the page itself, opened with the
browser's DecompressionStream (no server, no network). Replicate 1 of each model, as Figure 3 and report.md.

Sentence scores are sacreBLEU's (`sentence_bleu`, `sentence_chrf` defaults) on the detokenized output against the
raw reference. Word accuracy follows compare-mt (Neubig et al. 2019, `FreqWordBucketer`): an output word matches
the next unmatched occurrence of the same word in the reference; per frequency bucket, recall = matches /
reference words, precision = matches / output words, F = their harmonic mean.
"""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rnnsearch.evaluation.names import paper_name
from rnnsearch.evaluation.score import check_aligned
from rnnsearch.textio import InputError, atomic_path, read_json, read_lines

PAGE = Path(__file__).with_name("explorer_page.html")
FREQUENCY_CUTOFFS = (10, 100, 1_000, 10_000)  # training-text counts of shortlist words; then "outside the shortlist"


def sentence_scores(hyps: list[str], refs: list[str]) -> tuple[list[float], list[float]]:
    """sacreBLEU's sentence BLEU and chrF of each output against its reference (the defaults of
    `sacrebleu.sentence_bleu` and `sacrebleu.sentence_chrf`), to two decimals."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(effective_order=True), CHRF()
    return ([round(bleu.sentence_score(h, [r]).score, 2) for h, r in zip(hyps, refs)],
            [round(chrf.sentence_score(h, [r]).score, 2) for h, r in zip(hyps, refs)])


def frequency_labels(cutoffs: tuple[int, ...] = FREQUENCY_CUTOFFS) -> list[str]:
    bounds = [f"{a:,}–{b - 1:,}" for a, b in zip((1, *cutoffs), cutoffs)]
    return [*bounds, f"≥ {cutoffs[-1]:,}", "outside the shortlist"]


def frequency_bucket(word: str, counts: dict[str, int], cutoffs: tuple[int, ...] = FREQUENCY_CUTOFFS) -> int:
    """The bucket of a word by its count in the training text: shortlist words by `cutoffs`, any other word last."""
    if word not in counts:
        return len(cutoffs) + 1
    return sum(counts[word] >= c for c in cutoffs)


def word_accuracy(refs: list[list[str]], outs: list[list[str]], counts: dict[str, int]) -> dict[str, list]:
    """compare-mt's word F-measure by frequency bucket of one system: reference, output and matched words per bucket,
    and F = 2·matched / (reference + output) (None for a bucket with no word on either side)."""
    n = len(FREQUENCY_CUTOFFS) + 2
    ref_total, out_total, matched = [0] * n, [0] * n, [0] * n
    for ref, out in zip(refs, outs):
        left: dict[str, int] = {}
        for w in ref:
            left[w] = left.get(w, 0) + 1
            ref_total[frequency_bucket(w, counts)] += 1
        for w in out:
            b = frequency_bucket(w, counts)
            out_total[b] += 1
            if left.get(w, 0) > 0:
                left[w] -= 1
                matched[b] += 1
    f = [None if r + o == 0 else round(2 * m / (r + o), 4) for m, r, o in zip(matched, ref_total, out_total)]
    return {"ref": ref_total, "out": out_total, "matched": matched, "f": f}


def length_ratio(hyps: list[list[str]], refs: list[list[str]], bucket: list[int], buckets: int) -> list[float | None]:
    """Per source-length bucket: output words over reference words (tokenized), None for an empty bucket."""
    out, ref = [0] * buckets, [0] * buckets
    for h, r, b in zip(hyps, refs, bucket):
        out[b] += len(h)
        ref[b] += len(r)
    return [round(o / r, 4) if r else None for o, r in zip(out, ref)]


def quantized_attention(npz_path: str, n: int, hyp_tok: list[str], src_tok: list[str]) -> tuple[bytes, list]:
    """α of every sentence as uint8 (round(255 α)), row-major, concatenated; per sentence [offset, rows, cols] and,
    for a subword vocabulary, its source and output pieces. Sentences without a matrix get None."""
    chunks, index, offset = [], [], 0
    with np.load(npz_path) as npz:
        for i in range(n):
            if str(i) not in npz.files:
                index.append(None)
                continue
            alpha = npz[str(i)].astype(np.float32)
            src = npz[f"src.{i}"].tolist() if f"src.{i}" in npz.files else src_tok[i].split() + ["</s>"]
            hyp = npz[f"hyp.{i}"].tolist() if f"hyp.{i}" in npz.files else hyp_tok[i].split() + ["</s>"]
            if alpha.shape != (len(hyp), len(src)):
                raise InputError(f"{npz_path}: matrix {i} has shape {alpha.shape}, expected {(len(hyp), len(src))}")
            q = np.clip(np.rint(alpha * 255), 0, 255).astype(np.uint8)
            chunks.append(q.tobytes())
            units = [src, hyp] if f"src.{i}" in npz.files else None
            index.append([offset, q.shape[0], q.shape[1], units])
            offset += q.size
    return b"".join(chunks), index


def explorer_data(models: list[dict], src: list[str], ref: list[str], src_tok: list[str], ref_tok: list[str],
                  buckets: list[dict], figure2: pd.DataFrame, counts: dict[str, int]) -> tuple[dict, bytes]:
    """The page's JSON and its attention buffer. `models`: key, name, arch, hyp, hyp_tok and attention (an .npz
    path or None), in params.yaml's order."""
    lengths = [max(len(s.split()), 1) for s in src_tok]
    bucket = [next(j for j, b in enumerate(buckets) if b["lo"] <= n and (b["hi"] is None or n <= b["hi"]))
              for n in lengths]
    refs_tok = [r.split() for r in ref_tok]
    data = {"src": src, "ref": ref, "src_tok": src_tok, "ref_tok": ref_tok, "bucket": bucket,
            "buckets": [b["bucket"] for b in buckets], "frequency_buckets": frequency_labels(), "models": []}
    blobs, offset = [], 0
    for m in models:
        bleu, chrf = sentence_scores(m["hyp"], ref)
        outs_tok = [h.split() for h in m["hyp_tok"]]
        rows = figure2[(figure2["model"] == m["key"]) & (figure2["replicate"] == 1)]
        entry = {"key": m["key"], "name": m["name"], "arch": m["arch"], "hyp": m["hyp"], "hyp_tok": m["hyp_tok"],
                 "bleu": bleu, "chrf": chrf, "bleu_by_length": [None if pd.isna(x) else float(x) for x in rows["bleu"]],
                 "word_accuracy": word_accuracy(refs_tok, outs_tok, counts),
                 "length_ratio": length_ratio(outs_tok, refs_tok, bucket, len(buckets)), "attention": None}
        if m["attention"]:
            blob, index = quantized_attention(m["attention"], len(src), m["hyp_tok"], src_tok)
            entry["attention"] = [None if x is None else [x[0] + offset, *x[1:]] for x in index]
            blobs.append(blob)
            offset += len(blob)
        data["models"].append(entry)
    return data, b"".join(blobs)


def write_page(data: dict, attention: bytes, out: str) -> int:
    """The page: the template with the gzip'd JSON and attention in base64; returns its size in bytes."""
    def packed(raw: bytes) -> str:
        return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")

    page = PAGE.read_text(encoding="utf-8")
    page = page.replace("@DATA@", packed(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()))
    page = page.replace("@ATTENTION@", packed(attention))
    with atomic_path(out) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return len(page.encode("utf-8"))


def _counts(vocab_tsv: str) -> dict[str, int]:
    """Training-text counts of the target shortlist's words (the vocab stage's TSV: id, word, count)."""
    counts = {}
    for line in read_lines(vocab_tsv):
        fields = line.split("\t")
        if len(fields) == 3 and fields[2].isdigit() and int(fields[2]) > 0:  # not <pad>, </s>, [UNK]
            counts[fields[1]] = int(fields[2])
    return counts


@dataclass(frozen=True)
class TestText:
    """The test set, raw (`src`, references `ref`) and tokenized."""

    src: str
    ref: str
    src_tok: str
    ref_tok: str


def run_explorer(scores: list[str], hyp_dirs: list[tuple[str, str]] | dict[str, str], test: TestText, tgt_vocab: str,
                 figure2: str, out: str) -> None:
    """results/explorer.html from each model's replicate-1 score JSON and translation folder (`hyp_dirs`: model →
    folder), the test set, the target shortlist's counts and Figure 2's CSV."""
    score_files, figure2_csv, ref_raw = scores, figure2, test.ref
    scores = {s["model"]: s for s in (read_json(f) for f in score_files)}
    src, ref, src_tok, ref_tok = (read_lines(p) for p in (test.src, test.ref, test.src_tok, test.ref_tok))
    models = []
    for key, folder in dict(hyp_dirs).items():
        if key not in scores:
            raise InputError(f"explorer: no --scores file for model {key!r} (given: {', '.join(scores)})")
        d = Path(folder)
        hyp, hyp_tok = read_lines(d / "test.hyp"), read_lines(d / "test.hyp.tok")
        for path, lines in ((d / "test.hyp", hyp), (d / "test.hyp.tok", hyp_tok)):
            check_aligned(str(path), lines, ref_raw, ref)
        with np.load(d / "attention.npz") as npz:
            has_attention = any(k.isdigit() for k in npz.files)
        models.append({"key": key, "name": paper_name(key, scores[key]["arch"]), "arch": scores[key]["arch"],
                       "hyp": hyp, "hyp_tok": hyp_tok, "attention": str(d / "attention.npz") if has_attention else None})
    buckets = next(iter(scores.values()))["by_length"]
    data, attention = explorer_data(models, src, ref, src_tok, ref_tok, buckets, pd.read_csv(figure2_csv),
                                    _counts(tgt_vocab))
    write_page(data, attention, out)
