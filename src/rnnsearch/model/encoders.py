"""The encoders: bidirectional (RNNsearch, App. A.2.1) or unidirectional (RNNencdec, Cho et al. 2014a).

    RNNsearch:  h_j = [→h_j ; ←h_j]  (2n), forward and backward RNNs over one shared source embedding E
    RNNencdec:  h_j = →h_j  (n); the last state h_Tx summarises the sentence

Both keep their weights in an `nn.GRU` (or `nn.LSTM` in the cell ablation). The LSTM runs as PyTorch's packed
sequence; the GRU, on the CPU, runs `fused.encoder_gru`, the same equations with both directions batched into one
product per step, only the rows still inside their sentence computed, and a hand-written backward pass (tests
check it against the packed `nn.GRU`), and on a GPU the packed `nn.GRU` (cuDNN: a few kernels per sentence batch
instead of a few per word). One known difference from the paper's GRU: `nn.GRU` applies the reset gate after
the recurrent matrix,
    h̃ = tanh(W x + r ∘ (U h + b)),   the paper:   h̃ = tanh(W x + U [r ∘ h]).
Both have the same parameters and cost; the decoder, where the paper's equations matter most, implements
the paper's form exactly (see `decoders.ConditionalGRU`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from rnnsearch.model.fused import encoder_gru


class Encoder(nn.Module):
    """forward(x, lengths) → h (B, Tx, dirs·n), final (B, dirs·n), final_cell (B, dirs·n) or None.

    `final` is [→h_Tx ; ←h_1] (bidirectional) or h_Tx: each direction's state after its last real word.
    `final_cell` holds the LSTM memory cells in the same layout (None for a GRU).
    """

    def __init__(self, vocab_size: int, m: int, n: int, cell: str = "gru", bidirectional: bool = True, pad: int = 0):
        super().__init__()
        self.E = nn.Embedding(vocab_size, m, padding_idx=pad)
        rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.rnn = rnn(m, n, batch_first=True, bidirectional=bidirectional)
        self.out_dim = (2 if bidirectional else 1) * n
        # GRU: both directions in one recurrence with a hand-written backward (fused.encoder_gru) on the CPU, and
        # cuDNN's recurrence (the packed nn.GRU) on a GPU, where the loop's ~25 kernel launches per word cost more
        # than its work (docs/benchmarks.md); True or False chooses one everywhere. An LSTM: the packed nn.LSTM.
        self.fused: bool | None = None if cell == "gru" else False
        # True (the training's CUDA graphs, training/graphs.py): the GRU's own recurrence runs every row for all Tx
        # steps, its kernels set by the batch's shape alone, no source length read on the host
        self.every_row = False

    def forward(self, x: torch.Tensor, lengths: torch.Tensor):
        Ex = self.E(x)  # (B, Tx, m)
        fused = self.fused if self.fused is not None else x.device.type != "cuda"
        if fused:
            # the lengths on x's device counted there (no copy from the host, which a CUDA graph cannot hold)
            real = lengths if lengths.device == x.device else (x != self.E.padding_idx).sum(1)
            h, final = encoder_gru(Ex, None if self.every_row else lengths, self.rnn._flat_weights, real)
            return h, final, None
        packed = pack_padded_sequence(Ex, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, last = self.rnn(packed)  # last: h_n (dirs, B, n), or (h_n, c_n) for an LSTM
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # (B, Tx, dirs·n)
        h_n, c_n = last if isinstance(last, tuple) else (last, None)
        final = torch.cat(h_n.unbind(0), dim=1)  # (B, dirs·n): [→h_Tx ; ←h_1]
        final_cell = torch.cat(c_n.unbind(0), dim=1) if c_n is not None else None
        return h, final, final_cell
