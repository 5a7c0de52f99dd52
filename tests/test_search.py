"""Greedy and beam search: restrictions, exactness against brute force, monotonicity in the beam width."""

from __future__ import annotations

import itertools

import pytest
import torch

from rnnsearch.batching import pad
from rnnsearch.search import beam_search, greedy, translate_ids
from rnnsearch.vocab import EOS_ID, UNK_ID

from .test_model import tiny


def inputs(seed=0, lengths=(5, 2, 8)):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(3, 23, (n,), generator=g).tolist() + [EOS_ID] for n in lengths]
    return src, pad(src), torch.tensor([len(s) for s in src])


@torch.no_grad()
def sequence_logprob(model, x, lengths, tokens):
    """log p(tokens | x) for one sentence by teacher forcing (tokens end with </s>)."""
    y_out = torch.tensor([tokens])
    y_in = torch.cat([torch.zeros(1, 1, dtype=torch.long), y_out[:, :-1]], 1)
    logp = torch.log_softmax(model(x, lengths, y_in), -1)
    return float(logp[0].gather(1, y_out[0].unsqueeze(1)).sum())


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec"])
def test_beam_one_equals_greedy(arch):
    model = tiny(arch)
    _, x, lengths = inputs()
    g = greedy(model, x, lengths)
    b = beam_search(model, x, lengths, beam=1, length_norm=False)
    for hg, hb in zip(g, b):
        assert hg.tokens == hb[0].tokens
        assert hg.score == pytest.approx(hb[0].score, abs=1e-5)


def test_scores_are_the_model_probabilities_and_wider_beams_are_never_worse():
    model = tiny("rnnsearch", seed=3)
    _, x, lengths = inputs(1)
    best = {}
    for k in (1, 2, 4, 8):
        best[k] = beam_search(model, x, lengths, beam=k, length_norm=False)
    for i in range(x.size(0)):
        h = best[8][i][0]
        assert h.score == pytest.approx(sequence_logprob(model, x[i : i + 1, : lengths[i]], lengths[i : i + 1], h.tokens), abs=1e-4)
        scores = [best[k][i][0].score for k in (1, 2, 4, 8)]
        assert all(b >= a - 1e-5 for a, b in zip(scores, scores[1:])), scores


def test_a_beam_as_wide_as_the_search_space_finds_the_exact_best_sequence():
    torch.manual_seed(0)
    model = tiny("rnnsearch", seed=5)
    model.output.W_o = torch.nn.Linear(model.output.l, 5)  # a 5-word target vocabulary: <pad> </s> [UNK] w3 w4
    model.E = torch.nn.Embedding(5, model.E.embedding_dim, padding_idx=0)
    _, x, lengths = inputs(2, lengths=(1,))  # max output length 1.0 * 2 + 1 = 3 tokens
    hyps = beam_search(model, x, lengths, beam=27, max_len_a=1.0, max_len_b=1, length_norm=False, n_best=1)
    candidates = [list(p) + [EOS_ID] for n in range(0, 3) for p in itertools.product([2, 3, 4], repeat=n)]
    exact = max(candidates, key=lambda t: sequence_logprob(model, x, lengths, t))
    assert hyps[0][0].tokens == exact


def test_no_unk_and_length_limit_are_respected():
    model = tiny("rnnsearch", seed=7)
    with torch.no_grad():
        model.output.W_o.bias[UNK_ID] = 50.0  # a model that loves [UNK]
        model.output.W_o.bias[EOS_ID] = -50.0  # and never wants to stop
    src, x, lengths = inputs(3)
    for forbid in (False, True):
        for h in greedy(model, x, lengths, max_len_a=1.0, max_len_b=2, forbid_unk=forbid):
            assert (UNK_ID in h.tokens) is not forbid
        for hs, n in zip(beam_search(model, x, lengths, beam=3, max_len_a=1.0, max_len_b=2, forbid_unk=forbid), lengths):
            assert len(hs[0].tokens) <= int(n) + 2 and hs[0].tokens[-1] == EOS_ID
            assert (UNK_ID in hs[0].tokens) is not forbid


def test_results_do_not_depend_on_batch_size_or_order():
    model = tiny("rnnsearch", seed=11)
    src, _, _ = inputs(4, lengths=(3, 9, 1, 6, 4, 7))
    opts = dict(beam=4, max_len_a=1.5, max_len_b=3)
    ref = translate_ids(model, src, batch_size=len(src), **opts)
    for bs in (1, 2, 5):
        other = translate_ids(model, src, batch_size=bs, **opts)
        assert [h.tokens for h in other] == [h.tokens for h in ref]
    rev = translate_ids(model, src[::-1], batch_size=3, **opts)[::-1]
    assert [h.tokens for h in rev] == [h.tokens for h in ref]
    for h, s in zip(ref, src):
        assert h.alpha.shape == (len(h.tokens), len(s))
