"""RNNsearch and RNNencdec (App. A of the paper): encoders, alignment model, decoder, deep output.

The presets import no torch; the model's names (`build_model`, `Seq2Seq`, ...) import it when first asked for, so
that checking a configuration (Snakemake does it each time it parses the workflow, in every job it starts under
Slurm) does not spend a second and a half importing PyTorch.
"""

from rnnsearch.model.presets import PRESETS, SWITCHES, resolve

__all__ = ["PAD", "PRESETS", "SWITCHES", "Memory", "Seq2Seq", "build_model", "resolve"]


def __getattr__(name: str):
    if name in ("PAD", "Memory", "Seq2Seq", "build_model"):
        from rnnsearch.model import seq2seq

        return getattr(seq2seq, name)
    raise AttributeError(f"module 'rnnsearch.model' has no attribute {name!r}")
