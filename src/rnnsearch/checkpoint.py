"""Checkpoints: model, optimizer, update count, data position and config in one file, written atomically
and loaded with `weights_only=True` (loading never executes code)."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from rnnsearch.data.vocab import Vocab
from rnnsearch.model import Seq2Seq, build_model
from rnnsearch.textio import InputError, WriteError, atomic_path


def save_checkpoint(path: str | Path, model: Seq2Seq, optimizer, update: int, data_position: dict, config: dict,
                    **extra) -> None:
    """Model, optimizer, update count, data position, config and anything in `extra` (tensors, plain data)."""
    optimizer_state = optimizer.state_dict()
    for group in optimizer_state["param_groups"]:  # a rate kept on the GPU for CUDA graphs: saved as a number
        if isinstance(group["lr"], torch.Tensor):
            group["lr"] = group["lr"].item()
    write_checkpoint(path, {"model": model.state_dict(), "optimizer": optimizer_state, "update": update,
                            "data_position": data_position, "config": config, **extra})


def write_checkpoint(path: str | Path, state: dict) -> None:
    """A checkpoint's dict written atomically; a failed write is a WriteError naming `path`."""
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:  # a file object: torch's write errors keep their OSError
            torch.save(state, f)
    except RuntimeError as e:  # torch's zip writer turns a failed write (disk full, quota) into a RuntimeError
        if isinstance(e.__context__, OSError):
            raise WriteError(f"{path}: cannot write ({e.__context__.strerror}); nothing was written under this name"
                             ) from None
        raise


def load_checkpoint(path: str | Path, device="cpu") -> dict:
    """A checkpoint of `rnnsearch train`, read without running code; any other file is an InputError saying
    what it is (torch's own messages advise loading untrusted files with weights_only=False: never shown)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: checkpoint not found")
    expected = "expected model.pt or checkpoint.pt of `rnnsearch train`"
    if path.is_dir() or not zipfile.is_zipfile(path):
        truncated = path.is_file() and _head(path) == b"PK\x03\x04"  # a zip archive's start, without its end
        raise InputError(f"{path}: " + ("a damaged or truncated checkpoint (its zip archive has no end)" if truncated
                                        else "not an rnnsearch checkpoint (not a file written by torch.save)")
                         + f"; {expected}")
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError:
        raise InputError(f"{path}: not an rnnsearch checkpoint (it holds Python objects other than tensors and "
                         f"plain data, which are not loaded: loading them could run code); {expected}") from None
    except Exception as e:  # torch raises several types for truncated or damaged archives
        reason = str(e).split(". ")[0][:160]
        raise InputError(f"{path}: a damaged or truncated checkpoint ({reason}); {expected}") from None
    if not isinstance(state, dict) or not {"model", "config"} <= set(state):
        raise InputError(f"{path}: not an rnnsearch checkpoint (a PyTorch file without the model and config that "
                         f"`rnnsearch train` writes); {expected}")
    return state


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(4)


def vocabs_of(state: dict, path: str | Path) -> tuple[Vocab, Vocab]:
    """The source and target shortlists stored in a loaded checkpoint (written since training stores them)."""
    if "vocab" not in state:
        raise InputError(f"{path}: this checkpoint has no vocabularies; pass --src-vocab and --tgt-vocab")
    v = state["vocab"]
    return tuple(Vocab(v[side], [0] * len(v[side]), v.get(f"{side}_spm")) for side in ("src", "tgt"))


def vocab_mismatch(state: dict, path: str | Path, **files: tuple[str | Path, Vocab]) -> str | None:
    """The first vocabulary file that differs from the one stored in the checkpoint, with its first difference;
    None where they agree. `files`: side ("src" or "tgt") → (file name, the vocabulary read from it)."""
    for side, (file, vocab) in files.items():
        stored = state.get("vocab", {}).get(side)
        if stored is None or stored == vocab.words:
            continue
        i = next((k for k, (a, b) in enumerate(zip(stored, vocab.words)) if a != b), min(len(stored), len(vocab)))
        a = repr(stored[i]) if i < len(stored) else "nothing"
        b = repr(vocab.words[i]) if i < len(vocab) else "nothing"
        return (f"{file}: not the {side} vocabulary {path} was trained with ({len(vocab)} words, the "
                f"checkpoint {len(stored)}; id {i}: {a} in the checkpoint, {b} in the file)")
    return None


def check_vocabs(state: dict, path: str | Path, **files: tuple[str | Path, Vocab]) -> None:
    """Refuse vocabulary files that differ from those stored in the checkpoint, naming the first difference."""
    mismatch = vocab_mismatch(state, path, **files)
    if mismatch:
        raise InputError(mismatch)


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
