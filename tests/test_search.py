"""Greedy and beam search: restrictions, exactness against brute force, monotonicity in the beam width."""

from __future__ import annotations

import itertools

import pytest
import torch

from rnnsearch.data.batching import pad
from rnnsearch.data.vocab import EOS_ID, UNK_ID
from rnnsearch.decoding.search import beam_search, greedy, translate_ids
from rnnsearch.model import packing

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


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec", "luong"])
def test_beam_one_equals_greedy(arch):
    model = tiny(arch)
    _, x, lengths = inputs()
    g = greedy(model, x, lengths, 1.5, 10)
    b = beam_search(model, x, lengths, 1, 1.5, 10, length_norm=False)
    for hg, hb in zip(g, b):
        assert hg.tokens == hb[0].tokens
        assert hg.score == pytest.approx(hb[0].score, abs=1e-5)


@torch.no_grad()
def reference_beam(model, x, length, K, limit):
    """GroundHog's beam search written plainly, one hypothesis at a time, re-reading the whole prefix each step:
    keep the K − (finished) best expansions; a hypothesis ending in </s> is finished; stop when none is live."""
    live, finished = [((), 0.0)], []
    for t in range(limit):
        expansions = []
        for tokens, score in live:
            y_in = torch.tensor([[0, *tokens]])
            logp = torch.log_softmax(model(x, length, y_in), -1)[0, -1]
            for w in [EOS_ID] if t + 1 >= limit else range(1, logp.size(0)):  # never <pad>; only </s> at the limit
                expansions.append((tokens + (w,), score + float(logp[w])))
        expansions.sort(key=lambda e: -e[1])
        live = []
        for e in expansions[: K - len(finished)]:
            (finished if e[0][-1] == EOS_ID else live).append(e)
        if not live:
            break
    return max(finished, key=lambda e: e[1])


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec", "luong", "rnnsearch+neural", "luong+additive+neural"])
def test_batched_beam_search_equals_the_plain_reference(arch):
    """Scores are the model's log-probabilities and the batched search finds exactly what the plain one does.
    With an alignment model with memory (location-aware, coverage), this holds only if the search reorders the
    alignment model's state with the decoder's by beam index, and drops it with a finished sentence's rows.

    A wider beam is not guaranteed to find a better-scoring translation (beam search is not monotone in its
    width: with tiny("rnnsearch", seed=3), sentence 2 scores −14.39 at beam 3 and −19.12 at beam 4, in both
    implementations), so this compares each width with the reference instead of widths with each other.
    """
    model = tiny(arch, seed=3)
    _, x, lengths = inputs(1)
    for k in (1, 2, 3, 4, 8):
        found = beam_search(model, x, lengths, k, 1.5, 10, length_norm=False, n_best=k)
        for i in range(x.size(0)):
            h = found[i][0]
            xi, li = x[i : i + 1, : lengths[i]], lengths[i : i + 1]
            tokens, score = reference_beam(model, xi, li, k, int(int(li[0]) * 1.5) + 10)
            assert h.tokens == list(tokens) and h.score == pytest.approx(score, abs=1e-4), (k, i)
            for other in found[i]:  # every finished hypothesis, whichever rows its prefix moved through
                assert other.score == pytest.approx(sequence_logprob(model, xi, li, other.tokens), abs=1e-4), (k, i)


def test_a_beam_as_wide_as_the_search_space_finds_the_exact_best_sequence():
    torch.manual_seed(0)
    model = tiny("rnnsearch", seed=5)
    model.decoder.output.W_o = torch.nn.Linear(model.decoder.output.l, 5)  # a 5-word target vocabulary: <pad> </s> [UNK] w3 w4
    model.E = torch.nn.Embedding(5, model.E.embedding_dim, padding_idx=0)
    _, x, lengths = inputs(2, lengths=(1,))  # max output length 1.0 * 2 + 1 = 3 tokens
    hyps = beam_search(model, x, lengths, beam=27, max_len_a=1.0, max_len_b=1, length_norm=False, n_best=1)
    candidates = [list(p) + [EOS_ID] for n in range(0, 3) for p in itertools.product([2, 3, 4], repeat=n)]
    exact = max(candidates, key=lambda t: sequence_logprob(model, x, lengths, t))
    assert hyps[0][0].tokens == exact


def test_no_unk_and_length_limit_are_respected():
    model = tiny("rnnsearch", seed=7)
    with torch.no_grad():
        model.decoder.output.W_o.bias[UNK_ID] = 50.0  # a model that loves [UNK]
        model.decoder.output.W_o.bias[EOS_ID] = -50.0  # and never wants to stop
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


