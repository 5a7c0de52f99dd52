"""The training paths with a hand-written backward pass (model/fused.py: the decoder recurrences and the encoder
GRU) against the plain autograd paths (nn.GRU's packed sequence for the encoder): the same log-probabilities
(to 1e-5) and the same gradients, in float32 at sizes where rounding shows, on the CPU and (marked `cuda`) on a
GPU, and the hand-written backward passes against finite differences in float64."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rnnsearch.data.batching import make_batch
from rnnsearch.data.vocab import EOS_ID
from rnnsearch.model import build_model
from rnnsearch.model.fused import (
    combined_output_recurrence,
    deep_output_recurrence,
    encoder_gru,
)
from rnnsearch.training.train import batch_nll

from .conftest import DEVICES

pytestmark = pytest.mark.usefixtures("float32_products")

SIZES = {"m": 24, "n": 32, "n_align": 20, "l": 16}
FUSED = {  # every configuration a fused path covers
    "rnnsearch": ("rnnsearch", {}),
    "rnnencdec": ("rnnencdec", {}),
    "joeynmt-like": ("luong", {"cell": "gru", "attention": "additive", "dropout": 0.0}),
    "joeynmt-like, no input feeding": ("luong", {"cell": "gru", "attention": "additive", "dropout": 0.0,
                                                 "input_feeding": False}),
}


def model_and_batch(arch, overrides, seed=0, dtype=torch.float32, device="cpu", src_lengths=(12, 1, 7, 12, 3),
                    tgt_lengths=(9, 4, 13, 1, 6)):
    """The same model and batch on every device: drawn on the CPU, then moved. Sentences of the lengths given plus
    </s> (by default: padding on both sides, a one-word sentence)."""
    torch.manual_seed(seed)
    model = build_model({"arch": arch, **SIZES, **overrides}, 41, 37).to(dtype).train()
    with torch.no_grad():  # App. B.1 starts v_a at 0 (uniform attention): move every weight off its init
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(3, 41, (n,), generator=g).tolist() + [EOS_ID] for n in src_lengths]
    tgt = [torch.randint(3, 37, (n,), generator=g).tolist() + [EOS_ID] for n in tgt_lengths]
    return model.to(device), make_batch(src, tgt, list(range(len(src)))).to(device)


def run(model, batch, fused: bool, bf16: bool = False):
    """Log-probabilities and parameter gradients of one batch; with `bf16`, the forward pass under bf16 autocast
    and the backward pass outside it, as train.py does."""
    model.encoder.fused = fused and model.cfg["cell"] == "gru"
    model.decoder.fused = fused
    model.zero_grad()
    with torch.autocast(batch.x.device.type, dtype=torch.bfloat16, enabled=bf16):
        logp = torch.log_softmax(model(batch.x, batch.lengths, batch.y_in).float(), -1)
        loss = torch.nn.functional.nll_loss(logp.flatten(0, 1), batch.y_out.flatten(), ignore_index=0, reduction="sum")
    loss.backward()
    return logp.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(FUSED))
def test_fused_path_gives_the_plain_paths_log_probabilities_and_gradients(name, device):
    model, batch = model_and_batch(*FUSED[name], device=device)
    # these configurations train on the fused path (the encoder's: on the CPU; cuDNN's on a GPU unless forced)
    assert model.decoder.fused and model.encoder.fused is None
    logp_fused, grads_fused = run(model, batch, True)
    logp_plain, grads_plain = run(model, batch, False)
    real = (batch.y_out != 0).unsqueeze(2)
    assert torch.allclose(logp_fused * real, logp_plain * real, rtol=0, atol=1e-5)
    assert grads_fused.keys() == grads_plain.keys()
    for k in grads_plain:
        scale = grads_plain[k].abs().max().item()
        assert scale > 0, k  # every parameter learns something in this batch
        assert (grads_fused[k] - grads_plain[k]).abs().max().item() <= 1e-5 * max(scale, 1.0), k


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_sentences_of_1_and_50_words_on_the_fused_path(device, bf16):
    """The -50 models' longest sentences beside one-word ones, each side (rows padded by 49 words): RNNsearch's
    fused path (its Triton kernels on a GPU, or on the CPU under TRITON_INTERPRET=1) against the plain autograd
    path, in float32 to rounding; under bf16 autocast within twice the plain path's distance from the float32 result
    (or 0.05: three sentences' gradients after 50 steps of bf16 products scatter by seed, the CPU's fused path up to
    1.6 times the plain path's distance), which a kernel reading h in bf16 exceeded (0.14 against 0.03)."""
    model, batch = model_and_batch("rnnsearch", {}, device=device, src_lengths=(49, 0, 20), tgt_lengths=(0, 49, 12))
    assert batch.x.size(1) == batch.y_out.size(1) == 50
    logp32, grads32 = run(model, batch, False)
    logp_fused, grads_fused = run(model, batch, True, bf16)
    logp_plain, grads_plain = run(model, batch, False, bf16)
    real = (batch.y_out != 0).unsqueeze(2)
    if not bf16:
        assert ((logp_fused - logp32) * real).abs().max().item() <= 1e-5
        for k, g in grads32.items():
            assert (grads_fused[k] - g).abs().max().item() <= 1e-5 * max(g.abs().max().item(), 1.0), k
        return
    err_fused = ((logp_fused - logp32) * real).abs().max().item()
    assert 0 < err_fused <= max(2 * ((logp_plain - logp32) * real).abs().max().item(), 0.05)
    for k, g in grads32.items():
        rel_fused = ((grads_fused[k] - g).norm() / g.norm()).item()
        assert rel_fused <= max(2 * ((grads_plain[k] - g).norm() / g.norm()).item(), 0.05), (k, rel_fused)


def test_presets_without_a_fused_path_train_on_the_plain_one():
    lstm, _ = model_and_batch("luong", {})
    assert not lstm.decoder.fused and not lstm.encoder.fused
    mult, _ = model_and_batch("rnnsearch", {"attention": "multiplicative"})
    assert not mult.decoder.fused and mult.encoder.fused is None
    # combined output with dropout: the plain path while training, the fused one otherwise
    drop, batch = model_and_batch("luong", {"cell": "gru", "attention": "additive", "dropout": 0.3})
    assert drop.decoder.fused
    drop.eval()
    logp_fused, _ = run(drop, batch, True)
    logp_plain, _ = run(drop, batch, False)
    assert torch.allclose(logp_fused, logp_plain, rtol=0, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_the_encoder_runs_its_own_recurrence_on_the_cpu_and_cudnns_on_a_gpu(device, monkeypatch):
    """By default (fused None) the GRU encoder's hand-written recurrence runs on the CPU and the packed nn.GRU
    (cuDNN) on a GPU; True or False chooses one on both."""
    from rnnsearch.model import encoders

    calls = []
    monkeypatch.setattr(encoders, "encoder_gru", lambda *a: calls.append(1) or encoder_gru(*a))
    model, batch = model_and_batch("rnnsearch", {}, device=device)
    for fused, expected in ((None, device == "cpu"), (True, True), (False, False)):
        calls.clear()
        model.encoder.fused = fused
        model.encode(batch.x, batch.lengths)
        assert bool(calls) == expected, (fused, device)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rnnsearch", "rnnencdec", "joeynmt-like"])
def test_hand_written_backward_matches_finite_differences(name):
    """gradcheck of the recurrence alone, every input and weight, float64."""
    model, batch = model_and_batch(*FUSED[name], dtype=torch.float64)
    with torch.no_grad():
        memory = model.encode(batch.x, batch.lengths)
        X = model.decoder.cell.W(model.E(batch.y_in))
    cell, att = model.decoder.cell, model.decoder.attention
    n = model.cfg["n"]
    leaves = {"X": X[:2, :5].clone(), "s0": memory.s0[:2, :n].clone()}
    if att is not None:
        leaves.update(h=memory.h[:2].clone(), keys=memory.keys[:2].clone())
    for k, t in leaves.items():
        t.requires_grad_()
    mask = memory.mask[:2]
    weights = list(model.decoder.parameters())

    def f(*args):
        kw = dict(zip(leaves, args))
        if name == "rnnencdec":
            return deep_output_recurrence(kw["X"], kw["s0"], cell)
        if name == "rnnsearch":
            return deep_output_recurrence(kw["X"], kw["s0"], cell, att, kw["h"], kw["keys"], mask)
        return combined_output_recurrence(kw["X"], kw["s0"], cell, att, model.decoder.W_u, kw["h"], kw["keys"], mask)

    assert torch.autograd.gradcheck(f, tuple(leaves.values()), eps=1e-6, atol=1e-6, rtol=1e-5)
    # the weights: gradients of a scalar against central differences
    out = f(*leaves.values())
    probe = [torch.randn_like(o) for o in (out if isinstance(out, tuple) else (out,))]

    def scalar():
        o = f(*leaves.values())
        return sum((a * b).sum() for a, b in zip(o if isinstance(o, tuple) else (o,), probe))

    names = [k for k, p in model.decoder.named_parameters()]
    grads = torch.autograd.grad(scalar(), weights, allow_unused=True)
    checked = {k.split(".")[-2] for k, g in zip(names, grads) if g is not None}
    expected = {"U_zr", "U"} | ({"C", "W_a", "v_a"} if name != "rnnencdec" else set()) | (
        {"W_u"} if name == "joeynmt-like" else set())
    assert checked == expected
    for w, g in zip(weights, grads):
        if g is None:
            continue
        flat = w.data.view(-1)
        for i in torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(0))[:5].tolist():
            old = flat[i].item()
            flat[i] = old + 1e-6
            up = scalar().item()
            flat[i] = old - 1e-6
            down = scalar().item()
            flat[i] = old
            assert abs((up - down) / 2e-6 - g.view(-1)[i].item()) <= 1e-5 + 1e-4 * abs(g.view(-1)[i].item())


@pytest.mark.parametrize("bidirectional", [True, False])
def test_encoder_backward_matches_finite_differences(bidirectional):
    """gradcheck of the encoder recurrence, float64: the embedded input and every nn.GRU weight, with unsorted
    lengths (the rows are reordered inside), a one-word sentence and padding beyond the longest one."""
    torch.manual_seed(1)
    gru = torch.nn.GRU(5, 4, batch_first=True, bidirectional=bidirectional).double()
    lengths = torch.tensor([3, 6, 1, 6, 4])
    Ex = torch.randn(5, 7, 5, dtype=torch.float64, requires_grad=True)
    inputs = (Ex, *(w.detach().clone().requires_grad_() for w in gru._flat_weights))

    def f(Ex, *w):
        return encoder_gru(Ex, lengths, list(w))

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    h, final = f(*inputs)
    assert (h[2, 1:] == 0).all() and (h[:, 6] == 0).all()  # zero at padding


def test_training_updates_are_the_same_on_both_paths():
    """Three Adadelta updates of RNNsearch from the same start: the parameters agree to 1e-5."""
    finals = []
    for fused in (True, False):
        model, batch = model_and_batch("rnnsearch", {})
        model.encoder.fused = model.decoder.fused = fused
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)
        for _ in range(3):
            loss = batch_nll(model, batch)
            opt.zero_grad()
            (loss / 5).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert (finals[0] - finals[1]).abs().max().item() <= 1e-5


