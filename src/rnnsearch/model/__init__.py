"""RNNsearch and RNNencdec (App. A of the paper): encoders, alignment model, decoder, deep output."""

from .seq2seq import PAD, Memory, Seq2Seq, build_model

__all__ = ["PAD", "Memory", "Seq2Seq", "build_model"]
