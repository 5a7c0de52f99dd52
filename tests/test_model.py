"""App. A on tiny sizes, for the paper's models and every ablation switch: attention, batching invariance, the
fixed context of RNNencdec, step == teacher forcing, App. B.1, parameter counts, finite-difference gradients,
and learning (a few steps of every preset; a tiny model overfitting 20 pairs)."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from rnnsearch.data.batching import make_batch
from rnnsearch.data.vocab import EOS_ID
from rnnsearch.decoding.search import beam_search, greedy
from rnnsearch.model import PAD, PRESETS, Seq2Seq, build_model, resolve
from rnnsearch.training.train import batch_nll

SIZES = {"m": 8, "n": 10, "n_align": 7, "l": 6}
# the presets, and each switch flipped away from its preset
VARIANTS = {
    "rnnsearch": ("rnnsearch", {}),
    "rnnencdec": ("rnnencdec", {}),
    "luong": ("luong", {}),
    "rnnsearch+lstm": ("rnnsearch", {"cell": "lstm"}),
    "rnnsearch+multiplicative": ("rnnsearch", {"attention": "multiplicative"}),
    "rnnsearch+none": ("rnnsearch", {"attention": "none"}),
    "rnnencdec+dot": ("rnnencdec", {"attention": "dot"}),
    "rnnencdec+additive": ("rnnencdec", {"attention": "additive"}),
    "rnnsearch+combined": ("rnnsearch", {"combined_output": True, "dropout": 0.2}),
    "luong+gru-no-feeding": ("luong", {"cell": "gru", "input_feeding": False}),
    "luong+additive+none-dropout": ("luong", {"attention": "additive", "dropout": 0.0}),
    "luong+none": ("luong", {"attention": "none"}),
    # the alignment models with memory (their state carried in the decoder's)
    "rnnsearch+location": ("rnnsearch", {"attention": "location", "location_filters": 3, "location_width": 3}),
    "rnnsearch+linguistic": ("rnnsearch", {"coverage": "linguistic"}),
    "rnnsearch+fertility": ("rnnsearch", {"coverage": "fertility"}),
    "rnnsearch+neural": ("rnnsearch", {"coverage": "neural", "coverage_size": 4}),
    "luong+additive+neural": ("luong", {"attention": "additive", "coverage": "neural", "dropout": 0.0}),
}
ATTENTIVE = [v for v, (arch, o) in VARIANTS.items() if resolve(arch, SIZES, o)["attention"] != "none"]


def tiny(variant: str = "rnnsearch", seed: int = 0, perturb: float = 0.3) -> Seq2Seq:
    arch, overrides = VARIANTS[variant]
    torch.manual_seed(seed)
    model = build_model({"arch": arch, **SIZES, **overrides}, 23, 19)
    with torch.no_grad():  # App. B.1 starts v_a at 0 (uniform attention); perturb so the tests see real weights
        for p in model.parameters():
            p.add_(perturb * torch.randn_like(p))
    return model.eval()


def sentences(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(3, 23, (n,), generator=g).tolist() + [EOS_ID] for n in (5, 1, 9, 3)]
    tgt = [torch.randint(3, 19, (n,), generator=g).tolist() + [EOS_ID] for n in (4, 7, 2, 6)]
    return src, tgt


@pytest.mark.parametrize("variant", ATTENTIVE)
def test_attention_is_a_distribution_over_real_words_only(variant):
    model = tiny(variant)
    src, tgt = sentences()
    batch = make_batch(src, tgt, list(range(4)))
    memory = model.encode(batch.x, batch.lengths)
    state = memory.s0
    y = torch.full((4,), PAD)
    for _ in range(3):
        logits, state, alpha = model.step(y, state, memory)
        torch.testing.assert_close(alpha.sum(1), torch.ones(4))
        assert bool((alpha[~memory.mask] == 0).all())  # exactly zero on padding
        assert bool((alpha[memory.mask] > 0).all())
        y = logits.argmax(-1)


@pytest.mark.parametrize("variant", VARIANTS)
def test_padded_batch_equals_each_sentence_alone(variant):
    model = tiny(variant)
    src, tgt = sentences()
    batch = make_batch(src, tgt, list(range(4)))
    logp = torch.log_softmax(model(batch.x, batch.lengths, batch.y_in), -1)
    for i in range(4):
        one = make_batch([src[i]], [tgt[i]], [i])
        alone = torch.log_softmax(model(one.x, one.lengths, one.y_in), -1)[0]
        torch.testing.assert_close(logp[i, : len(tgt[i])], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_step_by_step_decoding_equals_teacher_forcing(variant):
    model = tiny(variant)
    src, tgt = sentences(1)
    batch = make_batch(src, tgt, list(range(4)))
    full = model(batch.x, batch.lengths, batch.y_in)  # (B, Ty, K)
    memory = model.encode(batch.x, batch.lengths)
    state = memory.s0
    for i in range(batch.y_in.size(1)):
        logits, state, _ = model.step(batch.y_in[:, i], state, memory)
        torch.testing.assert_close(logits, full[:, i], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_context_is_fixed_exactly_when_there_is_no_attention(variant):
    model = tiny(variant)
    batch = make_batch(*sentences(), list(range(4)))
    memory = model.encode(batch.x, batch.lengths)
    state, contexts = memory.s0, []
    for i in range(3):
        _, state, _ = model.step(batch.y_in[:, i], state, memory)
        contexts.append(model.decoder.context(state, memory)[0])
    fixed = all(torch.equal(contexts[0], c) for c in contexts[1:])
    assert fixed is (model.attention is None)


@torch.no_grad()
def test_initialisation_follows_appendix_b1():
    torch.manual_seed(0)
    model = build_model({"arch": "rnnsearch", "m": 12, "n": 16, "n_align": 14, "l": 8}, 50, 40)
    gru, attention = model.decoder.cell, model.attention
    assert float(attention.v_a.weight.abs().max()) == 0.0
    assert all(float(p.abs().max()) == 0.0 for name, p in model.named_parameters() if "bias" in name)
    recurrent = (gru.U.weight, *gru.U_zr.weight.chunk(2, 0), *model.encoder.rnn.weight_hh_l0.chunk(3, 0),
                 *model.encoder.rnn.weight_hh_l0_reverse.chunk(3, 0))
    for U in recurrent:
        torch.testing.assert_close(U @ U.T, torch.eye(16), atol=1e-5, rtol=0)
    for W in (attention.W_a.weight, attention.U_a.weight):
        assert 0.0005 < float(W.std()) < 0.002  # N(0, 0.001²)
    assert 0.005 < float(gru.W.weight.std()) < 0.02  # N(0, 0.01²)
    assert float(model.E.weight[PAD].abs().max()) == 0.0  # E y_0 = 0


# App. A sizes (m=620, n=n'=1000, l=500, K=30000+3 per side); nn.GRU has two bias vectors per gate.
PAPER = {"m": 620, "n": 1000, "n_align": 1000, "l": 500}


def test_rnnsearch_parameter_count_matches_the_closed_form_at_paper_size():
    m, n, na, l, Kx, Ky = 620, 1000, 1000, 500, 30003, 30003
    encoder = Kx * m + 2 * (3 * n * m + 3 * n * n + 6 * n)  # E, forward and backward GRUs
    attention = n * na + 2 * n * na + na  # W_a, U_a, v_a
    init = n * n + n  # W_s
    decoder = Ky * m + (3 * n * m + 3 * n) + 2 * n * n + n * n + 3 * n * 2 * n  # E, W, U_zr, U, C
    output = (n * 2 * l + 2 * l) + m * 2 * l + 2 * n * 2 * l + (l * Ky + Ky)  # U_o, V_o, C_o, W_o
    model = build_model({"arch": "rnnsearch", **PAPER}, Kx, Ky)
    assert model.num_parameters() == encoder + attention + init + decoder + output == 80_453_223


def test_rnnencdec_parameter_count_matches_the_closed_form_at_paper_size():
    m, n, l, Kx, Ky = 620, 1000, 500, 30003, 30003
    encoder = Kx * m + (3 * n * m + 3 * n * n + 6 * n)
    context = n * n + n  # V
    init = n * n + n  # W_s
    decoder = Ky * m + (3 * n * m + 3 * n) + 3 * n * n + 3 * n * n  # E, W, U_zr + U, C (c has n units)
    output = (n * 2 * l + 2 * l) + m * 2 * l + n * 2 * l + (l * Ky + Ky)
    model = build_model({"arch": "rnnencdec", **PAPER}, Kx, Ky)
    assert model.num_parameters() == encoder + context + init + decoder + output


@pytest.mark.parametrize("variant, weights", [
    ("rnnsearch", ["U_a", "W_a", "v_a"]),
    ("rnnsearch+location", ["F", "U_a", "U_f", "W_a", "v_a"]),
    ("rnnsearch+linguistic", ["U_a", "V_a", "W_a", "v_a"]),
    ("rnnsearch+fertility", ["U_a", "U_f", "V_a", "W_a", "v_a"]),
    ("rnnsearch+neural", ["U", "U_a", "U_zr", "V_a", "W_a", "W_h", "W_s", "v_a", "w_alpha"])])
def test_alignment_model_gradients_match_finite_differences(variant, weights):
    """d NLL / d(every weight of the alignment model) through the whole decoder, against central differences
    (float64): the paper's, and those with memory, whose state feeds the next step's energies."""
    model = tiny(variant, perturb=0.5).double()
    batch = make_batch(*sentences(2), list(range(4)))
    names = [n for n, _ in model.named_parameters() if ".attention." in n]
    assert sorted({n.split(".attention.")[1].split(".")[0] for n in names}) == weights

    def nll(*params):
        logits = functional_call(model, dict(zip(names, params)), (batch.x, batch.lengths, batch.y_in))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.y_out.flatten(), ignore_index=PAD,
                                                 reduction="sum")

    params = tuple(dict(model.named_parameters())[n].detach().clone().requires_grad_() for n in names)
    # the paper's every partial derivative; the others' (hundreds of weights more) along random directions
    assert torch.autograd.gradcheck(nll, params, eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=variant != "rnnsearch")


@pytest.mark.parametrize("arch", list(PRESETS))
def test_every_preset_builds_trains_and_decodes(arch):
    torch.manual_seed(0)
    model = build_model({"arch": arch, **SIZES}, 23, 19)
    batch = make_batch(*sentences(3), list(range(4)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(5):
        loss = batch_nll(model.train(), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    model.eval()
    hyps = beam_search(model, batch.x, batch.lengths, 3, 1.5, 10)
    assert [len(h) for h in hyps] == [1] * 4 and all(h[0].tokens for h in hyps)
    assert all(len(h.tokens) >= 1 for h in greedy(model, batch.x, batch.lengths, 1.5, 10))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec", "luong"])
def test_a_tiny_model_overfits_twenty_pairs(arch):
    g = torch.Generator().manual_seed(4)
    src = [torch.randint(3, 40, (int(n),), generator=g).tolist() + [EOS_ID] for n in torch.randint(2, 9, (20,), generator=g)]
    tgt = [torch.randint(3, 40, (int(n),), generator=g).tolist() + [EOS_ID] for n in torch.randint(2, 9, (20,), generator=g)]
    batch = make_batch(src, tgt, list(range(20)))
    torch.manual_seed(0)
    model = build_model({"arch": arch, "m": 24, "n": 48, "n_align": 32, "l": 32, "dropout": 0.0}, 40, 40).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)  # at 0.01, luong kept one of 20 wrong with 1 thread
    for _ in range(300):
        loss = batch_nll(model, batch) / batch.target_words
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    assert loss.item() < 0.05, f"per-word NLL after 300 updates: {loss.item():.3f}"
    hyps = greedy(model.eval(), batch.x, batch.lengths, 1.5, 10)
    assert [h.tokens for h in hyps] == tgt  # it reproduces every training target


def test_impossible_switch_combinations_are_refused_by_name():
    with pytest.raises(ValueError, match="attention 'dot'.*bidirectional: false"):
        resolve("rnnsearch", SIZES, {"attention": "dot"})
    with pytest.raises(ValueError, match="input_feeding.*combined_output: true"):
        resolve("rnnsearch", SIZES, {"input_feeding": True})
    with pytest.raises(ValueError, match="coverage 'neural' extends the additive .* not 'multiplicative'"):
        resolve("rnnsearch", SIZES, {"attention": "multiplicative", "coverage": "neural"})
    with pytest.raises(ValueError, match="location_width sizes attention 'location', not attention 'additive'"):
        resolve("rnnsearch", SIZES, {"location_width": 7})
    with pytest.raises(ValueError, match="coverage_size sizes coverage 'neural', not coverage 'fertility'"):
        resolve("rnnsearch", SIZES, {"coverage": "fertility", "coverage_size": 3})
    with pytest.raises(ValueError, match="location_width 4: .* odd"):
        resolve("rnnsearch", SIZES, {"attention": "location", "location_width": 4})
    with pytest.raises(ValueError, match="unknown arch 'transformer'"):
        resolve("transformer", SIZES)
