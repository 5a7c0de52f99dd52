"""docs/contributing.md's recipes, each done here with a toy: an attention variant registered in its two places,
a stage that is one record (with a setting that reaches it by its one route), and a data source that is one
record. Each toy is registered only where the page says, and then works end to end in-process."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import torch
import yaml

from rnnsearch import cli, commands, config as cfg
from rnnsearch.data import corpus
from rnnsearch.data.corpus.source import Source, section
from rnnsearch.model import attention, build_model, presets
from rnnsearch.settings import DecodeConfig
from rnnsearch.commands.record import Stage, arg

from .conftest import REPO


class ScaledDotAttention(attention.Attention):
    """e_ij = qᵀ h_j / √n, the toy variant."""

    def __init__(self, n: int, ctx_dim: int, n_align: int, cfg: dict | None = None):
        super().__init__()
        self.scale = 1 / math.sqrt(n)

    def precompute(self, h):
        return h * self.scale

    def energies(self, q, keys, state=None):
        return torch.bmm(keys, q.unsqueeze(2)).squeeze(2)

    @classmethod
    def flops(cls, ctx, n, n_align, S, cfg=None):
        return 0, 4 * S * ctx


class SatedDotAttention(ScaledDotAttention):
    """The toy with memory: e_ij = qᵀ h_j / √n − w_s G_{i−1,j}, G_{i,j} = G_{i−1,j} + α_ij, the attention word j
    has had so far (state: G, one value per source word)."""

    state_size = 1

    def __init__(self, n: int, ctx_dim: int, n_align: int, cfg: dict | None = None):
        super().__init__(n, ctx_dim, n_align)
        self.w_s = torch.nn.Parameter(torch.ones(1))

    def energies(self, q, keys, state=None):
        return super().energies(q, keys) - self.w_s * state.squeeze(2)

    def advance(self, state, alpha, q, keys):
        return state + alpha.unsqueeze(2)


def test_an_attention_variant_is_its_class_and_its_name(monkeypatch, caplog):
    """Registered in attention.VARIANTS and presets.ATTENTIONS only: the configuration accepts it, the model trains
    with it through plain autograd (said once in the log), and the FLOP count takes its own."""
    from rnnsearch.bench.flops import forward_flops
    from rnnsearch.training.scoring import batch_nll
    from rnnsearch.data.batching import make_batch

    monkeypatch.setitem(attention.VARIANTS, "scaled-dot", ScaledDotAttention)
    monkeypatch.setattr(presets, "ATTENTIONS", (*presets.ATTENTIONS, "scaled-dot"))
    sizes = {"m": 8, "n": 6, "n_align": 5, "l": 4}
    config = presets.resolve("rnnencdec", sizes, {"attention": "scaled-dot"})  # unidirectional: |h_j| = n
    with caplog.at_level(logging.INFO, logger="rnnsearch.model"):
        model = build_model(config, 20, 20)
        build_model(config, 20, 20)
    assert isinstance(model.attention, ScaledDotAttention) and not model.decoder.fused
    assert sum("ScaledDotAttention: the fused recurrences serve the additive score only" in r.message
               for r in caplog.records) == 1
    batch = make_batch([[4, 5, 6, 1], [7, 8, 1]], [[9, 10, 1], [11, 1]], [0, 1])
    batch_nll(model, batch).backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    # against the fixed context (S = 4, T = 3, |h_j| = n = 6): its 4·S·|h_j| per step, less V's 2·|h_j|·n
    plain = forward_flops({**config, "attention": "none"}, 20, 4, 3)
    assert forward_flops(config, 20, 4, 3) - plain == 3 * 4 * 4 * 6 - 2 * 6 * 6


def test_an_attention_variant_with_memory_is_its_class_and_its_name(monkeypatch):
    """A variant that carries a state from step to step, registered in the same two places only: it trains (its
    own weight reached through the state), and beam search's every finished hypothesis scores what teacher forcing
    gives it, which holds only if the search carried and reordered the state it knows nothing of."""
    from rnnsearch.data.batching import make_batch, pad
    from rnnsearch.decoding.search import beam_search
    from rnnsearch.training.scoring import batch_nll

    monkeypatch.setitem(attention.VARIANTS, "sated-dot", SatedDotAttention)
    monkeypatch.setattr(presets, "ATTENTIONS", (*presets.ATTENTIONS, "sated-dot"))
    torch.manual_seed(0)
    model = build_model(presets.resolve("rnnencdec", {"m": 8, "n": 6, "n_align": 5, "l": 4},
                                        {"attention": "sated-dot"}), 20, 20)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    batch = make_batch([[4, 5, 6, 1], [7, 8, 1]], [[9, 10, 1], [11, 1]], [0, 1])
    batch_nll(model, batch).backward()
    assert model.attention.w_s.grad.abs().item() > 0
    src = [[4, 5, 6, 7, 8, 1], [9, 1]]
    x, lengths = pad(src), torch.tensor([6, 2])
    for i, hyps in enumerate(beam_search(model.eval(), x, lengths, 4, 1.5, 4, length_norm=False, n_best=4)):
        for h in hyps:
            y = torch.tensor([[0, *h.tokens[:-1]]])
            with torch.no_grad():
                logp = torch.log_softmax(model(x[i : i + 1, : lengths[i]], lengths[i : i + 1], y), -1)[0]
            assert h.score == pytest.approx(float(logp.gather(1, torch.tensor(h.tokens)[:, None]).sum()), abs=1e-4)


def toy(out: str, width: int, decode: DecodeConfig) -> None:
    """The toy stage: writes the setting it was given and the beam of the decode section it was given."""
    Path(out).write_text(f"{width} {decode.beam}\n")


def test_a_stage_is_one_record_and_a_setting_reaches_it_by_one_route(monkeypatch, tmp_path):
    """A record (and no other code) makes `rnnsearch toy`; a new key of params.yaml (in the file and the schema)
    reaches the function through the record's settings, and so does a section, typed."""
    record = Stage("toy", "a toy stage", "tests.test_contributing:toy", (arg("--out", required=True, help="out"),),
                   settings={"width": "decode.toy_width", "decode": "decode"})
    monkeypatch.setattr(commands, "STAGES", (*commands.STAGES, record))
    monkeypatch.setitem(commands.BY_NAME, "toy", record)
    monkeypatch.setattr(cli, "STAGES", commands.STAGES)
    schema = yaml.safe_load(cfg.SCHEMA_PATH.read_text())
    schema["properties"]["decode"]["properties"]["toy_width"] = {"type": "integer", "minimum": 1}
    (tmp_path / "schema.yaml").write_text(yaml.safe_dump(schema))
    monkeypatch.setattr(cfg, "SCHEMA_PATH", tmp_path / "schema.yaml")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["decode"].update(toy_width=3, beam=5)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert cli.main(["toy", "--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out").read_text() == "3 5\n"
    assert commands.BY_NAME["toy"].keys_for() == ["decode.toy_width", "decode"]  # what reruns its jobs


def toy_corpus(data: dict, seed: int, fetched: str | None, out_dir: str) -> None:
    for split in ("train", "dev", "test"):
        for lang, word in ((data["src"], "house"), (data["tgt"], "maison")):
            Path(out_dir, f"{split}.{lang}").write_text(f"{word} {data['toy']['n']}\n" * data["toy"]["n"])


TOY = Source("toy", toy_corpus, section("a toy source: n lines of one word", n={"type": "integer", "minimum": 1}),
             check=lambda data: TOY.pair_check(data, ("en", "fr"), "has English and French only"))


def test_a_data_source_is_one_record(monkeypatch, tmp_path):
    """Registered in rnnsearch.data.corpus.SOURCES only: the configuration takes its section (needed only when it
    is chosen) and its checks, and stage 1 writes its text."""
    monkeypatch.setitem(corpus.SOURCES, "toy", TOY)
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    for other in ("synthetic", "multi30k", "wmt14"):  # the other sources' sections are not needed
        base["data"].pop(other)
    base["aer"]["gold"] = "none"
    chosen = cfg.merge(base, {"data": {"source": "toy", "toy": {"n": 2}}})
    cfg.validate(chosen)
    with pytest.raises(cfg.ConfigError, match=r"'data.toy': data.source is 'toy' but no data.toy is given \(n\)"):
        cfg.validate(cfg.merge(base, {"data": {"source": "toy"}}))
    with pytest.raises(cfg.ConfigError, match=r"data.source toy has English and French only, got de-fr"):
        cfg.validate(cfg.merge(chosen, {"data": {"src": "de"}}))
    with pytest.raises(cfg.ConfigError, match=r"'data.toy.n': 0 is less than the minimum of 1"):
        cfg.validate(cfg.merge(chosen, {"data": {"toy": {"n": 0}}}))
    corpus.run_corpus(chosen["data"], 1, str(tmp_path))
    assert (tmp_path / "test.fr").read_text() == "maison 2\nmaison 2\n"
