"""RNNsearch (Bahdanau et al. 2015, App. A.2), RNNencdec (Cho et al. 2014a) and their ablations, as one module.

A model is a named preset plus overrides (`rnnsearch.model.presets`): the paper's two models, and Luong et al. (2015)'s
formulation (bidirectional LSTM, multiplicative attention, combined output, input feeding).

The model knows nothing of files or vocabularies. Search, training and scoring use three methods:
    encode(x, lengths) → Memory
    step(y_prev, state, memory) → (logits, state, alpha)        one decoder step
    forward(x, lengths, y_in) → logits (B, Ty, K)                teacher forcing, the same equations
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import nn

from rnnsearch.model.attention import Attention, make_attention
from rnnsearch.model.decoders import CELLS, CombinedOutputDecoder, DeepOutputDecoder
from rnnsearch.model.encoders import Encoder
from rnnsearch.model.presets import resolve

PAD = 0  # shared by both vocabularies; E(PAD) is the zero vector, used as E y_0 at the first step

@dataclass
class Memory:
    """What the decoder reads from the source sentence (all tensors share the batch dimension 0)."""

    h: torch.Tensor  # (B, Tx, ctx) annotations h_j (RNNsearch) or encoder states (RNNencdec)
    mask: torch.Tensor  # (B, Tx) True on real source words
    s0: torch.Tensor  # (B, ·) initial decoder state (s_0, and the LSTM cell, o_0 and the alignment model's memory
    #                   where the decoder has them)
    keys: torch.Tensor | None = None  # (B, Tx, ·) the attention's precomputed part: U_a h_j for the paper's
    c: torch.Tensor | None = None  # (B, ctx) no attention (RNNencdec): the fixed context c = tanh(V h_Tx)

    def index_select(self, idx: torch.Tensor) -> "Memory":
        """Rows `idx` of every tensor (beam search expands and reorders sentences with this)."""
        return replace(self, **{f.name: getattr(self, f.name).index_select(0, idx)
                                for f in fields(self) if getattr(self, f.name) is not None})


class Seq2Seq(nn.Module):
    """Encoder, alignment model (or fixed context), decoder. Sizes use the paper's symbols: m (word embedding),
    n (hidden), n_align (n', alignment model), l (maxout units). The paper: m=620, n=1000, n'=1000, l=500, K=30000.

    Initial decoder state: the paper's s_0 = tanh(W_s ←h_1) (h_Tx when unidirectional); with a fixed context,
    c = tanh(V h_Tx) and s_0 = tanh(W_s c) (Cho et al. 2014a); the combined-output decoder starts from
    s_0 = W_s [→h_Tx; ←h_1] and, for an LSTM, memory cell W_c [→c_Tx; ←c_1] (Luong et al. 2015's W_h, W_c).
    """

    def __init__(self, cfg: dict, src_vocab: int, tgt_vocab: int):
        super().__init__()
        self.cfg = cfg = resolve(cfg["arch"], cfg, cfg)
        m, n = cfg["m"], cfg["n"]
        self.encoder = Encoder(src_vocab, m, n, cfg["cell"], cfg["bidirectional"], PAD)
        enc = self.encoder.out_dim  # 2n or n
        attention = make_attention(cfg["attention"], n, enc, cfg["n_align"], cfg)
        ctx_dim = enc if attention is not None else n
        if attention is None:
            self.V = nn.Linear(enc, n)  # c = tanh(V h_Tx)
        self.E = nn.Embedding(tgt_vocab, m, padding_idx=PAD)  # target embedding
        if cfg["combined_output"]:
            self.decoder = CombinedOutputDecoder(tgt_vocab, m, n, ctx_dim, attention, cfg["cell"],
                                                 cfg["input_feeding"], cfg["dropout"])
            self.W_s = nn.Linear(enc, n)  # s_0 = W_s [→h_Tx; ←h_1]
            self.W_c = nn.Linear(enc, n) if cfg["cell"] == "lstm" else None
        else:
            self.decoder = DeepOutputDecoder(tgt_vocab, m, n, ctx_dim, cfg["l"], attention, cfg["cell"], cfg["dropout"])
            self.W_s = nn.Linear(n, n)  # s_0 = tanh(W_s ←h_1), or tanh(W_s c)
        self.reset_parameters()

    @property
    def attention(self) -> nn.Module | None:
        return self.decoder.attention

    # ------------------------------------------------------------------------------- App. B.1
    def reset_parameters(self) -> None:
        """App. B.1: recurrent matrices orthogonal; the alignment model's as it says (`Attention.init_weight`: W_a,
        U_a ~ N(0, 0.001²), v_a 0); biases 0; others N(0, 0.01²). Chosen by the module that holds each parameter,
        in the order of `named_parameters` (the order the random draws take)."""
        recurrent = {id(w) for module in self.modules() for w in recurrent_weights(module)}
        aligners = [m for m in self.modules() if isinstance(m, Attention)]
        theirs = {id(p) for m in aligners for p in m.parameters()}
        for module in self.modules():
            if isinstance(module, Attention):  # its parameters, in order (pre-order: its layers come next)
                for name, p in module.named_parameters():
                    nn.init.zeros_(p) if "bias" in name else module.init_weight(name, p)
                continue
            for name, p in module.named_parameters(recurse=False):
                if id(p) in theirs:
                    continue
                if "bias" in name:
                    nn.init.zeros_(p)
                elif id(p) in recurrent:
                    for block in p.data.chunk(p.size(0) // p.size(1), 0):  # one orthogonal block per gate
                        nn.init.orthogonal_(block)
                else:
                    nn.init.normal_(p, 0.0, 0.01)
        with torch.no_grad():
            self.E.weight[PAD].zero_()
            self.encoder.E.weight[PAD].zero_()

    # ------------------------------------------------------------------------------- encoder
    def encode(self, x: torch.Tensor, lengths: torch.Tensor) -> Memory:
        """x (B, Tx) source ids padded with PAD, lengths (B,) → Memory."""
        mask = x != PAD  # (B, Tx)
        h, final, final_cell = self.encoder(x, lengths)  # (B, Tx, enc), (B, enc): [→h_Tx; ←h_1]
        n = self.cfg["n"]
        c = torch.tanh(self.V(final)) if self.attention is None else None  # (B, n) fixed context
        if self.cfg["combined_output"]:
            cell0 = self.W_c(final_cell) if self.W_c is not None else None
            s0 = self.decoder.init_state(self.W_s(final), cell0)
        else:
            s0 = self.decoder.init_state(torch.tanh(self.W_s(c if c is not None else final[:, -n:])))  # ←h_1
        keys = self.attention.precompute(h) if self.attention is not None else None
        if self.attention is not None and self.attention.state_size:  # the alignment model's memory, at the end
            s0 = self.attention.join(s0, self.attention.initial(keys, mask).to(s0.dtype))  # keys may be autocast's
        return Memory(h=h, mask=mask, s0=s0, keys=keys, c=c)

    # ------------------------------------------------------------------------------- decoder
    def step(self, y_prev: torch.Tensor, state: torch.Tensor, memory: Memory):
        """One decoder step. y_prev (B,) ids of y_{i−1} (PAD for y_0), state (B, ·) from memory.s0 or the last step.

        Returns logits (B, K) of p(y_i | y_{<i}, x), the new state and α_i (B, Tx) or None.
        """
        return self.decoder.step(self.E(y_prev), state, memory)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, y_in: torch.Tensor,
                alphas: list | None = None) -> torch.Tensor:
        """Teacher forcing. y_in (B, Ty) = [y_0=PAD, y_1, …, y_{Ty−1}] → logits (B, Ty, K) for y_1 … y_Ty; with
        a list `alphas`, each step's α_i (B, Tx) appended to it (the decoder's plain recurrence: the coverage loss)."""
        return self.decoder(self.E(y_in), self.encode(x, lengths), alphas)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def recurrent_weights(module: nn.Module) -> list[torch.Tensor]:
    """The recurrent matrices of a recurrent layer (App. B.1 starts them orthogonal): nn.GRU's and nn.LSTM's
    weight_hh, a decoder cell's `recurrent` ones (U, and the GRU's U_zr)."""
    if isinstance(module, (nn.GRU, nn.LSTM)):
        return [p for name, p in module.named_parameters() if name.startswith("weight_hh")]
    if isinstance(module, tuple(CELLS.values())):
        return module.recurrent()
    return []


def build_model(cfg: dict, src_vocab: int, tgt_vocab: int) -> Seq2Seq:
    """From a model config (arch, sizes m, n, n_align, l, and any switches overriding the preset)."""
    return Seq2Seq(cfg, src_vocab, tgt_vocab)
