"""Alignment models: the paper's additive one (§3.1, App. A.1.2), the two scores of its ablations, and its
successors' alignment models with memory (location-aware, coverage).

Every alignment model scores each source annotation h_j against a query q (the paper: q = s_{i−1}), then
    α_ij = exp(e_ij) / Σ_k exp(e_ik)                  (softmax over the real source words only)
    c_i  = Σ_j α_ij h_j                               (expected annotation, the context vector)
The scores:
    additive (the paper)    e_ij = v_aᵀ tanh(W_a q + U_a h_j)
    multiplicative          e_ij = qᵀ W_a h_j          (Luong et al. 2015 "general"; Luong et al.'s W_attProj)
    dot                     e_ij = qᵀ h_j              (needs q and h_j of the same size)
    location                e_ij = v_aᵀ tanh(W_a q + U_a h_j + U_f f_ij), f_i = F * α_{i−1}   (Chorowski et al.)
    coverage                e_ij = v_aᵀ tanh(W_a q + U_a h_j + V_a C_{i−1,j})                 (Tu et al. 2016)
The part that depends on h_j only (U_a h_j, W_a h_j, h_j) is computed once per batch (`precompute`) and
reused at every decoder step.

**Memory.** An alignment model with memory carries a state from one decoder step to the next: `state_size` = d
values per source position (B, Tx, d), `initial` gives it before the first step, `advance` the next one from α_i.
The decoders carry it at the end of their one state tensor (flattened, `Attention.join`), so that beam search
reorders it with the decoder's state by beam index and drops it with a finished sentence's rows, and
teacher forcing, greedy search and forced alignment carry it, without knowing the variant.

A variant is a subclass of `Attention` in `VARIANTS` (and its name in rnnsearch.model.presets.ATTENTIONS, which
the configuration is checked against without importing torch): its scores, its state if it has one, the
initialisation of its weights (App. B.1) and its FLOPs. The fused recurrences (model/fused.py) serve the additive
score (`fused = True`), and on the CPU an additive variant with memory that writes its energies' extra term as
`memory_term` (model/fused_memory.py: no backward pass to write); a model with another variant trains through
plain autograd.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rnnsearch.model.equations import additive_energies, align, gru_step
from rnnsearch.model.presets import ATTENTIONS


class Attention(nn.Module):
    """An alignment model: `precompute(h)` (the part of e_ij that depends on h_j only, once per batch) and
    `energies(q, keys, state)` → e (B, Tx); `forward` turns them into c_i and α_i, and the next state. A variant
    with memory sets `state_size` and defines `advance`. `init_weight` starts its weights (App. B.1), `flops`
    counts its matrix products (rnnsearch.bench.flops)."""

    fused = False  # model/fused.py's hand-written recurrences serve this variant
    state_size = 0  # d, the values per source position carried from one decoder step to the next (0: none)

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def energies(self, q: torch.Tensor, keys: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def initial(self, keys: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The state before the first decoder step, (B, Tx, d): zeros (no alignment yet, no coverage)."""
        return keys.new_zeros(*mask.shape, self.state_size)

    def advance(self, state: torch.Tensor, alpha: torch.Tensor, q: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """The state after step i from the state before it, α_i (B, Tx) and the step's query q (B, ·)."""
        raise NotImplementedError

    def memory_term(self, state: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """An additive variant with memory: M_ij, what its state adds to U_a h_j inside the tanh (B, Tx, n')."""
        raise NotImplementedError

    def forward(self, q: torch.Tensor, h: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor,
                state: torch.Tensor | None = None):
        """q (B, n), h (B, Tx, ctx), keys (B, Tx, ·), mask (B, Tx) True on real words, state (B, Tx, d) or None
        → c (B, ctx), α (B, Tx), the next state (None without memory)."""
        c, alpha = align(self.energies(q, keys, state), h, ~mask)
        return c, alpha, (self.advance(state, alpha, q, keys) if self.state_size else None)

    def split(self, state: torch.Tensor, rnn_size: int, Tx: int):
        """A decoder's state tensor (B, rnn_size + Tx·d) → its recurrent part (B, rnn_size), the alignment model's
        state (B, Tx, d) (None without memory)."""
        if not self.state_size:
            return state, None
        rnn, mine = state.split([rnn_size, Tx * self.state_size], dim=1)
        return rnn, mine.unflatten(1, (Tx, self.state_size))

    @staticmethod
    def join(rnn: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        """`split`'s inverse: the decoder's one state tensor, the alignment model's state flattened at its end."""
        return rnn if state is None else torch.cat([rnn, state.flatten(1)], dim=1)

    def init_weight(self, name: str, weight: torch.Tensor) -> None:
        """App. B.1: the alignment model's matrices ~ N(0, 0.001²)."""
        nn.init.normal_(weight, 0.0, 0.001)

    @classmethod
    def flops(cls, ctx: int, n: int, n_align: int, S: int, cfg: dict | None = None) -> tuple[int, int]:
        """Matrix-product FLOPs (2 per multiply-add) for S source positions of annotations of size ctx: those of
        `precompute`, and those of one decoder step (`cfg`: the model's settings, for a variant's own sizes)."""
        raise NotImplementedError


class AdditiveAttention(Attention):
    """e_ij = v_aᵀ tanh(W_a s_{i−1} + U_a h_j), App. A.1.2 (n' = n_align hidden units)."""

    fused = True

    def __init__(self, n: int, ctx_dim: int, n_align: int, cfg: dict | None = None):
        super().__init__()
        self.W_a = nn.Linear(n, n_align, bias=False)
        self.U_a = nn.Linear(ctx_dim, n_align, bias=False)
        self.v_a = nn.Linear(n_align, 1, bias=False)

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return self.U_a(h)  # (B, Tx, n')

    def energies(self, s_prev: torch.Tensor, U_a_h: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """s_prev (B, n), U_a_h (B, Tx, n') → e (B, Tx)."""
        return additive_energies(self.W_a(s_prev), U_a_h, lambda p: self.v_a(p).squeeze(2))[1]

    def init_weight(self, name: str, weight: torch.Tensor) -> None:
        """App. B.1: W_a and U_a ~ N(0, 0.001²), v_a = 0."""
        nn.init.zeros_(weight) if name == "v_a.weight" else nn.init.normal_(weight, 0.0, 0.001)

    @classmethod
    def flops(cls, ctx, n, n_align, S, cfg=None):
        return S * 2 * ctx * n_align, 2 * n * n_align + 2 * S * n_align + 2 * S * ctx  # W_a s, v_a, c = Σ α h


class MultiplicativeAttention(Attention):
    """e_ij = qᵀ W_a h_j (bilinear); W_a h_j is precomputed, so a step costs one batched matrix-vector product."""

    def __init__(self, n: int, ctx_dim: int, n_align: int = 0, cfg: dict | None = None):
        super().__init__()
        self.W_a = nn.Linear(ctx_dim, n, bias=False)

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return self.W_a(h)  # (B, Tx, n)

    def energies(self, q, W_a_h, state=None):
        return torch.bmm(W_a_h, q.unsqueeze(2)).squeeze(2)  # (B, Tx)

    @classmethod
    def flops(cls, ctx, n, n_align, S, cfg=None):
        return S * 2 * ctx * n, 2 * S * n + 2 * S * ctx


class DotAttention(Attention):
    """e_ij = qᵀ h_j, no parameters (q and h_j of the same size: rnnsearch.model.presets.check)."""

    def __init__(self, n: int = 0, ctx_dim: int = 0, n_align: int = 0, cfg: dict | None = None):
        super().__init__()

    def precompute(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def energies(self, q, keys, state=None):
        return torch.bmm(keys, q.unsqueeze(2)).squeeze(2)

    @classmethod
    def flops(cls, ctx, n, n_align, S, cfg=None):
        return 0, 4 * S * ctx


class LocationAttention(AdditiveAttention):
    """Location-aware attention (Chorowski et al. 2015, "Attention-Based Models for Speech Recognition", eqs. 8–9):
        f_i  = F * α_{i−1}                                  k filters of width r over source positions
        e_ij = v_aᵀ tanh(W_a s_{i−1} + U_a h_j + U_f f_ij)
    with α_0 = 0 (the first step scores as the paper's model). State: α_{i−1} (B, Tx, 1). `location_filters` (k,
    10 as Chorowski et al.) and `location_width` (r, odd; 5: a word and two neighbours each side, where a
    translation's next source word mostly lies, as their 201 frames span a few phonemes of speech)."""

    state_size = 1

    def __init__(self, n: int, ctx_dim: int, n_align: int, cfg: dict | None = None):
        super().__init__(n, ctx_dim, n_align)
        k, r = (cfg or {}).get("location_filters", 10), (cfg or {}).get("location_width", 5)
        self.F = nn.Conv1d(1, k, r, padding=r // 2, bias=False)
        self.U_f = nn.Linear(k, n_align, bias=False)

    def memory_term(self, state, keys):
        f = self.F(state.transpose(1, 2)).transpose(1, 2)  # (B, Tx, k) from α_{i−1} (B, Tx, 1)
        return self.U_f(f)  # (B, Tx, n')

    def energies(self, s_prev, U_a_h, state):
        return additive_energies(self.W_a(s_prev), U_a_h + self.memory_term(state, U_a_h),
                                 lambda p: self.v_a(p).squeeze(2))[1]

    def advance(self, state, alpha, q, keys):
        return alpha.unsqueeze(2)  # α_i, the next step's α_{i−1}

    @classmethod
    def flops(cls, ctx, n, n_align, S, cfg=None):
        keys, step = AdditiveAttention.flops(ctx, n, n_align, S)
        k, r = (cfg or {}).get("location_filters", 10), (cfg or {}).get("location_width", 5)
        return keys, step + 2 * S * k * r + 2 * S * k * n_align  # F * α, U_f f


class CoverageAttention(AdditiveAttention):
    """Coverage (Tu et al. 2016, "Modeling Coverage for Neural Machine Translation", §3): the paper's additive model
    reading a coverage vector C_{i−1,j} (d values per source word, C_{0,j} = 0) accumulated from past alignments:
        e_ij = v_aᵀ tanh(W_a s_{i−1} + U_a h_j + V_a C_{i−1,j})
    A subclass says how C_{i,j} follows (`advance`). State: C (B, Tx, d). V_a ~ N(0, 0.001²), as App. B.1 starts
    the alignment model's other matrices."""

    def __init__(self, n: int, ctx_dim: int, n_align: int, cfg: dict | None = None):
        super().__init__(n, ctx_dim, n_align)
        self.V_a = nn.Linear(self.state_size, n_align, bias=False)
        self.n_align = n_align

    def memory_term(self, state, keys):
        return self.V_a(state)  # (B, Tx, n') from C_{i−1} (B, Tx, d)

    def energies(self, s_prev, keys, state):
        U_a_h = keys[..., : self.n_align]
        return additive_energies(self.W_a(s_prev), U_a_h + self.memory_term(state, keys),
                                 lambda p: self.v_a(p).squeeze(2))[1]

    @classmethod
    def flops(cls, ctx, n, n_align, S, cfg=None):
        keys, step = AdditiveAttention.flops(ctx, n, n_align, S)
        return keys, step + 2 * S * cls.size(cfg) * n_align  # V_a C

    @staticmethod
    def size(cfg: dict | None) -> int:
        return 1


class LinguisticCoverage(CoverageAttention):
    """Tu et al. §3.1.1 without fertility (d = 1): C_{i,j} = C_{i−1,j} + α_ij, the attention word j has had."""

    state_size = 1

    def advance(self, state, alpha, q, keys):
        return state + alpha.unsqueeze(2)


class FertilityCoverage(LinguisticCoverage):
    """Tu et al. §3.1.1 with fertility: C_{i,j} = C_{i−1,j} + α_ij / Φ_j, Φ_j = N σ(U_f h_j), N = 2 (theirs): the
    share of its expected translations word j has had. Φ is computed once per batch, beside U_a h_j in the keys."""

    N = 2.0

    def __init__(self, n: int, ctx_dim: int, n_align: int, cfg: dict | None = None):
        super().__init__(n, ctx_dim, n_align)
        self.U_f = nn.Linear(ctx_dim, 1, bias=False)

    def precompute(self, h):
        return torch.cat([self.U_a(h), self.N * torch.sigmoid(self.U_f(h))], dim=2)  # (B, Tx, n' + 1): [U_a h | Φ]

    def advance(self, state, alpha, q, keys):
        return state + alpha.unsqueeze(2) / keys[..., self.n_align :]

    @classmethod
    def flops(cls, ctx, n, n_align, S, cfg=None):
        keys, step = super().flops(ctx, n, n_align, S, cfg)
        return keys + 2 * S * ctx, step  # U_f h


class NeuralCoverage(CoverageAttention):
    """Tu et al. §3.1.2: C_{i,j} = GRU(C_{i−1,j}; α_ij, s_{i−1}, h_j), a GRU of `coverage_size` units (d, 10 as
    theirs) per source word, in the paper's form (`equations.gru_step`):
        [z; r] = σ(W_zr^α α_ij + W_zr^s s_{i−1} + W_zr^h h_j + U_zr C_{i−1,j}),  C̃ = tanh(… + U (r ∘ C_{i−1,j}))
        C_{i,j} = (1 − z) ∘ C_{i−1,j} + z ∘ C̃
    W^h h_j is computed once per batch, beside U_a h_j in the keys. Initialised as App. B.1 starts the paper's
    GRUs: U_zr and U orthogonal (gate by gate), biases 0, the input matrices N(0, 0.001²) as the alignment
    model's."""

    def __init__(self, n: int, ctx_dim: int, n_align: int, cfg: dict | None = None):
        self.state_size = d = self.size(cfg)
        super().__init__(n, ctx_dim, n_align)
        self.W_h = nn.Linear(ctx_dim, 3 * d)  # [W; W_z; W_r] h_j, with the biases
        self.W_s = nn.Linear(n, 3 * d, bias=False)
        self.w_alpha = nn.Parameter(torch.empty(3 * d))
        self.U_zr = nn.Linear(d, 2 * d, bias=False)
        self.U = nn.Linear(d, d, bias=False)

    @staticmethod
    def size(cfg):
        return (cfg or {}).get("coverage_size", 10)

    def precompute(self, h):
        return torch.cat([self.U_a(h), self.W_h(h)], dim=2)  # (B, Tx, n' + 3d)

    def advance(self, state, alpha, q, keys):
        B, Tx, d = state.shape
        x = keys[..., self.n_align :] + self.W_s(q).unsqueeze(1) + alpha.unsqueeze(2) * self.w_alpha  # (B, Tx, 3d)
        x_h, x_zr = x.flatten(0, 1).split([d, 2 * d], dim=1)
        return gru_step(state.flatten(0, 1), lambda c: x_zr + self.U_zr(c), lambda rc: x_h + self.U(rc))[0].view(B, Tx, d)

    def init_weight(self, name, weight):
        if name in ("U_zr.weight", "U.weight"):
            for block in weight.data.chunk(weight.size(0) // weight.size(1), 0):
                nn.init.orthogonal_(block)
        else:
            super().init_weight(name, weight)

    @classmethod
    def flops(cls, ctx, n, n_align, S, cfg=None):
        keys, step = super().flops(ctx, n, n_align, S, cfg)
        d = cls.size(cfg)
        return keys + 2 * S * ctx * 3 * d, step + 2 * n * 3 * d + 2 * S * d * 3 * d  # W^h h; W^s s, U_zr C, U rC


VARIANTS: dict[str, type[Attention]] = {"additive": AdditiveAttention, "multiplicative": MultiplicativeAttention,
                                        "dot": DotAttention, "location": LocationAttention}
COVERAGE: dict[str, type[CoverageAttention]] = {"linguistic": LinguisticCoverage, "fertility": FertilityCoverage,
                                                "neural": NeuralCoverage}  # the additive model's `coverage` switch


def variant(cfg: dict) -> type[Attention]:
    """The class of a model's alignment model: `attention`, or for the additive one its `coverage` switch."""
    coverage = cfg.get("coverage", "none")
    return COVERAGE[coverage] if coverage != "none" else VARIANTS[cfg["attention"]]


def make_attention(kind: str, n: int, ctx_dim: int, n_align: int, cfg: dict | None = None) -> Attention | None:
    """The alignment model named by `kind` (None for "none": a fixed context, as in RNNencdec); `cfg`, the model's
    settings, chooses coverage and sizes a variant's own parts."""
    if kind == "none":
        return None
    if kind not in VARIANTS:
        raise ValueError(f"unknown attention {kind!r}: expected one of {', '.join(ATTENTIONS)}")
    if kind == "dot" and n != ctx_dim:
        raise ValueError(f"dot attention needs the query size ({n}) to equal the annotation size ({ctx_dim})")
    return variant({**(cfg or {}), "attention": kind})(n, ctx_dim, n_align, cfg)
