"""RNNsearch and RNNencdec (App. A of the paper): encoders, alignment model, decoder, deep output."""

from ..presets import PRESETS, SWITCHES, resolve
from .seq2seq import PAD, Memory, Seq2Seq, build_model

__all__ = ["PAD", "PRESETS", "SWITCHES", "Memory", "Seq2Seq", "build_model", "resolve"]
