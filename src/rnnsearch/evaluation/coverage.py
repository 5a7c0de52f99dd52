"""What an alignment model without memory does wrong on long sentences (Tu et al. 2016, §1): it drops source words
(under-translation) and translates some twice (over-translation). Measured per translation of the test set, and
summed by source-length bucket (Figure 2's buckets):

    dropped         the share of source words j whose total attention Σ_i α_ij is below 0.5
    attended again  the share whose total attention is above 1.5
    repetition      the share of the output's n-grams (n = 1 … 4) repeated beyond their count in the reference:
                    an n-gram found k times in the output and r times in the reference counts max(0, k − max(r, 1))

Source words are the real ones (the source's </s> left out; pieces with a subword vocabulary), α summed over every
generated word, </s> included. A model without attention (RNNencdec) has repetition only.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

DROPPED, AGAIN = 0.5, 1.5  # Σ_i α_ij below: dropped; above: attended again
ORDERS = 4  # n-grams of 1 to 4 words, as BLEU counts them


def attention_counts(alpha: np.ndarray) -> tuple[int, int, int]:
    """(source words, dropped, attended again) of one translation's α (generated words × source words + </s>)."""
    total = alpha[:, :-1].astype(np.float64).sum(axis=0)  # Σ_i α_ij over the real source words
    return int(total.size), int((total < DROPPED).sum()), int((total > AGAIN).sum())


def repetition_counts(hyp: list[str], ref: list[str]) -> tuple[int, int]:
    """(n-grams repeated beyond the reference's count, n-grams) of one output, n = 1 … ORDERS."""
    excess = total = 0
    for n in range(1, ORDERS + 1):
        found = Counter(tuple(hyp[k : k + n]) for k in range(len(hyp) - n + 1))
        wanted = Counter(tuple(ref[k : k + n]) for k in range(len(ref) - n + 1))
        excess += sum(max(0, k - max(wanted[g], 1)) for g, k in found.items())
        total += sum(found.values())
    return excess, total


def _shares(rows: np.ndarray) -> dict:
    """The shares of summed counts (words, dropped, again, excess, n-grams); None where nothing was counted."""
    words, dropped, again, excess, grams = (int(v) for v in rows.sum(axis=0)) if len(rows) else (0,) * 5
    return {"sentences": len(rows), "source_words": words,
            "dropped": dropped / words if words else None, "attended_again": again / words if words else None,
            "repetition": excess / grams if grams else None}


def alignment_measures(src_tok: list[str], hyp_tok: list[str], ref_tok: list[str], alphas,
                       bins: list[tuple[str, int, int | None]]) -> dict:
    """The three shares over the whole test set and by source-length bucket (`bins`: label, first and last
    length, None for no end; source words, as Figure 2 counts them). `alphas`: sentence index → α (the translate
    stage's attention.npz), or None for a model without attention."""
    rows = np.zeros((len(hyp_tok), 5), dtype=np.int64)
    for i, (hyp, ref) in enumerate(zip(hyp_tok, ref_tok)):
        if alphas is not None:
            rows[i, :3] = attention_counts(alphas[str(i)])
        rows[i, 3:] = repetition_counts(hyp.split(), ref.split())
    lengths = np.array([len(s.split()) for s in src_tok])
    by_length = []
    for label, lo, hi in bins:
        inside = (lengths >= lo) & (lengths <= hi if hi is not None else True)
        by_length.append({"bucket": label, **_shares(rows[inside])})
    return {"definition": f"dropped: Σ_i α_ij < {DROPPED}; attended again: Σ_i α_ij > {AGAIN} (shares of source "
                          f"words); repetition: share of output 1- to {ORDERS}-grams beyond their reference count",
            "all": _shares(rows), "by_length": by_length}