class ProductDtypes(TorchDispatchMode):
    """Counts the matrix products dispatched, by operator and operand dtype, forward and backward."""

    PRODUCTS = {torch.ops.aten.mm: 0, torch.ops.aten.bmm: 0, torch.ops.aten.addmm: 1, torch.ops.aten.baddbmm: 1}

    def __init__(self):
        super().__init__()
        self.seen = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = self.PRODUCTS.get(func.overloadpacket)
        if first is not None:
            self.seen[func.overloadpacket.__name__, args[first].dtype, args[first + 1].dtype] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(FUSED))
def test_fused_path_under_bf16_autocast(name, device):
    """train.precision: bf16. The fused paths run their matrix products in bf16 and keep states, gates and sums in
    float32: every 2-D product of the update (theirs and the layers' around them) is bf16, the gradients are
    float32, and log-probabilities and gradients stay about as near the float32 ones as the plain autograd path's
    do: each gradient within twice the plain path's distance (or 0.02). Over seeds 0-5, RNNsearch's worst gradient
    by the GPU kernels (under Triton's interpreter) was 0.89 to 1.8 times the plain path's, each seed rounding its
    own way."""
    model, batch = model_and_batch(*FUSED[name], device=device)
    logp32, grads32 = run(model, batch, True)
    with ProductDtypes() as products:
        logp_fused, grads_fused = run(model, batch, True, bf16=True)
    logp_plain, grads_plain = run(model, batch, False, bf16=True)
    bf16 = torch.bfloat16
    assert {(op, a, b) for op, a, b in products.seen if op in ("mm", "addmm")} <= {("mm", bf16, bf16), ("addmm", bf16, bf16)}
    assert products.seen["mm", bf16, bf16] >= 8 and products.seen["bmm", bf16, bf16] >= 1  # the encoder's W_h
    real = (batch.y_out != 0).unsqueeze(2)
    err_fused = ((logp_fused - logp32) * real).abs().max().item()
    err_plain = ((logp_plain - logp32) * real).abs().max().item()
    assert 0 < err_fused <= max(1.5 * err_plain, 0.02)
    for k in grads32:
        assert grads_fused[k].dtype == torch.float32, k
        rel_fused = ((grads_fused[k] - grads32[k]).norm() / grads32[k].norm()).item()
        rel_plain = ((grads_plain[k] - grads32[k]).norm() / grads32[k].norm()).item()
        assert rel_fused <= max(2 * rel_plain, 0.02), (k, rel_fused, rel_plain)
