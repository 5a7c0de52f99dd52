"""Encoders of App. A.2.1 (RNNsearch) and of Cho et al. (2014a) (RNNencdec).

Both run PyTorch's packed `nn.GRU`, so the whole source sentence is one batched call. One known difference
from the paper's GRU: `nn.GRU` applies the reset gate after the recurrent matrix,
    h̃ = tanh(W x + r ∘ (U h + b)),   the paper:   h̃ = tanh(W x + U [r ∘ h]).
Both have the same parameters and cost; the decoder, where the paper's equations matter most, implements
the paper's form exactly (see `decoders.ConditionalGRU`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class BiGRUEncoder(nn.Module):
    """RNNsearch encoder (App. A.2.1): forward and backward GRUs over one shared embedding E.

    h_j = [→h_j ; ←h_j]  (2n), the annotation of source word j.
    Returns the annotations (B, Tx, 2n) and ←h_1, the backward state at the first word (B, n),
    from which the decoder's initial state s_0 = tanh(W_s ←h_1) is computed.
    """

    def __init__(self, vocab_size: int, m: int, n: int, pad: int = 0):
        super().__init__()
        self.E = nn.Embedding(vocab_size, m, padding_idx=pad)
        self.rnn = nn.GRU(m, n, batch_first=True, bidirectional=True)
        self.out_dim = 2 * n

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        Ex = self.E(x)  # (B, Tx, m)
        packed = pack_padded_sequence(Ex, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)  # h_n: (2, B, n), [→h_Tx, ←h_1]
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # (B, Tx, 2n)
        return h, h_n[1]


class GRUEncoder(nn.Module):
    """RNNencdec encoder (Cho et al. 2014a): one forward GRU; its last state h_Tx summarises the sentence.

    Returns the states (B, Tx, n) and h_Tx (B, n); the model turns h_Tx into the fixed context c = tanh(V h_Tx).
    """

    def __init__(self, vocab_size: int, m: int, n: int, pad: int = 0):
        super().__init__()
        self.E = nn.Embedding(vocab_size, m, padding_idx=pad)
        self.rnn = nn.GRU(m, n, batch_first=True)
        self.out_dim = n

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        packed = pack_padded_sequence(self.E(x), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)  # h_n: (1, B, n), the state after each sentence's last real word
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # (B, Tx, n)
        return h, h_n[0]
