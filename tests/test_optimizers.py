"""make_optimizer's Adadelta and Adam against torch.optim's, in a fresh interpreter: the same updates, state and
state_dict, and no import of torch._dynamo (1.5 s of CPU in every training process, for torch.compile, which
rnnsearch never runs)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
import torch
from rnnsearch.training.optimizers import make_optimizer

def train(optimizer_of):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = optimizer_of(model.parameters())
    for k in range(4):
        optimizer.zero_grad()
        model(torch.randn(6, 5)).pow(2).sum().backward()
        optimizer.step()
        if k == 1:  # a resumed training's optimizer
            state = optimizer.state_dict()
            optimizer = optimizer_of(model.parameters())
            optimizer.load_state_dict(state)
    moved = all(not torch.equal(p, q) for p, q in zip(model.parameters(), start))
    return [p.detach().clone() for p in model.parameters()], optimizer.state_dict(), moved

TORCHS = {"adadelta": lambda ps: torch.optim.Adadelta(ps, lr=1.0, rho=0.95, eps=1e-6),
          "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, fused=True)}
LR = {"adadelta": 1.0, "adam": 0.01}
ours = {kind: train(lambda ps, kind=kind: make_optimizer(ps, kind, LR[kind])) for kind in TORCHS}
report = {"grad_enabled": torch.is_grad_enabled(), "dynamo_after_ours": "torch._dynamo" in sys.modules}
for kind, optimizer_of in TORCHS.items():
    (params, state, moved), (their_params, their_state, _) = ours[kind], train(optimizer_of)
    report[kind] = {
        "same_parameters": all(torch.equal(p, q) for p, q in zip(params, their_params)),
        "same_state": all(torch.equal(a[key], b[key]) for a, b in zip(state["state"].values(),
                                                                   their_state["state"].values()) for key in a),
        "moved": moved,
        "steps": float(state["state"][0]["step"])}
report["dynamo_after_torchs"] = "torch._dynamo" in sys.modules
print(json.dumps(report))
"""


def test_our_optimizers_step_as_torchs_without_importing_dynamo():
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(p.stdout)
    assert report["dynamo_after_ours"] is False and report["grad_enabled"] is True, report
    for kind in ("adadelta", "adam"):
        assert report[kind]["same_parameters"] and report[kind]["same_state"], report
        assert report[kind]["moved"] and report[kind]["steps"] == 4, report
    assert report["dynamo_after_torchs"] is True  # what torch.optim's own classes do: the test sees the difference
