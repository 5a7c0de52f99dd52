"""RNNsearch (Bahdanau et al. 2015, App. A.2) and RNNencdec (Cho et al. 2014a) as one readable module.

The model knows nothing of files or vocabularies. Search, training and scoring use three methods:
    encode(x, lengths) → Memory
    step(y_prev, s_prev, memory) → (logits, s, alpha)            one decoder step, App. A.2.2
    forward(x, lengths, y_in) → logits (B, Ty, K)                teacher forcing, the same equations
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import nn

from .attention import AdditiveAttention
from .decoders import ConditionalGRU, DeepOutput
from .encoders import BiGRUEncoder, GRUEncoder

PAD = 0  # shared by both vocabularies; E(PAD) is the zero vector, used as E y_0 at the first step


@dataclass
class Memory:
    """What the decoder reads from the source sentence (all tensors share the batch dimension 0)."""

    h: torch.Tensor  # (B, Tx, ctx) annotations h_j (RNNsearch) or encoder states (RNNencdec)
    mask: torch.Tensor  # (B, Tx) True on real source words
    s0: torch.Tensor  # (B, n) initial decoder state
    U_a_h: torch.Tensor | None = None  # (B, Tx, n') RNNsearch: U_a h_j, computed once
    c: torch.Tensor | None = None  # (B, ctx) RNNencdec: the fixed context c = tanh(V h_Tx)

    def index_select(self, idx: torch.Tensor) -> "Memory":
        """Rows `idx` of every tensor (beam search expands and reorders sentences with this)."""
        return replace(self, **{f.name: getattr(self, f.name).index_select(0, idx)
                                for f in fields(self) if getattr(self, f.name) is not None})


class Seq2Seq(nn.Module):
    """`arch="rnnsearch"`: bidirectional encoder + alignment model; `arch="rnnencdec"`: fixed context.

    Sizes use the paper's symbols: m (word embedding), n (hidden), n_align (n', alignment model),
    l (maxout units). The paper: m=620, n=1000, n'=1000, l=500, K=30000.
    """

    def __init__(self, arch: str, src_vocab: int, tgt_vocab: int, m: int, n: int, n_align: int, l: int):
        super().__init__()
        if arch not in ("rnnsearch", "rnnencdec"):
            raise ValueError(f"unknown arch {arch!r}: expected 'rnnsearch' or 'rnnencdec'")
        self.arch = arch
        if arch == "rnnsearch":
            self.encoder = BiGRUEncoder(src_vocab, m, n, PAD)
            ctx_dim = 2 * n
            self.attention = AdditiveAttention(n, ctx_dim, n_align)
            self.W_s = nn.Linear(n, n)  # s_0 = tanh(W_s ←h_1)
        else:
            self.encoder = GRUEncoder(src_vocab, m, n, PAD)
            ctx_dim = n
            self.attention = None
            self.V = nn.Linear(n, n)  # c = tanh(V h_Tx)
            self.W_s = nn.Linear(n, n)  # s_0 = tanh(W_s c)  (Cho et al. 2014a: h'_0 = tanh(V' c))
        self.E = nn.Embedding(tgt_vocab, m, padding_idx=PAD)  # target embedding
        self.gru = ConditionalGRU(m, n, ctx_dim)
        self.output = DeepOutput(tgt_vocab, m, n, ctx_dim, l)
        self.reset_parameters()

    # ------------------------------------------------------------------------------- App. B.1
    def reset_parameters(self) -> None:
        """App. B.1: recurrent matrices orthogonal; W_a, U_a ~ N(0, 0.001²); v_a and biases 0; others N(0, 0.01²)."""
        for name, p in self.named_parameters():
            if "bias" in name:
                nn.init.zeros_(p)
            elif "weight_hh" in name:  # nn.GRU recurrent weights: one orthogonal block per gate
                for block in p.data.chunk(3, 0):
                    nn.init.orthogonal_(block)
            elif name.startswith("gru.U"):  # U_z, U_r, U of the decoder
                for block in p.data.chunk(p.size(0) // p.size(1), 0):
                    nn.init.orthogonal_(block)
            elif name.startswith(("attention.W_a", "attention.U_a")):
                nn.init.normal_(p, 0.0, 0.001)
            elif name.startswith("attention.v_a"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, 0.01)
        with torch.no_grad():
            self.E.weight[PAD].zero_()
            self.encoder.E.weight[PAD].zero_()

    # ------------------------------------------------------------------------------- encoder
    def encode(self, x: torch.Tensor, lengths: torch.Tensor) -> Memory:
        """x (B, Tx) source ids padded with PAD, lengths (B,) → Memory."""
        mask = x != PAD  # (B, Tx)
        h, last = self.encoder(x, lengths)
        if self.attention is not None:
            return Memory(h=h, mask=mask, s0=torch.tanh(self.W_s(last)), U_a_h=self.attention.precompute(h))
        c = torch.tanh(self.V(last))  # (B, n) fixed context
        return Memory(h=h, mask=mask, s0=torch.tanh(self.W_s(c)), c=c)

    def context(self, s_prev: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, torch.Tensor | None]:
        """c_i and α_i: from the alignment model (RNNsearch) or the fixed c (RNNencdec, α is None)."""
        if self.attention is None:
            return memory.c, None
        return self.attention(s_prev, memory.h, memory.U_a_h, memory.mask)

    # ------------------------------------------------------------------------------- decoder
    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, memory: Memory):
        """One decoder step. y_prev (B,) ids of y_{i−1} (PAD for y_0), s_prev (B, n).

        Returns logits (B, K) of p(y_i | y_{<i}, x), the new state s_i (B, n) and α_i (B, Tx) or None.
        """
        Ey = self.E(y_prev)  # (B, m)
        c, alpha = self.context(s_prev, memory)
        logits = self.output(s_prev, self.output.V_o(Ey), c)
        s = self.gru(self.gru.W(Ey), s_prev, c)
        return logits, s, alpha

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, y_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing. y_in (B, Ty) = [y_0=PAD, y_1, …, y_{Ty−1}] → logits (B, Ty, K) for y_1 … y_Ty."""
        memory = self.encode(x, lengths)
        Ey = self.E(y_in)  # (B, Ty, m)
        W_Ey = self.gru.W(Ey).unbind(1)  # Ty × (B, 3n): all input projections in one GEMM
        s = memory.s0
        states, contexts = [], []
        for i in range(y_in.size(1)):
            c, _ = self.context(s, memory)
            states.append(s)
            contexts.append(c)
            if i + 1 < y_in.size(1):  # the last state is never read
                s = self.gru(W_Ey[i], s, c)
        S = torch.stack(states, 1)  # (B, Ty, n): s_{i−1} for each output position i
        C = torch.stack(contexts, 1) if self.attention is not None else memory.c.unsqueeze(1).expand(-1, y_in.size(1), -1)
        return self.output(S, self.output.V_o(Ey), C)  # (B, Ty, K): the readout for all steps at once

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_model(cfg: dict, src_vocab: int, tgt_vocab: int) -> Seq2Seq:
    """From a resolved model config (keys arch, m, n, n_align, l)."""
    return Seq2Seq(cfg["arch"], src_vocab, tgt_vocab, cfg["m"], cfg["n"], cfg["n_align"], cfg["l"])
