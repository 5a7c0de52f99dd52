"""The training's loss (the summed NLL of a minibatch, and See et al.'s coverage loss where asked for) and its
dev-set scores: NLL per sentence and per word, BLEU of greedy or beam decoding."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from rnnsearch.data.batching import Batch, sequential_batches
from rnnsearch.data.vocab import PAD_ID, Vocab
from rnnsearch.decoding.search import translate_ids
from rnnsearch.evaluation.bleu import tokenized_bleu
from rnnsearch.model import triton_kernels
from rnnsearch.training.loss_kernels import summed_nll


def batch_nll(model, batch: Batch) -> torch.Tensor:
    """Summed negative log-likelihood of the batch's target words (</s> included)."""
    return _nll(model(batch.x, batch.lengths, batch.y_in), batch.y_out)  # logits (B, Ty, K)


def _nll(logits: torch.Tensor, y_out: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled() and triton_kernels.usable(logits):  # training on a GPU: two kernels, no copies
        return summed_nll(logits.flatten(0, 1), y_out.flatten(), PAD_ID)
    return F.cross_entropy(logits.flatten(0, 1), y_out.flatten(), ignore_index=PAD_ID, reduction="sum")


def training_loss(model, batch: Batch) -> torch.Tensor:
    """What an update minimises, summed over the batch's sentences: the NLL (`batch_nll`), plus λ times the
    coverage loss (See et al. 2017, eq. 12–13) where the model's `coverage_loss` λ (train.coverage_loss) is set:
        covloss_i = Σ_j min(α_ij, C_{i−1,j}),  C_{i−1,j} = Σ_{k<i} α_kj
    over every target word i (</s> included, padding not). α comes from the decoder's plain recurrence (the
    hand-written ones keep α inside their step), so a model trained with the coverage loss trains through autograd."""
    lam = getattr(getattr(model, "module", model), "coverage_loss", 0.0)  # a DistributedDataParallel's module
    if not lam:
        return batch_nll(model, batch)
    alphas: list[torch.Tensor] = []
    logits = model(batch.x, batch.lengths, batch.y_in, alphas)  # (B, Ty, K); alphas: Ty × (B, Tx)
    return _nll(logits, batch.y_out) + lam * coverage_loss(torch.stack(alphas, 1), batch.y_out)


def coverage_loss(alpha: torch.Tensor, y_out: torch.Tensor) -> torch.Tensor:
    """Σ_i Σ_j min(α_ij, C_{i−1,j}) of alignments α (B, Ty, Tx), over the target words of y_out (B, Ty) (the
    positions that are not padding)."""
    C_prev = alpha.cumsum(1) - alpha  # (B, Ty, Tx): C_{i−1,j} = Σ_{k<i} α_kj
    return (torch.minimum(alpha, C_prev).sum(-1) * (y_out != PAD_ID)).sum()


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


@torch.no_grad()
def validate(model, dev_src: list[list[int]], dev_tgt: list[list[int]], dev_src_lines: list[str],
             dev_ref_lines: list[str], tgt_vocab: Vocab, beam: int, max_len: tuple[float, int], device,
             samples: int = 3) -> dict:
    """Dev NLL per sentence and per word, tokenized dev BLEU of greedy (beam 1) or beam decoding with the output
    limit `max_len` (a, b: a × source length + b), and a few sample translations (source, reference, output) for
    the log."""
    nll = evaluate_nll(model, dev_src, dev_tgt, device)
    model.eval()
    hyps = translate_ids(model, dev_src, beam=beam, batch_size=80, max_len_a=max_len[0], max_len_b=max_len[1],
                         device=device)
    model.train()
    out = [" ".join(tgt_vocab.decode(h.tokens)) for h in hyps]
    picks = [round(k * (len(out) - 1) / max(samples - 1, 1)) for k in range(min(samples, len(out)))]
    return {**nll, "bleu": tokenized_bleu(out, dev_ref_lines).score,
            "samples": [(dev_src_lines[i], dev_ref_lines[i], out[i]) for i in picks]}
