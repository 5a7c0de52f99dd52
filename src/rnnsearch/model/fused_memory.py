"""The alignment model's memory inside the fused deep-output recurrence (model/fused.py), for any additive variant
with memory: location-aware attention and the three coverage models, or a user's own.

Such a variant adds one term to the paper's tanh and carries a state m (B, Tx, d) from one decoder step to the
next (rnnsearch.model.attention):
    e_ij = v_aᵀ tanh(W_a s_{i−1} + U_a h_j + M_ij),   M_i = `memory_term`(m_{i−1})    (B, Tx, n')
    m_i  = `advance`(m_{i−1}, α_i, s_{i−1}, keys)                                       (B, Tx, d)
The recurrence computes the paper's part by hand, as for the additive model, and this module the variant's own
part through its own two functions, so that a new variant needs no backward pass of its own: forward, each
step's m_{i−1} is kept (d values per source word: 1 to 10); backward, each step's two functions run again on
that state under autograd (`torch.autograd.grad` on a graph of a few operations), from
    ∂L/∂m_i (the next step's) → ∂L/∂α_i, ∂L/∂s_{i−1}, ∂L/∂m_{i−1}, ∂L/∂keys, the variant's weights
    ∂L/∂M_i = ∂L/∂p_i ∘ … (the tanh's input, which the hand-written attention backward computes)
and ∂L/∂α_i joins the softmax's backward pass of the same step. The weights' gradients are summed over the steps
here and returned by the recurrence as those of its inputs (no .grad is touched inside a backward pass).

The four variants of rnnsearch.model.attention have their own hand-written passes here (`memory_path` picks
one by the variant's exact class), so that at the embedded corpus's sizes, where a step's products are small and
each autograd call costs more than they do, a step adds a few products and no graph:
    location   M_i = W_win(α_{i−1}) (U_f F)ᵀ: the width-r windows of α_{i−1} times the r × n' product of the
               two weights (one product for the convolution and U_f); ∂L/∂α_{i−1} folds the windows back
    coverage   M_i = C_{i−1} V_aᵀ; linguistic C_i = C_{i−1} + α_i, with fertility + α_i / Φ_j, neural the GRU of
               the GRU step of the paper's decoder (model/gru.py) over the B·Tx source words
A variant of a user's takes the generic path (`MemoryPath`), which needs only its two functions.

Under autocast the variant's products run in the recurrence's product dtype (bf16), its sums in float32.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from rnnsearch.model.attention import FertilityCoverage, LinguisticCoverage, LocationAttention, NeuralCoverage
from rnnsearch.model.gru import gru, gru_backward
from rnnsearch.model.products import mm


class MemoryPath:
    """One batch's memory: the variant `attention`, its `keys` (B, Tx, ·), m_0 and the products' dtype `lp`."""

    def __init__(self, attention, keys: torch.Tensor, m0: torch.Tensor, params: list[torch.Tensor],
                 lp: torch.dtype):
        self.attention, self.keys, self.params, self.lp = attention, keys, params, lp
        self.states = [m0.to(keys.dtype)]  # m_{i−1} of each step i
        self.cast = dict(device_type=keys.device.type, dtype=lp, enabled=lp != keys.dtype)
        self.n_align = attention.W_a.weight.size(0)
        self.extra = keys[..., self.n_align:]  # what `precompute` keeps beside U_a h_j (Φ, W^h h_j)

    # ------------------------------------------------------------------------------- forward
    def term(self, i: int) -> torch.Tensor:
        """M_i (B, Tx, n') from m_{i−1}."""
        with torch.autocast(**self.cast):
            return self.attention.memory_term(self.states[i], self.keys).to(self.keys.dtype)

    def advance(self, alpha: torch.Tensor, s_prev: torch.Tensor) -> None:
        """m_i from m_{i−1}, α_i (B, Tx) and s_{i−1} (B, n)."""
        with torch.autocast(**self.cast):
            m = self.attention.advance(self.states[-1], alpha, s_prev, self.keys)
        self.states.append(m.to(self.keys.dtype))

    # ------------------------------------------------------------------------------- backward
    def start_backward(self) -> torch.Tensor:
        """Zero sums for a backward pass (each pass its own: a second one gives the same gradients); returns
        ∂L/∂keys, which the recurrence's own attention backward adds into too."""
        self.dm = None  # ∂L/∂m_i from the step after i
        self.dkeys, self.dparams = torch.zeros_like(self.keys), [None] * len(self.params)  # None: a weight not read
        return self.dkeys

    def _grad(self, function, inputs: list[torch.Tensor], dout: torch.Tensor) -> list[torch.Tensor | None]:
        """∂L/∂inputs of `function`(*inputs) (keys and the weights last) given ∂L/∂out; adds into dkeys and the
        weights' gradients and returns those of the other inputs."""
        leaves = [x.detach().requires_grad_() for x in inputs] + [self.keys.detach().requires_grad_()]
        with torch.enable_grad(), torch.autocast(**self.cast):
            out = function(*leaves)
        grads = torch.autograd.grad(out, leaves + self.params, dout.to(out.dtype), allow_unused=True)
        if grads[len(inputs)] is not None:
            self.dkeys.add_(grads[len(inputs)])
        for k, g in enumerate(grads[len(inputs) + 1:]):
            if g is not None:
                self.dparams[k] = g if self.dparams[k] is None else self.dparams[k].add_(g)
        return list(grads[: len(inputs)])

    def advance_backward(self, i: int, alpha: torch.Tensor, s_prev: torch.Tensor):
        """Step i's advance, backwards from ∂L/∂m_i: returns ∂L/∂α_i and ∂L/∂s_{i−1} (None where m_i is not
        read: the last step, or a part the variant does not read) and keeps ∂L/∂m_{i−1} (so far)."""
        if self.dm is None:
            return None, None
        dm, dalpha, ds = self._grad(lambda m, a, s, k: self.attention.advance(m, a, s, k),
                                    [self.states[i], alpha, s_prev], self.dm)
        self.dm = dm
        return dalpha, ds

    def term_backward(self, i: int, dM: torch.Tensor) -> None:
        """Step i's M_i backwards from ∂L/∂M_i (B, Tx, n'): adds into ∂L/∂m_{i−1}."""
        (dm,) = self._grad(lambda m, k: self.attention.memory_term(m, k), [self.states[i]], dM)
        if dm is not None:
            self._add_dm(dm)

    def _add_dm(self, dm: torch.Tensor) -> None:
        """Adds a part of ∂L/∂m_{i−1}."""
        self.dm = dm if self.dm is None else self.dm + dm

    def m0_grad(self) -> torch.Tensor:
        return self.dm if self.dm is not None else torch.zeros_like(self.states[0])

    def weight_grads(self) -> list[torch.Tensor | None]:
        """The variant's weights' gradients, in the order of `params` (None: not read)."""
        return self.dparams


class _HandWritten(MemoryPath):
    """A built-in variant's own passes: its weights by name (`w`, and through `_lw` in the products' dtype),
    their gradients summed in `grad`."""

    def __init__(self, attention, keys, m0, params, lp):
        super().__init__(attention, keys, m0, params, lp)
        names = {id(p): name.removesuffix(".weight") for name, p in attention.named_parameters()}
        self.names = [names[id(p)] for p in params]
        self.w = dict(zip(self.names, params))
        self.lw = {}  # the weights the passes read, cast once per batch (not U_a and the keys' others)

    def _lw(self, name: str) -> torch.Tensor:
        if name not in self.lw:
            self.lw[name] = self.w[name].to(self.lp)
        return self.lw[name]

    def start_backward(self) -> torch.Tensor:
        self.grad = {}
        return super().start_backward()

    def _add(self, name: str, g: torch.Tensor) -> None:
        self.grad[name] = g if name not in self.grad else self.grad[name].add_(g)

    def _add_product(self, name: str, dY: torch.Tensor, X: torch.Tensor) -> None:
        """Adds dYᵀ X (a weight's gradient from its output's gradient dY (N, out) and its input X (N, in)), as
        (Xᵀ dY)ᵀ: with out ≫ in, 3 times faster on a CPU than the product with the transposed dY first."""
        self._add(name, mm(X.t(), dY, self.lp).t())

    def weight_grads(self):
        return [self.grad.get(name) for name in self.names]


class _Location(_HandWritten):
    """State α_{i−1} (B, Tx, 1); M_i = W_win(α_{i−1}) Gᵀ, G = U_f F (n', r)."""

    def __init__(self, attention, keys, m0, params, lp):
        super().__init__(attention, keys, m0, params, lp)
        self.r = self.w["F"].size(2)
        self.Fm = self.w["F"].view(-1, self.r)  # (k, r)
        self.G = (self.w["U_f"] @ self.Fm).to(lp)  # (n', r)

    def _windows(self, i: int) -> torch.Tensor:
        """(B·Tx, r): the r words around each word j of α_{i−1} (0 past the ends)."""
        return F.pad(self.states[i][..., 0], (self.r // 2, self.r // 2)).unfold(1, self.r, 1).reshape(-1, self.r)

    def term(self, i):
        return mm(self._windows(i), self.G.t(), self.lp).view(*self.states[i].shape[:2], -1)

    def advance(self, alpha, s_prev):
        self.states.append(alpha.unsqueeze(2))

    def advance_backward(self, i, alpha, s_prev):
        dm, self.dm = self.dm, None  # α_i is all of m_i; m_{i−1} is not read
        return (dm[..., 0], None) if dm is not None else (None, None)

    def term_backward(self, i, dM):
        B, Tx, _ = dM.shape
        r, dM = self.r, dM.flatten(0, 1)
        self._add_product("G", dM, self._windows(i))  # (n', r)
        # window t of word j read α_{j + t − r//2}: ∂L/∂α_j = Σ_t dwin[j − t + r//2, t], the anti-diagonals of
        # dwin padded by r//2 rows each side, t flipped: Σ_t' Q[j + t', t'], a strided view of Q
        Q = F.pad(mm(dM, self.G, self.lp).view(B, Tx, r), (0, 0, r // 2, r // 2)).flip(2)  # (B, Tx + r − 1, r)
        self._add_dm(Q.as_strided((B, Tx, r), (Q.stride(0), r, r + 1)).sum(2, keepdim=True))

    def weight_grads(self):
        dG = self.grad.get("G")
        if dG is None:
            return [None] * len(self.names)
        grads = {"U_f": mm(dG, self.Fm.t(), self.lp), "F": mm(self.w["U_f"].t(), dG, self.lp).view_as(self.w["F"])}
        return [grads.get(name) for name in self.names]


class _Coverage(_HandWritten):
    """State C_{i−1} (B, Tx, d); M_i = C_{i−1} V_aᵀ; C_i = C_{i−1} + α_i (linguistic)."""

    def term(self, i):
        C = self.states[i]
        return mm(C.flatten(0, 1), self._lw("V_a").t(), self.lp).view(*C.shape[:2], -1)

    def term_backward(self, i, dM):
        C = self.states[i]
        dM = dM.flatten(0, 1)
        self._add_product("V_a", dM, C.flatten(0, 1))
        self._add_dm(mm(dM, self._lw("V_a"), self.lp).view_as(C))

    def advance(self, alpha, s_prev):
        self.states.append(self.states[-1] + alpha.unsqueeze(2))

    def advance_backward(self, i, alpha, s_prev):  # ∂L/∂C_{i−1} = ∂L/∂C_i, ∂L/∂α_i = ∂L/∂C_i
        return (self.dm[..., 0], None) if self.dm is not None else (None, None)


class _Fertility(_Coverage):
    """C_i = C_{i−1} + α_i / Φ_j, Φ (B, Tx, 1) in the keys."""

    def advance(self, alpha, s_prev):
        self.states.append(self.states[-1] + alpha.unsqueeze(2) / self.extra)

    def advance_backward(self, i, alpha, s_prev):
        if self.dm is None:
            return None, None
        self.dkeys[..., self.n_align:] -= self.dm * alpha.unsqueeze(2) / self.extra**2  # ∂/∂Φ of α/Φ
        return (self.dm / self.extra)[..., 0], None


class _Neural(_Coverage):
    """C_i = GRU(C_{i−1}; x), x = W^h h_j (in the keys) + W^s s_{i−1} + w^α α_ij (B, Tx, 3d), over B·Tx rows."""

    def __init__(self, attention, keys, m0, params, lp):
        super().__init__(attention, keys, m0, params, lp)
        self.gates = []  # [z; r], r ∘ C, C̃ of each step

    def advance(self, alpha, s_prev):
        C = self.states[-1]
        B, Tx, d = C.shape
        W_s_s = mm(s_prev, self._lw("W_s").t(), self.lp).unsqueeze(1)  # (B, 1, 3d)
        x = self.extra + W_s_s + alpha.unsqueeze(2) * self.w["w_alpha"]
        ZR, RS, St, nxt = C.new_empty(B * Tx, 2 * d), C.new_empty(B * Tx, d), C.new_empty(B * Tx, d), torch.empty_like(C)
        gru(x.flatten(0, 1), C.flatten(0, 1), self._lw("U_zr"), self._lw("U"), ZR, RS, St, nxt.view(-1, d))
        self.gates.append((ZR, RS, St))
        self.states.append(nxt)

    def advance_backward(self, i, alpha, s_prev):
        if self.dm is None:
            return None, None
        C = self.states[i]
        B, Tx, d = C.shape
        ZR, RS, St = self.gates[i]
        dx = C.new_empty(B * Tx, 3 * d)
        self.dm = gru_backward(self.dm.flatten(0, 1), C.flatten(0, 1), ZR, St, self._lw("U_zr"), self._lw("U"),
                                dx).view(B, Tx, d)
        self._add_product("U_zr", dx[:, d:], C.flatten(0, 1))
        self._add_product("U", dx[:, :d], RS)
        dx = dx.view(B, Tx, 3 * d)
        self.dkeys[..., self.n_align:] += dx
        dxs = dx.sum(1)  # (B, 3d): W^s s_{i−1} is the same for every source word
        self._add_product("W_s", dxs, s_prev)
        self._add("w_alpha", (dx * alpha.unsqueeze(2)).sum((0, 1)))
        return dx @ self.w["w_alpha"], mm(dxs, self._lw("W_s"), self.lp)


HAND_WRITTEN = {LocationAttention: _Location, LinguisticCoverage: _Coverage, FertilityCoverage: _Fertility,
                NeuralCoverage: _Neural}


def memory_path(attention, keys, m0, params, lp) -> MemoryPath:
    """The hand-written passes of a built-in variant (its exact class: a subclass may change its equations),
    else the generic one."""
    return HAND_WRITTEN.get(type(attention), MemoryPath)(attention, keys, m0, params, lp)
