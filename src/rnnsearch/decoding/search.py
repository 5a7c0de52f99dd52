"""Greedy and batched beam search over `model.step` (§3: "we use a beam search to find a translation that
approximately maximises the conditional probability").

Beam search follows GroundHog: every sentence starts with `beam` live hypotheses; a hypothesis that emits
</s> moves to the finished list and the sentence's beam narrows by one, until it is exhausted or the maximum
length is reached. The best finished hypothesis wins, by log-probability or, with `length_norm`, by
log-probability per word. All sentences of a batch and all their hypotheses advance in one tensor operation
per step; only finished hypotheses are copied out in Python, and a sentence whose beam is exhausted leaves
the batch, so the remaining steps compute only the sentences still searched.

GNMT's penalties (Wu et al. 2016, eq. 14) rank the finished hypotheses instead, where either is set:
    s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y),  lp(Y) = ((5 + |Y|) / 6)^α,  cp(X; Y) = β Σ_j log(min(Σ_i α_ij, 1))
(|Y| with </s>, j over the real source words); α = β = 0 is the plain log-probability. They replace
`length_norm`'s division by |Y|, and cp needs an alignment model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from rnnsearch.data.batching import pad
from rnnsearch.data.vocab import EOS_ID, PAD_ID, UNK_ID
from rnnsearch.model.packing import prepacked


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, </s> included when the hypothesis finished
    score: float  # sum of log-probabilities
    alpha: torch.Tensor | None  # (len(tokens), Tx) attention weights over the real source words; None for RNNencdec

    def normalized(self) -> float:
        return self.score / max(len(self.tokens), 1)

    def penalized(self, length_penalty: float, coverage_penalty: float) -> float:
        """GNMT's s(Y, X) (eq. 14) with α = `length_penalty`, β = `coverage_penalty`."""
        lp = ((5 + len(self.tokens)) / 6) ** length_penalty
        cp = coverage_penalty * float(self.alpha.sum(0).clamp(max=1.0).log().sum()) if coverage_penalty else 0.0
        return self.score / lp + cp


def max_lengths(lengths: torch.Tensor, a: float, b: int) -> torch.Tensor:
    """The longest output allowed for each sentence: a × source length + b (</s> included)."""
    return (lengths.float() * a).long() + b


@torch.no_grad()
def greedy(model, x: torch.Tensor, lengths: torch.Tensor, max_len_a: float, max_len_b: int,
           forbid_unk: bool = False, min_len: int = 0) -> list[Hypothesis]:
    memory = model.encode(x, lengths)
    B = x.size(0)
    limits = max_lengths(lengths, max_len_a, max_len_b).to(x.device)
    y = torch.full((B,), PAD_ID, dtype=torch.long, device=x.device)
    s = memory.s0
    out, scores, alphas = [], torch.zeros(B, device=x.device), []
    done = torch.zeros(B, dtype=torch.bool, device=x.device)
    for t in range(int(limits.max())):
        logits, s, alpha = model.step(y, s, memory)
        log_z = torch.logsumexp(logits, -1)  # log p(y) = logit_y − log Σ exp(logits); the argmax needs no more
        best, y = _restrict(logits, forbid_unk, t + 1 >= limits, t + 1 < min_len).max(-1)
        scores += (best - log_z).masked_fill(done, 0.0)
        out.append(y)
        alphas.append(alpha)
        done |= y == EOS_ID
        if bool(done.all()):
            break
    toks = torch.stack(out, 1).tolist()
    A = torch.stack(alphas, 1) if alphas[0] is not None else None  # (B, Ty, Tx)
    hyps = []
    for b, (row, score, Tx) in enumerate(zip(toks, scores.tolist(), lengths.tolist())):
        n = row.index(EOS_ID) + 1 if EOS_ID in row else len(row)
        hyps.append(Hypothesis(row[:n], score, A[b, :n, :Tx] if A is not None else None))
    return hyps


