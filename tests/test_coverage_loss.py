"""See et al. (2017)'s coverage loss (train.coverage_loss, rnnsearch.training.scoring): the sum it defines, the
α it reads (the decoder's teacher-forced alignments, the same as step-by-step decoding's), its gradient against
finite differences, and an update that minimises it; λ = 0 is the paper's loss, bit for bit."""

from __future__ import annotations

import pytest
import torch

from rnnsearch.training.graphs import update
from rnnsearch.training.optimizers import make_optimizer
from rnnsearch.training.scoring import batch_nll, coverage_loss, training_loss

from .test_fused import model_and_batch

pytestmark = pytest.mark.usefixtures("float32_products")


def test_the_coverage_loss_sums_the_overlap_of_each_alignment_with_the_coverage_before_it():
    """Σ_i Σ_j min(α_ij, Σ_{k<i} α_kj), written as the paper's double loop, over real target words only."""
    g = torch.Generator().manual_seed(0)
    alpha = torch.softmax(torch.randn(3, 6, 5, generator=g, dtype=torch.float64), -1)
    y_out = torch.tensor([[5, 6, 7, 2, 0, 0], [5, 6, 7, 8, 9, 2], [2, 0, 0, 0, 0, 0]])
    expected = 0.0
    for b in range(3):
        for i in range(6):
            if y_out[b, i] != 0:
                expected += sum(min(float(alpha[b, i, j]), float(alpha[b, :i, j].sum())) for j in range(5))
    assert float(coverage_loss(alpha, y_out)) == pytest.approx(expected, rel=1e-12)
    assert float(coverage_loss(alpha[2:], y_out[2:])) == 0.0  # one word: nothing covered before it


@pytest.mark.parametrize("overrides", [{}, {"coverage": "neural"}, {"attention": "location"}])
def test_the_loss_reads_the_alignments_step_by_step_decoding_gives(overrides):
    """training_loss = NLL + λ × coverage loss of the α that model.step gives word by word (the teacher-forced
    recurrence collects the same α, alignment models with memory included)."""
    model, batch = model_and_batch("rnnsearch", overrides, dtype=torch.float64)
    model.coverage_loss = 0.7
    memory = model.encode(batch.x, batch.lengths)
    state, alphas = memory.s0, []
    for i in range(batch.y_in.size(1)):
        _, state, alpha = model.step(batch.y_in[:, i], state, memory)
        alphas.append(alpha)
    with torch.no_grad():
        expected = batch_nll(model, batch) + 0.7 * coverage_loss(torch.stack(alphas, 1), batch.y_out)
    with torch.no_grad():
        assert float(training_loss(model, batch)) == pytest.approx(float(expected), rel=1e-12)
    assert float(coverage_loss(torch.stack(alphas, 1).detach(), batch.y_out)) > 0.1


def test_the_coverage_loss_gradient_matches_finite_differences():
    """float64: d(training_loss)/dθ of the alignment model's v_a and W_a, and of the encoder's first weight,
    against central differences."""
    model, batch = model_and_batch("rnnsearch", {}, dtype=torch.float64)
    model.coverage_loss = 2.0
    model.zero_grad()
    training_loss(model, batch).backward()
    params = dict(model.named_parameters())
    for name in ("decoder.attention.v_a.weight", "decoder.attention.W_a.weight", "E.weight"):
        p = params[name]
        flat, grad = p.data.view(-1), p.grad.view(-1)
        for k in torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(1))[:4].tolist():
            keep = float(flat[k])
            with torch.no_grad():
                flat[k] = keep + 1e-5
                up = float(training_loss(model, batch))
                flat[k] = keep - 1e-5
                down = float(training_loss(model, batch))
                flat[k] = keep
            assert float(grad[k]) == pytest.approx((up - down) / 2e-5, rel=1e-5, abs=1e-8), (name, k)


def test_an_update_with_the_coverage_loss_lowers_it_and_lambda_zero_is_the_papers_update():
    """One update (graphs.update, as train.py's eager path and the CUDA graphs run it) with λ = 0 gives the
    parameters of an update on batch_nll alone, through the fused path; with λ > 0 other parameters, and 30 updates
    end with a smaller coverage term than 30 without it."""
    def trained(lam: float, updates: int = 1, lr: float = 0.01):
        model, batch = model_and_batch("rnnsearch", {})
        model.coverage_loss = lam
        optimizer = make_optimizer(model.parameters(), "adam", lr, 0.95, 1e-6)
        for _ in range(updates):
            optimizer.zero_grad(set_to_none=True)
            update(model, optimizer, batch, bf16=False)
        return model, batch

    plain, batch = model_and_batch("rnnsearch", {})
    optimizer = make_optimizer(plain.parameters(), "adam", 0.01, 0.95, 1e-6)
    (batch_nll(plain, batch) / batch.x.size(0)).backward()
    torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
    optimizer.step()
    zero, _ = trained(0.0)
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), zero.parameters()))
    covered, _ = trained(1.0)
    assert not all(torch.equal(a, b) for a, b in zip(zero.parameters(), covered.parameters()))

    def coverage_term(model):
        alphas: list[torch.Tensor] = []
        with torch.no_grad():
            model(batch.x, batch.lengths, batch.y_in, alphas)
        return float(coverage_loss(torch.stack(alphas, 1), batch.y_out))

    terms = {lam: coverage_term(trained(lam, 30, 0.03)[0]) for lam in (0.0, 5.0)}
    assert terms[5.0] < 0.8 * terms[0.0], terms
