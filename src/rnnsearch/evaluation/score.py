"""Stage 7: BLEU as the paper's community computed it and as it is computed today.

* "Tokenized BLEU": corpus BLEU on Moses-tokenized hypotheses and references, no further tokenization and
  no lowercasing: what multi-bleu.perl computed in 2014 (sacrebleu with `tokenize='none'`).
* sacreBLEU: detokenized hypotheses against the raw references, with sacreBLEU's default 13a tokenizer and
  its signature.
Both on All test sentences and on the No-UNK subset (no out-of-shortlist word in the source or the
reference, decoded with [UNK] forbidden), and tokenized BLEU by source length for Figure 2, each bucket's
BLEU from the n-gram statistics summed over the bucket's sentences.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU

from rnnsearch.evaluation.bleu import no_unk_ids, tokenized_bleu  # noqa: F401 (imported from here too)
from rnnsearch.evaluation.coverage import alignment_measures
from rnnsearch.settings import ScoreConfig
from rnnsearch.textio import (
    InputError,
    read_json,
    read_lines,
    write_json_atomic,
    write_lines_atomic,
)


def sentence_stats(hyps: list[str], refs: list[str]) -> np.ndarray:
    """Per-sentence BLEU sufficient statistics (N, 10): hypothesis and reference length, then matching and
    total n-grams for n = 1..4, as sacreBLEU's own significance tests use them."""
    return np.asarray(BLEU(tokenize="none", force=True)._extract_corpus_statistics(hyps, [refs]), dtype=np.int64)


def bleu_from_stats(total: np.ndarray) -> float:
    """Corpus BLEU from summed sentence statistics (the same number as tokenized_bleu on those sentences)."""
    return BLEU(tokenize="none", force=True)._compute_score_from_stats([int(v) for v in total]).score


