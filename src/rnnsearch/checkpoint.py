"""Checkpoints: model, optimizer, update count, data position and config in one file, written atomically
and loaded with `weights_only=True` (loading never executes code)."""

from __future__ import annotations

from pathlib import Path

import torch

from .model import Seq2Seq, build_model
from .textio import InputError, atomic_path
from .vocab import Vocab


def save_checkpoint(path: str | Path, model: Seq2Seq, optimizer, update: int, data_position: dict, config: dict,
                    **extra) -> None:
    """Model, optimizer, update count, data position, config and anything in `extra` (tensors, plain data)."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "update": update,
             "data_position": data_position, "config": config, **extra}
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | Path, device="cpu") -> dict:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: checkpoint not found")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # torch raises several types for truncated or foreign files
        raise InputError(f"{path}: not a readable rnnsearch checkpoint ({type(e).__name__}: {str(e)[:200]})") from None


def vocabs_of(state: dict, path: str | Path) -> tuple[Vocab, Vocab]:
    """The source and target shortlists stored in a loaded checkpoint (written since training stores them)."""
    if "vocab" not in state:
        raise InputError(f"{path}: this checkpoint has no vocabularies; pass --src-vocab and --tgt-vocab")
    return Vocab(state["vocab"]["src"], [0] * len(state["vocab"]["src"])), \
        Vocab(state["vocab"]["tgt"], [0] * len(state["vocab"]["tgt"]))


def load_model(path: str | Path, device="cpu") -> tuple[Seq2Seq, dict]:
    """The trained model (in eval mode) and the config it was trained with."""
    return model_of(load_checkpoint(path, device), path, device)


def model_of(state: dict, path: str | Path, device="cpu") -> tuple[Seq2Seq, dict]:
    """The model of a loaded checkpoint (`path` only names it in errors)."""
    config = state["config"]
    model = build_model(config["model"], config["src_vocab"], config["tgt_vocab"])
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise InputError(f"{path}: weights do not fit the model config stored with them ({str(e)[:200]})") from None
    return model.to(device).eval(), config
