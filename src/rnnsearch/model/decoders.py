"""Decoders: the paper's (App. A.2.2) and the combined-output formulation of its ablations.

**The paper's decoder** (`DeepOutputDecoder`), bias terms omitted as in the paper:
    c_i = attention(s_{i−1}, h)                          (or the fixed c of RNNencdec)
    z_i = σ(W_z E y_{i−1} + U_z s_{i−1} + C_z c_i)
    r_i = σ(W_r E y_{i−1} + U_r s_{i−1} + C_r c_i)
    s̃_i = tanh(W E y_{i−1} + U [r_i ∘ s_{i−1}] + C c_i)
    s_i = (1 − z_i) ∘ s_{i−1} + z_i ∘ s̃_i
    t̃_i = U_o s_{i−1} + V_o E y_{i−1} + C_o c_i        (2l units)
    t_i = [max(t̃_{i,2j−1}, t̃_{i,2j})]_{j=1..l}          (maxout over pairs)
    p(y_i | y_{<i}, x) ∝ exp(y_iᵀ W_o t_i)

**Luong et al. (2015)'s formulation** (`CombinedOutputDecoder`; Luong et al. 2015 with input feeding): the state
is updated first and then queries the attention, and one tanh layer combines both:
    h_t = RNN([E y_{t−1} ; o_{t−1}], h_{t−1})            (input feeding; without it the input is E y_{t−1})
    a_t = attention(h_t, h)
    o_t = dropout(tanh(W_u [a_t ; h_t]))
    p(y_t | y_{<t}, x) = softmax(W_vocab o_t)

Either decoder runs a GRU (the paper's form, above) or an LSTM cell. The input projections of E y do not
depend on the previous step, so under teacher forcing they are computed for the whole target sequence at once.

The decoder state is one tensor, [s | LSTM memory cell | o_{t−1} | the alignment model's memory] (the parts the
configuration has; `Attention.split` and `Attention.join`), so that beam search reorders any decoder's state,
the alignment model's with it, with one index.
"""

from __future__ import annotations

import logging

import torch
from torch import nn
from torch.nn import functional as F

from rnnsearch.model.attention import Attention
from rnnsearch.model.equations import gru_step
from rnnsearch.model.fused import combined_output_recurrence, deep_output_recurrence

log = logging.getLogger("rnnsearch.model")


