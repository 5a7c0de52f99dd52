"""App. A on tiny sizes: attention, batching invariance, the fixed context of RNNencdec, step == forward, App. B.1."""

from __future__ import annotations

import pytest
import torch

from rnnsearch.batching import make_batch
from rnnsearch.model import PAD, Seq2Seq
from rnnsearch.train import batch_nll
from rnnsearch.vocab import EOS_ID


def tiny(arch: str, seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    model = Seq2Seq(arch, src_vocab=23, tgt_vocab=19, m=8, n=10, n_align=7, l=6)
    with torch.no_grad():  # App. B.1 starts v_a at 0 (uniform attention); perturb so the tests see real weights
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def sentences(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(3, 23, (n,), generator=g).tolist() + [EOS_ID] for n in (5, 1, 9, 3)]
    tgt = [torch.randint(3, 19, (n,), generator=g).tolist() + [EOS_ID] for n in (4, 7, 2, 6)]
    return src, tgt


def test_attention_is_a_distribution_over_real_words_only():
    model = tiny("rnnsearch")
    src, tgt = sentences()
    batch = make_batch(src, tgt, list(range(4)))
    memory = model.encode(batch.x, batch.lengths)
    s = memory.s0
    y = torch.full((4,), PAD)
    for _ in range(3):
        logits, s, alpha = model.step(y, s, memory)
        torch.testing.assert_close(alpha.sum(1), torch.ones(4))
        assert bool((alpha[~memory.mask] == 0).all())  # exactly zero on padding
        assert bool((alpha[memory.mask] > 0).all())
        y = logits.argmax(-1)


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec"])
def test_padded_batch_equals_each_sentence_alone(arch):
    model = tiny(arch)
    src, tgt = sentences()
    batch = make_batch(src, tgt, list(range(4)))
    logp = torch.log_softmax(model(batch.x, batch.lengths, batch.y_in), -1)
    for i in range(4):
        one = make_batch([src[i]], [tgt[i]], [i])
        alone = torch.log_softmax(model(one.x, one.lengths, one.y_in), -1)[0]
        torch.testing.assert_close(logp[i, : len(tgt[i])], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec"])
def test_step_by_step_decoding_equals_teacher_forcing(arch):
    model = tiny(arch)
    src, tgt = sentences(1)
    batch = make_batch(src, tgt, list(range(4)))
    full = model(batch.x, batch.lengths, batch.y_in)  # (B, Ty, K)
    memory = model.encode(batch.x, batch.lengths)
    s = memory.s0
    for i in range(batch.y_in.size(1)):
        logits, s, _ = model.step(batch.y_in[:, i], s, memory)
        torch.testing.assert_close(logits, full[:, i], atol=1e-5, rtol=1e-5)


def test_rnnencdec_context_is_fixed_and_rnnsearch_context_moves():
    src, tgt = sentences()
    batch = make_batch(src, tgt, list(range(4)))
    for arch, fixed in (("rnnencdec", True), ("rnnsearch", False)):
        model = tiny(arch)
        memory = model.encode(batch.x, batch.lengths)
        s, contexts = memory.s0, []
        for i in range(3):
            c, _ = model.context(s, memory)
            contexts.append(c)
            _, s, _ = model.step(batch.y_in[:, i], s, memory)
        same = all(torch.equal(contexts[0], c) for c in contexts[1:])
        assert same is fixed


@torch.no_grad()
def test_initialisation_follows_appendix_b1():
    torch.manual_seed(0)
    model = Seq2Seq("rnnsearch", 50, 40, m=12, n=16, n_align=14, l=8)
    assert float(model.attention.v_a.weight.abs().max()) == 0.0
    assert all(float(p.abs().max()) == 0.0 for name, p in model.named_parameters() if "bias" in name)
    for U in (model.gru.U.weight, *model.gru.U_zr.weight.chunk(2, 0), *model.encoder.rnn.weight_hh_l0.chunk(3, 0)):
        torch.testing.assert_close(U @ U.T, torch.eye(16), atol=1e-5, rtol=0)
    assert 0.0005 < float(model.attention.W_a.weight.std()) < 0.002  # N(0, 0.001²)
    assert 0.005 < float(model.gru.W.weight.std()) < 0.02  # N(0, 0.01²)
    assert float(model.E.weight[PAD].abs().max()) == 0.0  # E y_0 = 0


def test_parameter_count_matches_the_closed_form_at_paper_size():
    """App. A sizes (m=620, n=n'=1000, l=500, K=30000+3 per side); nn.GRU has two bias vectors per gate."""
    m, n, na, l, Kx, Ky = 620, 1000, 1000, 500, 30003, 30003
    encoder = Kx * m + 2 * (3 * n * m + 3 * n * n + 6 * n)
    attention = n * na + 2 * n * na + na
    init = n * n + n  # W_s
    decoder = Ky * m + (3 * n * m + 3 * n) + 2 * n * n + n * n + 3 * n * 2 * n
    output = (n * 2 * l + 2 * l) + m * 2 * l + 2 * n * 2 * l + (l * Ky + Ky)
    model = Seq2Seq("rnnsearch", Kx, Ky, m, n, na, l)
    assert model.num_parameters() == encoder + attention + init + decoder + output


def test_nll_gradient_reaches_the_alignment_model():
    model = tiny("rnnsearch").train()
    src, tgt = sentences()
    batch_nll(model, make_batch(src, tgt, list(range(4)))).backward()
    for p in (model.attention.W_a.weight, model.attention.U_a.weight, model.attention.v_a.weight):
        assert p.grad is not None and float(p.grad.abs().sum()) > 0