@pytest.mark.skipif(not packing.MKL_PACKING, reason="this PyTorch build has no MKL packed GEMM")
@pytest.mark.parametrize("arch", ["rnnsearch", "luong"])
@pytest.mark.parametrize("beam", [1, 3])
def test_prepacked_decoder_weights_give_the_same_translations(arch, beam, monkeypatch):
    model = tiny(arch, seed=5)
    src, _, _ = inputs(2, lengths=(5, 2, 8, 3))
    packed_layers = []
    real = packing._packed_forward

    def spy(layer, rows):
        packed_layers.append(layer)
        return real(layer, rows)

    monkeypatch.setattr(packing, "_packed_forward", spy)
    packed = translate_ids(model, src, beam, batch_size=2, max_len_a=1.5, max_len_b=5)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.decoder.modules())
    assert len(packed_layers) == n_linear  # every decoder layer, once per call
    assert not any("forward" in vars(m) for m in model.modules())  # the plain layers are back
    monkeypatch.setattr(packing, "MKL_PACKING", False)
    plain = translate_ids(model, src, beam, batch_size=2, max_len_a=1.5, max_len_b=5)
    assert [h.tokens for h in packed] == [h.tokens for h in plain]
    for hp, hq in zip(packed, plain):
        assert hp.score == pytest.approx(hq.score, abs=1e-6)
        assert torch.allclose(hp.alpha, hq.alpha, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec", "luong"])
@pytest.mark.parametrize("beam", [1, 5])
def test_search_on_cuda_gives_the_cpus_translations(arch, beam, float32_products):
    """The same model on the GPU: the same words, scores and attention as on the CPU, to float32 rounding (its
    products sum in another order; a tie between two hypotheses within that rounding would be the only excuse)."""
    src, _, _ = inputs(6, lengths=(3, 9, 1, 6, 4, 7, 12))
    opts = dict(beam=beam, batch_size=4, max_len_a=1.5, max_len_b=3)
    cpu = translate_ids(tiny(arch, seed=7), src, **opts)
    gpu = translate_ids(tiny(arch, seed=7).cuda(), src, device="cuda", **opts)
    assert [h.tokens for h in gpu] == [h.tokens for h in cpu]
    for g, c in zip(gpu, cpu):
        assert g.score == pytest.approx(c.score, abs=1e-4)
        if c.alpha is not None:
            assert torch.allclose(torch.as_tensor(g.alpha).cpu(), torch.as_tensor(c.alpha), atol=1e-4)


@torch.no_grad()
def forced(model, x, lengths, tokens):
    """log p(tokens | x) and the attention (len(tokens), Tx) of one sentence, step by step by teacher forcing."""
    memory = model.encode(x, lengths)
    state, y, logp, alphas = memory.s0, torch.zeros(1, dtype=torch.long), 0.0, []
    for w in tokens:
        logits, state, alpha = model.step(y, state, memory)
        logp += float(torch.log_softmax(logits, -1)[0, w])
        alphas.append(alpha[0])
        y = torch.tensor([w])
    return logp, torch.stack(alphas)


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnsearch+neural"])
def test_gnmt_penalties_rank_as_rescoring_every_finished_hypothesis_by_the_formula(arch):
    """GNMT's eq. 14, s(Y, X) = log P(Y|X) / ((5 + |Y|) / 6)^α + β Σ_j log(min(Σ_i α_ij, 1)), computed here from
    teacher forcing for every finished hypothesis of a beam, orders them as beam search with the penalties does;
    the penalties change the order somewhere (a model whose </s> is likely gives hypotheses of several lengths)."""
    model = tiny(arch, seed=3)
    with torch.no_grad():
        model.decoder.output.W_o.bias[EOS_ID] += 1.5
    _, x, lengths = inputs(1)
    K, changed = 6, 0
    plain = beam_search(model, x, lengths, K, 1.5, 10, length_norm=False, n_best=K)
    for a, b in ((0.6, 0.0), (0.0, 0.4), (1.0, 1.0)):
        ranked = beam_search(model, x, lengths, K, 1.5, 10, length_norm=False, n_best=K, length_penalty=a,
                             coverage_penalty=b)
        for i in range(x.size(0)):
            xi, li = x[i : i + 1, : lengths[i]], lengths[i : i + 1]

            def formula(tokens):
                logp, alpha = forced(model, xi, li, tokens)
                return logp / ((5 + len(tokens)) / 6) ** a + b * float(torch.log(alpha.sum(0).clamp(max=1)).sum())

            expected = sorted(plain[i], key=lambda h: formula(h.tokens), reverse=True)
            assert [h.tokens for h in ranked[i]] == [h.tokens for h in expected], (a, b, i)
            changed += [h.tokens for h in ranked[i]] != [h.tokens for h in plain[i]]
    assert changed, "the penalties reordered nothing: the test would not see them"


def test_penalties_that_cannot_take_effect_are_refused():
    _, x, lengths = inputs(1)
    with pytest.raises(ValueError, match="replace length_norm"):
        beam_search(tiny("rnnsearch"), x, lengths, 3, 1.5, 10, length_norm=True, length_penalty=0.6)
    with pytest.raises(ValueError, match="this model has none"):
        beam_search(tiny("rnnencdec"), x, lengths, 3, 1.5, 10, length_norm=False, coverage_penalty=0.2)
    with pytest.raises(ValueError, match="with beam 1 there is one"):
        translate_ids(tiny("rnnsearch"), [[4, 5, 1]], 1, 1, 1.5, 10, length_norm=False, length_penalty=0.6)