class ConditionalGRU(nn.Module):
    """The paper's GRU with context terms; the reset gate multiplies s_{i−1} before U (not after).

    `ctx_dim` is the size of the extra input c (0: none). State: s (B, n).
    """

    def __init__(self, m: int, n: int, ctx_dim: int):
        super().__init__()
        self.W = nn.Linear(m, 3 * n)  # [W; W_z; W_r] stacked, with the biases
        self.U_zr = nn.Linear(n, 2 * n, bias=False)  # [U_z; U_r]
        self.U = nn.Linear(n, n, bias=False)
        self.C = nn.Linear(ctx_dim, 3 * n, bias=False) if ctx_dim else None  # [C; C_z; C_r]
        self.n = n
        self.state_size = n

    def recurrent(self) -> list[torch.Tensor]:
        """The matrices applied to s_{i−1} (App. B.1 starts them orthogonal, gate by gate)."""
        return [self.U_zr.weight, self.U.weight]

    def init_state(self, s0: torch.Tensor, cell0: torch.Tensor | None = None) -> torch.Tensor:
        return s0

    def hidden(self, state: torch.Tensor) -> torch.Tensor:
        return state

    def forward(self, W_Ey: torch.Tensor, s_prev: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
        """W_Ey (B, 3n) = self.W(E y_{i−1}) precomputed, s_prev (B, n), c (B, ctx) → s_i (B, n)."""
        x = W_Ey + self.C(c) if self.C is not None else W_Ey
        # split/chunk rather than slicing: their backward concatenates instead of filling zeros per slice
        x_h, x_zr = x.split([self.n, 2 * self.n], dim=1)  # (B, n), (B, 2n) from y and c
        return gru_step(s_prev, lambda s: x_zr + self.U_zr(s), lambda rs: x_h + self.U(rs))[0]


class ConditionalLSTM(nn.Module):
    """The cell ablation: an LSTM whose gates also read c (W E y + U s + C c, four gates i, f, g, o).

    State: [s ; memory cell] (B, 2n).
    """

    def __init__(self, m: int, n: int, ctx_dim: int):
        super().__init__()
        self.W = nn.Linear(m, 4 * n)  # [W_i; W_f; W_g; W_o] with the biases
        self.U = nn.Linear(n, 4 * n, bias=False)
        self.C = nn.Linear(ctx_dim, 4 * n, bias=False) if ctx_dim else None
        self.n = n
        self.state_size = 2 * n

    def recurrent(self) -> list[torch.Tensor]:
        """The matrix applied to s_{t−1} (App. B.1 starts it orthogonal, gate by gate)."""
        return [self.U.weight]

    def init_state(self, s0: torch.Tensor, cell0: torch.Tensor | None = None) -> torch.Tensor:
        return torch.cat([s0, cell0 if cell0 is not None else torch.zeros_like(s0)], dim=1)

    def hidden(self, state: torch.Tensor) -> torch.Tensor:
        return state[:, : self.n]

    def forward(self, W_Ey: torch.Tensor, state: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
        s_prev, cell_prev = state.chunk(2, dim=1)  # (B, n) each
        gates = W_Ey + self.U(s_prev) + (self.C(c) if self.C is not None else 0)  # (B, 4n)
        i, f, g, o = gates.chunk(4, dim=1)
        cell = torch.sigmoid(f) * cell_prev + torch.sigmoid(i) * torch.tanh(g)
        return torch.cat([torch.sigmoid(o) * torch.tanh(cell), cell], dim=1)


CELLS = {"gru": ConditionalGRU, "lstm": ConditionalLSTM}

_SAID: set[str] = set()


def fused_serves(attention: Attention | None, memory: bool = True) -> bool:
    """Whether model/fused.py's recurrences serve this alignment model (none, or a variant with `fused`; one with
    memory if it writes `memory_term` and the recurrence takes `memory`); a variant they cannot serve takes the
    plain autograd path, said once in the log."""
    if attention is None:
        return True
    stateful = attention.state_size > 0
    if attention.fused and not stateful:
        return True
    if attention.fused and memory and type(attention).memory_term is not Attention.memory_term:
        return True
    if type(attention).__name__ not in _SAID:
        _SAID.add(type(attention).__name__)
        why = "the additive score only" if not attention.fused else (
            "an alignment model with memory only where it writes memory_term" if memory else
            "alignment models with memory in the paper's decoder only")
        log.info("%s: the fused recurrences serve %s; this model's GRU decoder trains through plain autograd",
                 type(attention).__name__, why)
    return False


def aligned_linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """layer(x); in training on a GPU with the weight's rows and columns padded with zeros to multiples of 8 (x's
    last dimension too): cuBLAS then runs its aligned tensor-core kernels for the output layer's products over all
    positions, where the shortlist's K = 30,003 rows and l = 500 inputs run its slower unaligned ones. The same
    logits, the padding sliced off, for a copy of the weight per update (not per decoding step: not in search)."""
    rows, cols = layer.weight.shape
    pad_rows, pad_cols = -rows % 8, -cols % 8
    if not (x.is_cuda and torch.is_grad_enabled()) or not (pad_rows or pad_cols):
        return layer(x)
    weight = F.pad(layer.weight, (0, pad_cols, 0, pad_rows))
    bias = F.pad(layer.bias, (0, pad_rows)) if layer.bias is not None else None
    return F.linear(F.pad(x, (0, pad_cols)), weight, bias)[..., :rows]


class DeepOutput(nn.Module):
    """t̃ = U_o s_{i−1} + V_o E y_{i−1} + C_o c_i, maxout over pairs, then W_o (logits over the shortlist).

    `dropout` (0 in the paper) applies to t_i, the input of W_o.
    """

    def __init__(self, vocab_size: int, m: int, n: int, ctx_dim: int, l: int, dropout: float = 0.0):
        super().__init__()
        self.U_o = nn.Linear(n, 2 * l)  # carries the bias of t̃
        self.V_o = nn.Linear(m, 2 * l, bias=False)
        self.C_o = nn.Linear(ctx_dim, 2 * l, bias=False)
        self.W_o = nn.Linear(l, vocab_size)
        self.dropout = nn.Dropout(dropout)
        self.l = l

    def forward(self, s_prev: torch.Tensor, V_o_Ey: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Any leading shape (…): s_prev (…, n), V_o_Ey (…, 2l) precomputed, c (…, ctx) → logits (…, K)."""
        t_tilde = self.U_o(s_prev) + V_o_Ey + self.C_o(c)  # (…, 2l)
        t = t_tilde.unflatten(-1, (self.l, 2)).amax(-1)  # (…, l)
        return aligned_linear(self.dropout(t), self.W_o)


def _context(attention, query: torch.Tensor, memory, mine: torch.Tensor | None = None):
    """c_i, α_i and the alignment model's next state from the alignment model and its state `mine`, or the fixed c
    (RNNencdec: α and the state are None)."""
    if attention is None:
        return memory.c, None, None
    return attention(query, memory.h, memory.keys, memory.mask, mine)


def _split(attention, state: torch.Tensor, rnn_size: int, memory):
    """A decoder's state → its recurrent part and the alignment model's state (None where it carries none)."""
    return (state, None) if attention is None else attention.split(state, rnn_size, memory.mask.size(1))


def _has_memory(attention) -> bool:
    return attention is not None and attention.state_size > 0


def _join(attention, rnn: torch.Tensor, mine: torch.Tensor | None) -> torch.Tensor:
    return rnn if attention is None else attention.join(rnn, mine)


class DeepOutputDecoder(nn.Module):
    """App. A.2.2: attention queried with s_{i−1}, the state updated with c_i, the deep maxout output."""

    def __init__(self, vocab_size: int, m: int, n: int, ctx_dim: int, l: int, attention: nn.Module | None,
                 cell: str = "gru", dropout: float = 0.0):
        super().__init__()
        self.attention = attention
        self.cell = CELLS[cell](m, n, ctx_dim)
        self.output = DeepOutput(vocab_size, m, n, ctx_dim, l, dropout)
        # training runs the recurrence with its hand-written backward where one exists (False: plain autograd)
        self.fused = cell == "gru" and fused_serves(attention)
        self.rnn_size = self.cell.state_size

    def init_state(self, s0: torch.Tensor, cell0: torch.Tensor | None = None) -> torch.Tensor:
        return self.cell.init_state(s0, cell0)

    def context(self, state: torch.Tensor, memory):
        rnn, mine = _split(self.attention, state, self.rnn_size, memory)
        return _context(self.attention, self.cell.hidden(rnn), memory, mine)

    def step(self, Ey: torch.Tensor, state: torch.Tensor, memory):
        """Ey (B, m) = E y_{i−1}, state (B, ·) → logits (B, K) of p(y_i), the next state, α_i (B, Tx) or None."""
        rnn, mine = _split(self.attention, state, self.rnn_size, memory)
        s_prev = self.cell.hidden(rnn)  # (B, n)
        c, alpha, mine = _context(self.attention, s_prev, memory, mine)
        logits = self.output(s_prev, self.output.V_o(Ey), c)
        return logits, _join(self.attention, self.cell(self.cell.W(Ey), rnn, c), mine), alpha

    def forward(self, Ey: torch.Tensor, memory, alphas: list | None = None) -> torch.Tensor:
        """Teacher forcing: Ey (B, Ty, m) = E y_0 … E y_{Ty−1} → logits (B, Ty, K); each α_i appended to `alphas`
        if given (then through autograd)."""
        Ty = Ey.size(1)
        fused = self.fused and alphas is None and not (Ey.is_cuda and _has_memory(self.attention))
        if fused and torch.is_grad_enabled():
            # the same equations, BPTT by hand (fused.py); with memory on the CPU only (CUDA: autograd)
            X = self.cell.W(Ey)  # (B, Ty, 3n)
            if self.attention is None:
                S = deep_output_recurrence(X + self.cell.C(memory.c).unsqueeze(1), memory.s0, self.cell)
                C = memory.c.unsqueeze(1).expand(-1, Ty, -1)
            else:
                s0, m0 = _split(self.attention, memory.s0, self.rnn_size, memory)
                S, C = deep_output_recurrence(X, s0, self.cell, self.attention, memory.h, memory.keys,
                                              memory.mask, m0)
            return self.output(S, self.output.V_o(Ey), C)
        W_Ey = self.cell.W(Ey).unbind(1)  # Ty × (B, ·): all input projections in one GEMM
        state, mine = _split(self.attention, memory.s0, self.rnn_size, memory)
        states, contexts = [], []
        for i in range(Ty):
            s_prev = self.cell.hidden(state)
            c, alpha, mine = _context(self.attention, s_prev, memory, mine)
            if alphas is not None:
                alphas.append(alpha)
            states.append(s_prev)
            contexts.append(c)
            if i + 1 < Ty:  # the last state is never read
                state = self.cell(W_Ey[i], state, c)
        S = torch.stack(states, 1)  # (B, Ty, n): s_{i−1} for each output position i
        C = torch.stack(contexts, 1) if self.attention is not None else memory.c.unsqueeze(1).expand(-1, Ty, -1)
        return self.output(S, self.output.V_o(Ey), C)  # (B, Ty, K): the readout for all steps at once


class CombinedOutputDecoder(nn.Module):
    """Luong et al. (2015)'s decoder: state first, then attention with the new state, o_t = dropout(tanh(W_u[a_t; h_t]))."""

    def __init__(self, vocab_size: int, m: int, n: int, ctx_dim: int, attention: nn.Module | None,
                 cell: str = "lstm", input_feeding: bool = True, dropout: float = 0.0):
        super().__init__()
        self.attention = attention
        self.cell = CELLS[cell](m, n, n if input_feeding else 0)  # the cell's extra input is o_{t−1}
        self.W_u = nn.Linear(ctx_dim + n, n, bias=False)
        self.W_vocab = nn.Linear(n, vocab_size, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.input_feeding = input_feeding
        self.n = n
        self.fused = cell == "gru" and attention is not None and fused_serves(attention, memory=False)  # no dropout
        self.rnn_size = self.cell.state_size + (n if input_feeding else 0)

    def init_state(self, s0: torch.Tensor, cell0: torch.Tensor | None = None) -> torch.Tensor:
        state = self.cell.init_state(s0, cell0)
        return torch.cat([state, torch.zeros_like(s0)], dim=1) if self.input_feeding else state  # o_0 = 0

    def context(self, state: torch.Tensor, memory):
        rnn, mine = _split(self.attention, state, self.rnn_size, memory)
        return _context(self.attention, self.cell.hidden(rnn), memory, mine)

    def _advance(self, W_Ey: torch.Tensor, state: torch.Tensor, memory):
        """One step from the precomputed input projection: o_t (B, n), the next state, α_t."""
        state, mine = _split(self.attention, state, self.rnn_size, memory)
        if self.input_feeding:
            rnn_state, o_prev = state.split([self.cell.state_size, self.n], dim=1)
            rnn_state = self.cell(W_Ey, rnn_state, o_prev)  # [E y ; o_{t−1}] as two input matrices
        else:
            rnn_state = self.cell(W_Ey, state, None)
        h_t = self.cell.hidden(rnn_state)  # (B, n)
        a, alpha, mine = _context(self.attention, h_t, memory, mine)  # (B, ctx)
        o = self.dropout(torch.tanh(self.W_u(torch.cat([a, h_t], dim=1))))  # (B, n)
        rnn_state = torch.cat([rnn_state, o], dim=1) if self.input_feeding else rnn_state
        return o, _join(self.attention, rnn_state, mine), alpha

    def step(self, Ey: torch.Tensor, state: torch.Tensor, memory):
        o, state, alpha = self._advance(self.cell.W(Ey), state, memory)
        return self.W_vocab(o), state, alpha

    def forward(self, Ey: torch.Tensor, memory, alphas: list | None = None) -> torch.Tensor:
        if self.fused and alphas is None and torch.is_grad_enabled() and not (self.training and self.dropout.p > 0):
            O = combined_output_recurrence(self.cell.W(Ey), memory.s0[:, : self.n], self.cell, self.attention,
                                           self.W_u, memory.h, memory.keys, memory.mask)
            return aligned_linear(O, self.W_vocab)  # (B, Ty, K)
        W_Ey = self.cell.W(Ey).unbind(1)  # Ty × (B, ·)
        state, outputs = memory.s0, []
        for W_Ey_t in W_Ey:
            o, state, alpha = self._advance(W_Ey_t, state, memory)
            if alphas is not None:
                alphas.append(alpha)
            outputs.append(o)
        return aligned_linear(torch.stack(outputs, 1), self.W_vocab)  # (B, Ty, K)