def _restrict(logp: torch.Tensor, forbid_unk: bool, must_end: torch.Tensor, too_short: bool = False) -> torch.Tensor:
    """Never emit <pad>; no [UNK] in the paper's No-UNK setting; no </s> before `min_len` words (`too_short`);
    only </s> once a row reaches its limit. In place, on log-probabilities or logits."""
    logp[:, PAD_ID] = float("-inf")
    if forbid_unk:
        logp[:, UNK_ID] = float("-inf")
    if too_short:
        logp[:, EOS_ID] = float("-inf")
    if bool(must_end.any()):
        eos = logp[:, EOS_ID].clone()
        logp[must_end] = float("-inf")
        logp[:, EOS_ID] = eos
    return logp


@torch.no_grad()
def beam_search(model, x: torch.Tensor, lengths: torch.Tensor, beam: int, max_len_a: float,
                max_len_b: int, forbid_unk: bool = False, length_norm: bool = True,
                n_best: int = 1, min_len: int = 0, length_penalty: float = 0.0,
                coverage_penalty: float = 0.0) -> list[list[Hypothesis]]:
    """Returns, per sentence, its `n_best` finished hypotheses, best first. No hypothesis ends before `min_len`
    words (</s> included); with max_len_a = 0 and max_len_b = min_len every output has exactly that length (the
    fixed-length decoding of the speed benchmark). `length_penalty`, `coverage_penalty`: GNMT's α and β."""
    key = ranking(model, length_norm, length_penalty, coverage_penalty)
    B, K, dev = x.size(0), beam, x.device
    memory = model.encode(x, lengths).index_select(torch.arange(B, device=dev).repeat_interleave(K))
    limits = max_lengths(lengths, max_len_a, max_len_b).to(dev).repeat_interleave(K)  # (B*K,)
    s = memory.s0  # (B*K, n)
    y = torch.full((B * K,), PAD_ID, dtype=torch.long, device=dev)
    scores = torch.full((B, K), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # one live hypothesis per sentence at the start
    history = torch.empty((B * K, 0), dtype=torch.long, device=dev)
    alpha_hist = None
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    n_finished = torch.zeros(B, dtype=torch.long, device=dev)
    slot = torch.arange(K, device=dev).unsqueeze(0)  # (1, K)
    src_len = lengths.tolist()
    active = list(range(B))  # the A sentences still searched, in row order (finished ones leave the batch)
    for t in range(int(limits.max())):
        logits, s, alpha = model.step(y, s, memory)
        logp = _restrict(F.log_softmax(logits, -1), forbid_unk, t + 1 >= limits, t + 1 < min_len)  # (A*K, V)
        # the K best continuations of a sentence are among the K best words of each of its hypotheses: take
        # those first (K of V per row), then the best K of the K·K candidates
        k1 = min(K, logp.size(1))
        row_lp, row_word = logp.topk(k1, dim=1)  # (A*K, k1)
        cand = (scores.view(-1, 1) + row_lp).view(len(active), K * k1)
        top, idx = cand.topk(K, dim=1)  # (A, K), sorted best first
        live = (slot < (K - n_finished).unsqueeze(1)) & torch.isfinite(top)  # the beam narrows as hyps finish
        origin = (idx // k1 + torch.arange(len(active), device=dev).unsqueeze(1) * K).view(-1)  # parent rows
        word = row_word.view(len(active), K * k1).gather(1, idx)  # (A, K)
        history = torch.cat([history[origin], word.view(-1, 1)], dim=1)
        if alpha is not None:
            step_alpha = alpha[origin].unsqueeze(1)  # (A*K, 1, Tx)
            alpha_hist = step_alpha if alpha_hist is None else torch.cat([alpha_hist[origin], step_alpha], 1)
        s = s[origin]
        ended = live & (word == EOS_ID)
        if bool(ended.any()):
            _collect(ended, top, history, alpha_hist, [finished[b] for b in active], [src_len[b] for b in active])
        n_finished += ended.sum(1)
        scores = top.masked_fill(~live | ended, float("-inf"))
        y = word.view(-1)
        searching = torch.isfinite(scores).any(1)  # (A,): a sentence with no live hypothesis is done
        if not bool(searching.all()):
            if not bool(searching.any()):
                break
            keep = searching.nonzero().squeeze(1)  # its K rows leave every per-row tensor
            rows = (keep.unsqueeze(1) * K + slot).view(-1)
            memory, s, y, history, limits = memory.index_select(rows), s[rows], y[rows], history[rows], limits[rows]
            alpha_hist = alpha_hist[rows] if alpha_hist is not None else None
            scores, n_finished = scores[keep], n_finished[keep]
            active = [active[i] for i in keep.tolist()]
    return [sorted(f, key=key, reverse=True)[:n_best] for f in finished]


def ranking(model, length_norm: bool, length_penalty: float, coverage_penalty: float):
    """How finished hypotheses are ranked: by log-probability (per word with `length_norm`), or by GNMT's s(Y, X)
    where a penalty is set; a combination that cannot take effect is a ValueError."""
    if not (length_penalty or coverage_penalty):
        return Hypothesis.normalized if length_norm else (lambda h: h.score)
    if length_norm:
        raise ValueError("GNMT's penalties replace length_norm's division by the length: set length_norm false")
    if coverage_penalty and model.attention is None:
        raise ValueError("the coverage penalty sums a model's attention, and this model has none")
    return lambda h: h.penalized(length_penalty, coverage_penalty)


def _collect(ended: torch.Tensor, top: torch.Tensor, history: torch.Tensor, alpha_hist: torch.Tensor | None,
             finished: list[list[Hypothesis]], src_len: list[int]) -> None:
    """The hypotheses that ended with </s> at this step (ended (A, K)), appended to their sentence's `finished`
    list: copied out with one indexing per tensor, then split per hypothesis."""
    K = ended.size(1)
    where = ended.nonzero()  # (E, 2): sentence, slot
    rows = where[:, 0] * K + where[:, 1]
    tokens, ended_scores = history[rows].tolist(), top[ended].tolist()
    ended_alpha = alpha_hist[rows].cpu() if alpha_hist is not None else None  # (E, Ty, Tx)
    for j, (b, _) in enumerate(where.tolist()):
        alpha_b = ended_alpha[j, :, : src_len[b]] if ended_alpha is not None else None  # (Ty, Tx_b)
        finished[b].append(Hypothesis(tokens[j], ended_scores[j], alpha_b))


def translate_ids(model, src_ids: list[list[int]], beam: int, batch_size: int, max_len_a: float, max_len_b: int,
                  forbid_unk: bool = False, length_norm: bool = True, device="cpu", progress=None,
                  min_len: int = 0, **penalties: float) -> list[Hypothesis]:
    """Best hypothesis for each source sentence (id lists ending in </s>), in input order."""
    return [h[0] for h in translate_nbest(model, src_ids, beam, batch_size, max_len_a, max_len_b, forbid_unk,
                                          length_norm, device, progress, min_len=min_len, **penalties)]


def translate_nbest(model, src_ids: list[list[int]], beam: int, batch_size: int, max_len_a: float, max_len_b: int,
                    forbid_unk: bool = False, length_norm: bool = True, device="cpu", progress=None,
                    n_best: int = 1, min_len: int = 0, length_penalty: float = 0.0,
                    coverage_penalty: float = 0.0) -> list[list[Hypothesis]]:
    """The `n_best` (≤ beam) best finished hypotheses of each source sentence, best first, in input order.

    Sentences are decoded in length-sorted batches; the result does not depend on the batch composition
    beyond floating-point summation order. The decoder's weights are packed once per call (`prepacked`).
    """
    if n_best > beam:
        raise ValueError(f"n-best {n_best} needs a beam at least as wide (beam {beam})")
    if beam == 1 and (length_penalty or coverage_penalty):
        raise ValueError("GNMT's penalties rank a beam's finished translations: with beam 1 there is one")
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    result: list[list[Hypothesis]] = [[] for _ in src_ids]
    with torch.no_grad(), prepacked(model.decoder, min(batch_size, len(src_ids)) * beam):  # rows of a step
        for k in range(0, len(order), batch_size):
            idx = order[k : k + batch_size]
            x = pad([src_ids[i] for i in idx]).to(device)
            lengths = torch.tensor([len(src_ids[i]) for i in idx])
            if beam == 1:
                found = [[h] for h in greedy(model, x, lengths, max_len_a, max_len_b, forbid_unk, min_len)]
            else:
                found = beam_search(model, x, lengths, beam, max_len_a, max_len_b, forbid_unk, length_norm,
                                    n_best, min_len, length_penalty, coverage_penalty)
            for i, hyps in zip(idx, found):
                result[i] = hyps
            if progress is not None:
                progress.update(len(idx))
    return result
