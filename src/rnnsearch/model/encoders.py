"""The encoders: bidirectional (RNNsearch, App. A.2.1) or unidirectional (RNNencdec, Cho et al. 2014a).

    RNNsearch:  h_j = [→h_j ; ←h_j]  (2n), forward and backward RNNs over one shared source embedding E
    RNNencdec:  h_j = →h_j  (n); the last state h_Tx summarises the sentence

Both run PyTorch's packed `nn.GRU` (or `nn.LSTM` in the cell ablation), so the whole source sentence is one
batched call. One known difference from the paper's GRU: `nn.GRU` applies the reset gate after the recurrent
matrix,
    h̃ = tanh(W x + r ∘ (U h + b)),   the paper:   h̃ = tanh(W x + U [r ∘ h]).
Both have the same parameters and cost; the decoder, where the paper's equations matter most, implements
the paper's form exactly (see `decoders.ConditionalGRU`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


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
        # GRU: run each direction over the padded batch (see _unpacked_gru); False: the packed sequence
        self.fused = cell == "gru"

    def _unpacked_gru(self, Ex: torch.Tensor, lengths: torch.Tensor):
        """The packed GRU's results from unpacked runs, whose backward pass is twice as fast on CPU.

        Padding comes after the real words, so the forward direction's states at real words are those of the
        packed run; its final state is read at the last real word. The backward direction runs forwards over
        each sentence reversed within its length (padding still at the end) and is reversed back. Annotations
        at padding are zero, as pad_packed_sequence gives them.
        """
        B, T, _ = Ex.shape
        pos = torch.arange(T, device=Ex.device).unsqueeze(0)  # (1, Tx)
        real = pos < lengths.unsqueeze(1)  # (B, Tx)
        last = (lengths - 1).view(B, 1, 1).expand(-1, 1, self.rnn.hidden_size)
        w = self.rnn._flat_weights  # [w_ih, w_hh, b_ih, b_hh] per direction, the module's parameters
        h0 = Ex.new_zeros(1, B, self.rnn.hidden_size)
        fwd, _ = torch.gru(Ex, h0, w[:4], True, 1, 0.0, self.training, False, True)  # (B, Tx, n)
        outputs, finals = [fwd], [fwd.gather(1, last).squeeze(1)]  # →h_Tx
        if self.rnn.bidirectional:
            rev = torch.where(real, lengths.unsqueeze(1) - 1 - pos, pos)  # its own inverse
            idx = rev.unsqueeze(2)
            bwd, _ = torch.gru(Ex.gather(1, idx.expand_as(Ex)), h0, w[4:], True, 1, 0.0, self.training, False, True)
            outputs.append(bwd.gather(1, idx.expand_as(bwd)))
            finals.append(bwd.gather(1, last).squeeze(1))  # ←h_1 (the reversed run's state at the last word)
        h = torch.cat(outputs, dim=2) * real.unsqueeze(2)  # (B, Tx, dirs·n)
        return h, torch.cat(finals, dim=1), None

    def forward(self, x: torch.Tensor, lengths: torch.Tensor):
        Ex = self.E(x)  # (B, Tx, m)
        if self.fused:
            return self._unpacked_gru(Ex, lengths.to(x.device))
        packed = pack_padded_sequence(Ex, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, last = self.rnn(packed)  # last: h_n (dirs, B, n), or (h_n, c_n) for an LSTM
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # (B, Tx, dirs·n)
        h_n, c_n = last if isinstance(last, tuple) else (last, None)
        final = torch.cat(h_n.unbind(0), dim=1)  # (B, dirs·n): [→h_Tx ; ←h_1]
        final_cell = torch.cat(c_n.unbind(0), dim=1) if c_n is not None else None
        return h, final, final_cell
