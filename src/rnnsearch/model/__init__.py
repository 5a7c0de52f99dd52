"""RNNsearch and RNNencdec (App. A of the paper): encoders, alignment model, decoder, deep output."""

from rnnsearch.model.presets import PRESETS, SWITCHES, resolve
from rnnsearch.model.seq2seq import PAD, Memory, Seq2Seq, build_model

__all__ = ["PAD", "PRESETS", "SWITCHES", "Memory", "Seq2Seq", "build_model", "resolve"]