def bootstrap_interval(stats: np.ndarray, samples: int, seed: int, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of corpus BLEU over `samples` resamplings of the sentences (with replacement)."""
    rng = np.random.default_rng(seed)
    sums = stats[rng.integers(0, len(stats), size=(samples, len(stats)))].sum(axis=1)  # (samples, 10)
    scores = np.array([bleu_from_stats(s) for s in sums])
    tail = (1 - level) / 2 * 100
    return float(np.percentile(scores, tail)), float(np.percentile(scores, 100 - tail))


def sacre_bleu(hyps: list[str], refs: list[str]) -> tuple[float, str]:
    metric = BLEU()
    score = metric.corpus_score(hyps, [refs])
    return score.score, str(metric.get_signature())


def bucket_label(lo: int, hi: int | None) -> str:
    return f"{lo}-{hi}" if hi is not None else f"{lo}+"


def buckets(edges: list[int]) -> list[tuple[int, int | None]]:
    """Upper edges [10, 20, …, 60] → (1,10), (11,20), …, (51,60), (61, None)."""
    out, lo = [], 1
    for hi in edges:
        out.append((lo, hi))
        lo = hi + 1
    out.append((lo, None))
    return out


def bleu_by_length(src_tok: list[str], hyps: list[str], refs: list[str], edges: list[int],
                   bootstrap: int = 0, seed: int = 0) -> list[dict]:
    """Tokenized BLEU per source-length bucket (source words, punctuation included, as the paper counts),
    from the n-gram statistics summed over the bucket, with a bootstrap 95% interval when `bootstrap` > 0."""
    stats = sentence_stats(hyps, refs)
    rows = []
    for k, (lo, hi) in enumerate(buckets(edges)):
        ids = [i for i, s in enumerate(src_tok) if lo <= len(s.split()) and (hi is None or len(s.split()) <= hi)]
        row = {"bucket": bucket_label(lo, hi), "lo": lo, "hi": hi, "sentences": len(ids), "bleu": None,
               "ci_low": None, "ci_high": None}
        if ids:
            total = stats[ids].sum(axis=0)
            row.update(bleu=bleu_from_stats(total), sys_len=int(total[0]), ref_len=int(total[1]),
                       counts=total[2:6].tolist(), totals=total[6:10].tolist())
            if bootstrap:
                row["ci_low"], row["ci_high"] = bootstrap_interval(stats[ids], bootstrap, seed + k)
        rows.append(row)
    return rows


def check_aligned(hyp_path, hyps, ref_path, refs) -> None:
    if len(hyps) != len(refs):
        raise InputError(f"{hyp_path} has {len(hyps)} lines but {ref_path} has {len(refs)}: they must align")
    if not refs:
        raise InputError(f"{ref_path}: no sentences to score")


def run_score(model: str, src: str, ref_tok: str, ref: str, hyp_dir: str, out: str, score: ScoreConfig,
              seed: int = 0) -> dict:
    """Score one model's translations of the test set (`src`: tokenized, references tokenized and raw, `hyp_dir`:
    the translate stage's folder); writes a metrics JSON."""
    src_tok_path, ref_tok_path, ref_raw_path = src, ref_tok, ref
    edges, bootstrap = score.length_buckets, score.bootstrap_samples
    src_tok, ref_tok, ref_raw = read_lines(src_tok_path), read_lines(ref_tok_path), read_lines(ref_raw_path)
    hyp_tok, hyp = read_lines(f"{hyp_dir}/test.hyp.tok"), read_lines(f"{hyp_dir}/test.hyp")
    check_aligned(f"{hyp_dir}/test.hyp.tok", hyp_tok, ref_tok_path, ref_tok)
    check_aligned(f"{hyp_dir}/test.hyp", hyp, ref_raw_path, ref_raw)
    ids = read_json(f"{hyp_dir}/nounk.json")["ids"]
    nk_tok, nk = read_lines(f"{hyp_dir}/nounk.hyp.tok"), read_lines(f"{hyp_dir}/nounk.hyp")
    if not (len(ids) == len(nk_tok) == len(nk)):
        raise InputError(f"{hyp_dir}: nounk.json lists {len(ids)} sentences but nounk.hyp.tok has {len(nk_tok)} "
                         f"and nounk.hyp {len(nk)}")
    tok_all = tokenized_bleu(hyp_tok, ref_tok)
    sacre_all, signature = sacre_bleu(hyp, ref_raw)
    decoded = read_json(f"{hyp_dir}/decode_stats.json")
    result = {
        "model": model,
        "arch": decoded["arch"],
        "seed": decoded.get("seed"),  # the training's seed (replicate r: seed + r - 1)
        "sentences": len(ref_tok),
        "bleu_tok_all": tok_all.score,
        "bleu_tok_all_detail": str(tok_all),
        "sacrebleu_all": sacre_all,
        "nounk_sentences": len(ids),
        "bleu_tok_nounk": tokenized_bleu(nk_tok, [ref_tok[i] for i in ids]).score if ids else None,
        "sacrebleu_nounk": sacre_bleu(nk, [ref_raw[i] for i in ids])[0] if ids else None,
        "sacrebleu_signature": signature,
        "tokenized_bleu_definition": "corpus BLEU-4 on Moses-tokenized text, no lowercasing (multi-bleu.perl); "
                                     "sacrebleu tokenize=none",
        "bootstrap_samples": bootstrap,
        "by_length": bleu_by_length(src_tok, hyp_tok, ref_tok, edges, bootstrap, seed),
        "alignment": _alignment(src_tok, hyp_tok, ref_tok, Path(hyp_dir) / "attention.npz", edges),
    }
    write_json_atomic(out, result)
    return result


def _alignment(src_tok: list[str], hyp_tok: list[str], ref_tok: list[str], npz: Path, edges: list[int]) -> dict:
    """rnnsearch.evaluation.coverage's measures of the translations: dropped and attended-again source words from
    the attention the translate stage wrote (none for a model without attention), repetition for every model."""
    bins = [(bucket_label(lo, hi), lo, hi) for lo, hi in buckets(edges)]
    with np.load(npz) as alphas:
        has = len(alphas.files) > 0
        return alignment_measures(src_tok, hyp_tok, ref_tok, {k: alphas[k] for k in alphas.files} if has else None,
                                  bins)


def bleu_chrf(hyps: list[str], refs: list[str]) -> dict:
    """sacreBLEU and chrF of detokenized hypotheses against raw references, rounded, with both signatures."""
    from sacrebleu.metrics import CHRF

    bleu, chrf = BLEU(), CHRF()
    return {"bleu": round(bleu.corpus_score(hyps, [refs]).score, 2), "chrf": round(chrf.corpus_score(hyps, [refs]).score, 2),
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature())}


def run_extra_scores(entry: list[tuple[str, str, str, str]], out_dir: str) -> dict:
    """sacreBLEU and chrF of (test set, model, detokenized hypotheses, raw references) entries; writes
    extra_tests.json and extra_tests.md (one row per model, BLEU / chrF per test set)."""
    scores: dict = {}
    signatures = {}
    for name, model, hyp_path, ref_path in entry:
        hyps, refs = read_lines(hyp_path), read_lines(ref_path)
        check_aligned(hyp_path, hyps, ref_path, refs)
        s = bleu_chrf(hyps, refs)
        scores.setdefault(model, {})[name] = {"bleu": s["bleu"], "chrf": s["chrf"], "sentences": len(refs)}
        signatures = {"bleu": s["bleu_signature"], "chrf": s["chrf_signature"]}
    sets = list(dict.fromkeys(e[0] for e in entry))
    lines = ["| model | " + " | ".join(f"{s} BLEU / chrF" for s in sets) + " |", "|---" * (len(sets) + 1) + "|"]
    for model, row in scores.items():
        lines.append(f"| {model} | " + " | ".join(f"{row[s]['bleu']:.2f} / {row[s]['chrf']:.2f}" for s in sets) + " |")
    lines += ["", "Detokenized output against the raw references, " +
              ", ".join(f"{s}: {next(iter(scores.values()))[s]['sentences']} sentences" for s in sets) + ".",
              f"BLEU: `{signatures['bleu']}`; chrF: `{signatures['chrf']}`."]
    result = {"scores": scores, "signatures": signatures}
    write_json_atomic(Path(out_dir) / "extra_tests.json", result)
    write_lines_atomic(Path(out_dir) / "extra_tests.md", lines)
    return result
