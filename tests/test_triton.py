"""The Triton kernels of a GPU update (model/triton_kernels.py, model/attention_kernels.py): the recurrences take
them on CUDA (their results are checked against autograd by test_fused.py's `cuda` tests), and Adadelta's
one-kernel step is torch's step.
On the CPU these run only under Triton's interpreter (TRITON_INTERPRET=1 with Triton installed)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rnnsearch.model import attention_kernels, fused_gpu, triton_kernels
from rnnsearch.training.optimizers import Adadelta

from .conftest import DEVICES
from .test_fused import FUSED, model_and_batch, run


def _needs_kernels(device: str) -> None:
    if not triton_kernels.usable(torch.empty(0, device=device)):
        pytest.skip(f"the Triton kernels do not run on {device} here (Triton missing, or on the CPU without "
                    "TRITON_INTERPRET=1)")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["rnnsearch", "rnnencdec"])
def test_the_recurrences_run_the_kernels_where_they_can(name, device, monkeypatch):
    _needs_kernels(device)
    calls = []
    for function in (fused_gpu.DeepOutputKernels, fused_gpu.EncoderKernels):
        apply = function.apply
        monkeypatch.setattr(function, "apply", lambda *a, f=apply, n=function.__name__: calls.append(n) or f(*a))
    model, batch = model_and_batch(*FUSED[name], device=device)
    run(model, batch, True)
    assert calls == ["EncoderKernels", "DeepOutputKernels"]


def _drawing(g: torch.Generator, device):
    """r(*shape, scale=0.5): scale × standard normal values from g, on `device`, requiring a gradient."""
    def r(*shape, scale=0.5):
        return (scale * torch.randn(*shape, generator=g)).to(device).requires_grad_()

    return r


def _assert_alike(ours: list, theirs: list, lp: torch.dtype) -> None:
    """Each of the kernels' results (outputs, then gradients) nonzero and within rounding of the CPU path's: 1e-5 of
    its largest value (at least 1) in float32, 1.5e-2 with bf16 products."""
    for a, b in zip(ours, theirs, strict=True):
        assert a.abs().sum() > 0
        scale = b.abs().max().item()
        assert (a - b).abs().max().item() <= (1e-5 if lp == torch.float32 else 1.5e-2) * max(scale, 1.0)


def _recurrence_inputs(device, attn, B=37, Tx=9, Ty=6, n=72, na=80, seed=0):
    """Random inputs of the deep-output recurrence at sizes that are not whole tiles of the step kernels (37 rows:
    two blocks of 32, the second mostly outside; n = 72, n' = 80 and ctx = 144 over blocks of 64 columns, the last
    partly outside), rows of 1 to Tx words. Weights of a trained model's scale (1/√fan-in: a stable recurrence)."""
    g = torch.Generator().manual_seed(seed)
    r = _drawing(g, device)

    X, s0, U_zr, U = r(B, Ty, 3 * n), r(B, n), r(2 * n, n, scale=n**-0.5), r(n, n, scale=n**-0.5)
    if not attn:
        return X, s0, None, None, None, None, None, None, U_zr, U
    lengths = torch.randint(1, Tx + 1, (B,), generator=g)
    lengths[0] = Tx
    mask = (torch.arange(Tx)[None, :] < lengths[:, None]).to(device)
    h, keys, W_a = r(B, Tx, 2 * n), r(B, Tx, na), r(na, n, scale=n**-0.5)
    return X, s0, h, keys, mask, W_a, r(1, na, scale=na**-0.5), r(3 * n, 2 * n, scale=(2 * n) ** -0.5), U_zr, U


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("attn", [True, False], ids=["rnnsearch", "rnnencdec"])
@pytest.mark.parametrize("lp", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_step_kernels_at_sizes_that_are_not_whole_tiles(device, attn, lp):
    """The GPU recurrence (fused_gpu.DeepOutputKernels: each step's products with their element-wise work) against
    the CPU's (fused._DeepOutputRecurrence, checked against autograd and finite differences by test_fused.py), at
    sizes where the kernels' tiles overhang rows and columns: outputs and the gradients of every input and weight
    alike, to float32's rounding, or with bf16 products to within the distance between the two's roundings."""
    _needs_kernels(device)
    from rnnsearch.model.fused import _DeepOutputRecurrence

    results = []
    for function in (fused_gpu.DeepOutputKernels, _DeepOutputRecurrence):
        inputs = _recurrence_inputs(device, attn)
        out = function.apply(*inputs, lp)
        out = out if isinstance(out, tuple) else (out,)
        probe = torch.Generator().manual_seed(1)
        sum(((o * torch.randn(o.shape, generator=probe).to(device)).sum() for o in out)).backward()
        results.append([*out, *(t.grad for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad)])
    _assert_alike(*results, lp)


def _encoder_inputs(device, D, B=37, Tx=9, n=72, seed=0):
    """EncoderKernels' inputs at sizes that are not whole tiles (37 rows, n = 72 over blocks of 64 columns), the
    rows sorted longest first, of 1 to Tx words: fewer rows inside their sentence at each later step."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, Tx + 1, (B,), generator=g)
    lengths[0] = Tx
    lengths = lengths.sort(descending=True).values
    active = [int((lengths > t).sum()) for t in range(Tx)]
    r = _drawing(g, device)

    return r(D, B, Tx, 3 * n), r(D, 3 * n, n, scale=n**-0.5), r(D, 3 * n), active, (lengths - 1).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("D", [2, 1], ids=["bidirectional", "forward"])
@pytest.mark.parametrize("lp", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_the_encoder_kernels_at_sizes_that_are_not_whole_tiles(device, D, lp):
    """The GPU encoder (fused_gpu.EncoderKernels: each step's product W_h h and, backward, the next step's ∂L/∂g W_h
    inside the step's kernel) against the CPU's (fused._EncoderGRU, checked against nn.GRU by test_fused.py), as the
    decoder's above: both states and the gradients of XI, W_h and b_h, with fewer rows at each later step."""
    _needs_kernels(device)
    from rnnsearch.model.fused import _EncoderGRU

    results = []
    for function in (fused_gpu.EncoderKernels, _EncoderGRU):
        XI, W_h, b_h, active, last = _encoder_inputs(device, D)
        out = function.apply(XI, W_h, b_h, active, last, lp)
        probe = torch.Generator().manual_seed(1)
        sum((o * torch.randn(o.shape, generator=probe).to(device)).sum() for o in out).backward()
        results.append([*out, XI.grad, W_h.grad, b_h.grad])
    assert active[-1] < active[0]
    _assert_alike(*results, lp)


@pytest.mark.parametrize("device", DEVICES)
def test_no_torch_operation_runs_per_encoder_step(device, monkeypatch):
    """The encoder's steps (every row for all Tx steps, as in a CUDA graph) run only their kernels: the same torch
    operations at 3 source positions as at 9, and 2 more kernels per position (1 each way)."""
    _needs_kernels(device)
    launches = _stand_in_for_the_kernels(monkeypatch, run=True)
    seen = []
    for Tx in (3, 9):
        launches.clear()
        XI, W_h, b_h, _, last = _encoder_inputs(device, 2, B=5, Tx=Tx, n=16)
        with _Operations() as ops:
            out, final = fused_gpu.EncoderKernels.apply(XI, W_h, b_h, [5] * Tx, last, torch.bfloat16)
            (out.sum() + final.sum()).backward()
        seen.append((ops.seen, len(launches)))
    (few, k_few), (many, k_many) = seen
    assert few == many, (few, many)
    assert k_many - k_few == 2 * 6


_RECURRENCE_KERNELS = ("_query_energies", "_align", "_gru_gates", "_gru_state", "_gru_grad_gates", "_gru_grad_reset",
                       "_context_grad", "_energy_grad", "_keys_grad",  # what DeepOutputKernels launches
                       "_encoder_forward", "_encoder_backward")  # and EncoderKernels


class _Operations(TorchDispatchMode):
    """torch's operations that launch work (views and allocations left out), by name."""

    SKIP = {"view", "_unsafe_view", "t", "transpose", "slice", "select", "unsqueeze", "squeeze", "as_strided", "alias",
            "detach", "expand", "split", "empty", "new_empty", "empty_like", "empty_strided", "lift_fresh"}

    paused = False  # inside a kernel (Triton's interpreter runs torch's operations of its own)

    def __init__(self):
        super().__init__()
        self.seen = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in self.SKIP and not _Operations.paused:
            self.seen[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
def test_no_torch_operation_runs_per_step(device, monkeypatch):
    """Every matrix product of a decoder step is inside the step's kernels: the GPU recurrence's forward and
    backward passes, under bf16 autocast, run the same torch operations at 3 target positions as at 9 (the weights'
    casts and gradients, once), and 8 more Triton kernels per position (4 each way)."""
    _needs_kernels(device)
    from rnnsearch.model.fused import _apply

    launches = _stand_in_for_the_kernels(monkeypatch, run=True)
    seen = []
    for Ty in (3, 9):
        launches.clear()
        inputs = _recurrence_inputs(device, True, B=5, Tx=7, Ty=Ty, n=16, na=16)
        with _Operations() as ops, torch.autocast(device, dtype=torch.bfloat16):
            out = _apply(fused_gpu.DeepOutputKernels, *inputs)
            sum(o.float().sum() for o in out).backward()
        seen.append((ops.seen, len(launches)))
    (few, k_few), (many, k_many) = seen
    assert few == many and few["mm"] <= 5, (few, many)
    assert k_many - k_few == 8 * 6


class _StandIn:
    """Stands for a Triton kernel: kernel[grid](…) records the launch (kernel, args, kwargs) and, with `run`, runs it
    (torch's operations of Triton's interpreter left out of `_Operations`' count)."""

    def __init__(self, kernel, launches: list, run: bool):
        self.kernel, self.launches, self.run = kernel, launches, run

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((self.kernel, args, kwargs))
            if not self.run:
                return None
            _Operations.paused = True
            try:
                return self.kernel[grid](*args, **kwargs)
            finally:
                _Operations.paused = False

        return launch


def _stand_in_for_the_kernels(monkeypatch, run: bool) -> list:
    """Every kernel DeepOutputKernels and EncoderKernels launch replaced by a `_StandIn`; returns their launches."""
    launches = []
    for name in _RECURRENCE_KERNELS:
        module = triton_kernels if hasattr(triton_kernels, name) else attention_kernels
        monkeypatch.setattr(module, name, _StandIn(getattr(module, name), launches, run))
    return launches


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("capturable", [False, True])
def test_adadelta_step_is_torchs(device, capturable):
    """Three steps of both optimizers from the same parameters and gradients (lr a float, or with `capturable` a
    tensor on the device, as the training's CUDA graphs set it): the same parameters and state, to rounding."""
    _needs_kernels(device)
    if capturable and device == "cpu":
        pytest.skip("torch's capturable Adadelta runs on an accelerator only")
    g = torch.Generator().manual_seed(0)
    shapes = [(300, 7), (1001,), (5, 5)]
    params = [[torch.randn(s, generator=g).to(device).requires_grad_() for s in shapes] for _ in range(2)]
    with torch.no_grad():
        for p, q in zip(*params):
            q.copy_(p)
    lr = torch.tensor(0.7, device=device) if capturable else 0.7
    ours = Adadelta(params[0], lr=lr, rho=0.95, eps=1e-6, capturable=capturable)
    torchs = torch.optim.Adadelta(params[1], lr=lr, rho=0.95, eps=1e-6, capturable=capturable, foreach=False)
    for _ in range(3):
        grads = [torch.randn(s, generator=g).to(device) for s in shapes]
        for optimizer, ps in ((ours, params[0]), (torchs, params[1])):
            for p, grad in zip(ps, grads):
                p.grad = grad.clone()
            optimizer.step()
    for p, q in zip(*params):
        assert not torch.equal(p, params[0][0].new_zeros(p.shape))
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        for key in ("square_avg", "acc_delta", "step"):
            torch.testing.assert_close(ours.state[p][key], torchs.state[q][key], rtol=1e-6, atol=1e-9)
    assert float(ours.state[params[0][0]]["step"]) == 3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_loss_kernels_give_torchs_summed_nll_and_gradient(device, dtype):
    """Logits with padded rows (a view of a wider tensor, as the output layer's), PAD targets among the real ones:
    the loss and ∂L/∂logits of F.cross_entropy (on float32 logits, as autocast runs it), the gradient in the logits'
    dtype."""
    _needs_kernels(device)
    from torch.nn import functional as F

    from rnnsearch.training.loss_kernels import summed_nll

    g = torch.Generator().manual_seed(0)
    wide = (3 * torch.randn(9, 5008, generator=g)).to(device, dtype)
    target = torch.randint(1, 5003, (9,), generator=g).to(device)
    target[[2, 6]] = 0  # PAD
    target[4] = 5002  # the last column
    losses, grads = [], []
    for nll in (lambda x: summed_nll(x, target, 0),
                lambda x: F.cross_entropy(x.float(), target, ignore_index=0, reduction="sum")):
        logits = wide[:, :5003].detach().requires_grad_()
        loss = nll(logits)
        (1.5 * loss).backward()
        losses.append(loss)
        grads.append(logits.grad)
    assert losses[0].dtype == torch.float32 and grads[0].dtype == dtype
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-2)
    assert grads[0][[2, 6]].abs().sum() == 0 and grads[0][4, -1] < 0


@pytest.mark.slow
def test_the_kernels_under_tritons_interpreter_give_the_autograd_results():
    """Where Triton is installed but no GPU is used (the CPU wheel of torch comes without Triton), the kernels run
    under Triton's interpreter (TRITON_INTERPRET=1, set before Triton is imported, hence a process of its own):
    test_fused.py's comparisons on the CPU (fp32 and bf16, padded rows, sentences of 1 and 50 words) and this
    file's, the fused path then running every kernel of model/triton_kernels.py and model/attention_kernels.py.
    (The encoder's float64
    finite-difference checks stay out: the kernels compute in float32; so do the comparison of three whole
    training updates, whose gradients the other comparisons check kernel by kernel (25 s of a core), and the
    50-word comparison in float32 (22 s), whose masks and products the comparisons at 13 words and at sizes that
    are not whole tiles check: the 50 words stay for bf16, where rounding accumulates over the steps.)"""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed (README's install, `.[dev]`, installs it: the kernels then run here "
                    "under its interpreter)")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("already under Triton's interpreter: the other tests here run the kernels")
    tests = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q", "-rs",
                        "-n", "0", "-m", "not cuda and not slow",
                        "-k", "not finite_differences and not training_updates_are_the_same and not (50_words and fp32)",
                        str(tests / "test_fused.py"), str(tests / "test_triton.py")],
                       capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "do not run on cpu" not in p.stdout, p.stdout[-3000:]  # no kernel test skipped for want of the kernels
    assert int(re.search(r"(\d+) passed", p.stdout).group(1)) >= 15, p.stdout[-1000:]


def _signature(kernel, args, kwargs):
    """Triton's signature and constants of one launch: pointers by dtype, integers i32, constexprs by value."""
    types = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.uint8: "*u8"}
    signature, constants = {}, {}
    for i, p in enumerate(kernel.params):
        value = args[i] if i < len(args) else kwargs[p.name]
        if p.is_constexpr:
            signature[p.name], constants[p.name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[p.name] = types[value.dtype]
        else:
            assert isinstance(value, int) and abs(value) < 2**31, (p.name, value)
            signature[p.name] = "i32"
    return signature, constants, kwargs.get("num_warps", 4)


@pytest.mark.slow
@pytest.mark.sm90
@pytest.mark.parametrize("lp", ["fp32", "tf32", "bf16"])
def test_the_kernels_compile_for_a_hopper_gpu(lp, monkeypatch):
    """Where Triton is installed, no GPU needed: every kernel of the recurrences' forward and backward passes, with
    the arguments and tile sizes of their launches at the paper's sizes (n = n' = 1000, ctx = 2000, 80 rows of 50
    words; RNNsearch and RNNencdec; the encoder's both directions; float32 products in full precision and on TF32
    tensor cores, bf16 ones), compiled to machine code for an H100 (sm_90, Triton's own ptxas). Triton's interpreter
    runs what a GPU's compiler may refuse (a block shape, a dot's operands of two dtypes in a loop that never runs, a
    construct); this catches it before a GPU run."""
    if triton_kernels.triton is None:
        pytest.skip("Triton is not installed (README's install, `.[dev]`, installs it: the kernels then compile "
                    "here for a GPU)")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("under Triton's interpreter the kernels are not compiled")
    import triton
    from triton.backends.compiler import GPUTarget

    launches = _stand_in_for_the_kernels(monkeypatch, run=False)  # recorded, not run
    tf32, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, lp == "tf32"  # bench-train's
    wanted, lp = "tf32" if lp == "tf32" else "ieee", torch.bfloat16 if lp == "bf16" else torch.float32
    try:
        for attn, Tx in ((True, 50), (True, 30), (True, 12), (False, 50)):  # RNNsearch's tiles of 64, 32, 16 words
            inputs = _recurrence_inputs("cpu", attn, B=80, Tx=Tx, Ty=3, n=1000, na=1000)
            out = fused_gpu.DeepOutputKernels.apply(*inputs, lp)
            sum(o.sum() for o in (out if attn else (out,))).backward()
        XI, W_h, b_h, _, last = _encoder_inputs("cpu", 2, B=80, Tx=3, n=1000)  # every row, as in a CUDA graph
        sum(o.sum() for o in fused_gpu.EncoderKernels.apply(XI, W_h, b_h, [80] * 3, last, lp)).backward()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    target = GPUTarget("cuda", 90, 32)
    backend = triton.compiler.make_backend(target)
    compiled, spilled = set(), {}
    for kernel, args, kwargs in launches:
        signature, constants, num_warps = _signature(kernel, args, kwargs)
        key = (kernel.__name__, tuple(signature.items()), tuple(constants.items()))
        if key in compiled:
            continue
        options = backend.parse_options({"num_warps": num_warps})
        source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constants)
        binary = triton.compile(source, target=target, options=options.__dict__)
        assert binary.asm.get("cubin"), kernel.__name__
        compiled.add(key)
        spilled[kernel.__name__, tuple(constants.items())] = _spill_stores(binary.asm["ptx"])
    assert {k[0] for k in compiled} == set(_RECURRENCE_KERNELS)
    assert {v for k in compiled for name, v in k[2] if name == "PRECISION"} == {wanted}
    # none spills its registers to local memory beyond a few values (_energy_grad spilled 19.7 KB a thread)
    assert not {k: v for k, v in spilled.items() if v > 256}, spilled


def _spill_stores(ptx: str) -> int:
    """Bytes a thread of the kernel stores to local memory for want of registers: ptxas -v, as Triton runs it."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as folder:
        src = Path(folder) / "kernel.ptx"
        src.write_text(ptx)
        p = subprocess.run([get_ptxas(90).path, "--regAllocOptLevel=2", "--gpu-name=sm_90a", "-v", str(src), "-o",
                            str(src.with_suffix(".cubin"))], capture_output=True, text=True, check=True)
    return int(re.search(r"(\d+) bytes spill stores", p.stderr).group(1))
