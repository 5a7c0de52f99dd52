"""What a training keeps between updates, between jobs and on disk.

`TrainState` is the training's progress beside the tensors (update count, learning curve, validations, the best
state so far, the jobs that worked on it); a checkpoint holds it under "progress", with the model, the optimizer,
the data position and the RNG states. `start_or_resume` decides, from `checkpoint.pt` in the output folder,
whether a run starts afresh or continues.

Files in the output folder: `checkpoint.pt` (the last state), `checkpoint-<update>.pt` (the last
`keep_checkpoints` of them, hard links), `best-<update>.pt` (the validated state with the best dev BLEU) and
`model.pt` (a hard link to it, once training is done).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from rnnsearch.checkpoint import check_vocabs, load_checkpoint, vocab_mismatch
from rnnsearch.settings import last_full_lr_update
from rnnsearch.textio import InputError

log = logging.getLogger("rnnsearch.train")

# Train settings that shape the trajectory: a checkpoint written under other values cannot be resumed.
# The others (max_updates, patience, log_every, checkpoint_every, keep_checkpoints, validate_every,
# validate_beam, device, precision, threads) may change between a run and its resumption.
RESUME_KEYS = ("optimizer", "lr", "lr_decay", "rho", "eps", "batch_size", "batch_tokens", "sort_batches", "clip_norm",
               "coverage_loss")
# A model that continues another may set its own coverage_loss: See et al. (2017)'s second phase, the coverage
# loss added to a trained model (from the first update it keeps the model from learning to align).
CONTINUE_KEYS = tuple(k for k in RESUME_KEYS if k != "coverage_loss")
# Neither is the number of processes: a checkpoint of N data-parallel processes resumes on M (the data position
# is global), unless train.scale_batch makes the global batch depend on it (config "global_batch").


@dataclass
class TrainState:
    """window: summed NLL, sentences and words since the last log line; curve: the logged windows; validations:
    one row per dev evaluation; best: the best validation so far ({update, bleu, nll}); bad: validations since
    then; runs: one entry per process that worked on this training (a chain of cluster jobs has several);
    words: source + target words trained on."""

    update: int = 0
    seconds: float = 0.0
    window: list = field(default_factory=lambda: [0.0, 0, 0])
    curve: list = field(default_factory=list)
    validations: list = field(default_factory=list)
    best: dict | None = None
    bad: int = 0
    runs: list = field(default_factory=list)
    words: int = 0
    finished: bool = False
    continued_from: dict | None = None  # {model, update, checkpoint, sha256}: the parent's state this one began at

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, progress: dict) -> "TrainState":
        return cls(**{k: v for k, v in progress.items() if k in cls.__dataclass_fields__})

    def patience_spent(self, patience: int) -> bool:
        return bool(patience) and self.bad >= patience

    def smoothed_train_nll(self) -> float:
        """The mean of the last three logged windows, as Table 2's training cost."""
        last = [row["train_nll"] for row in self.curve[-3:]]
        return sum(last) / len(last) if last else float("nan")


def resume_mismatch(saved: dict, config: dict, update: int, keys: tuple[str, ...] = RESUME_KEYS) -> list[str]:
    """The differences between a checkpoint's config (`saved`, at update `update`) and this run's that forbid
    resuming it (`keys`: the train settings that must agree). train.max_updates is one when the checkpoint is
    past it, or when the step sizes of the updates it has made depend on it (train.lr_decay, once either schedule
    has begun to fall)."""
    diffs = []
    before, now = saved["train"]["max_updates"], config["train"]["max_updates"]
    if update > now:
        diffs.append(f"train.max_updates: {now} now, the checkpoint is at update {update}")
    elif before != now and update > min(last_full_lr_update(before, saved["train"].get("lr_decay", 0.0)),
                                         last_full_lr_update(now, config["train"]["lr_decay"])):
        diffs.append(f"train.max_updates: {before} in the checkpoint, {now} now, and the step sizes of its "
                     f"{update} updates depend on it (train.lr_decay)")
    for key in ("seed", "src_vocab", "tgt_vocab", "global_batch"):
        if key == "global_batch" and key not in saved:  # written before data-parallel training: batch_size
            continue
        if saved.get(key) != config[key]:
            diffs.append(f"{key}: {saved.get(key)!r} in the checkpoint, {config[key]!r} now")
    for section, names in (("model", sorted(set(saved["model"]) | set(config["model"]))), ("train", keys)):
        for k in names:
            a, b = saved[section].get(k, 0.0 if k in ("lr_decay", "coverage_loss") else None), config[section].get(k)
            if a != b:
                diffs.append(f"{section}.{k}: {a!r} in the checkpoint, {b!r} now")
    return diffs


def start_or_resume(out: Path, config: dict, model, optimizer, batches, device, vocabs: dict, owner: bool = True,
                    read_by_all=lambda: None, parent: tuple[str, str] | None = None) -> TrainState | None:
    """Restore model, optimizer, data position and RNG from `out/checkpoint.pt` and return its state, or return
    None (a fresh start). A damaged checkpoint.pt gives way to the newest readable checkpoint-<update>.pt. A
    checkpoint of other settings is refused unless it is finished (an ablation under the same name: trained again
    from scratch, after moving the finished one aside with a warning). `parent` (model name, its final
    checkpoint): instead of a fresh start, continue from that state (`continue_from`); a checkpoint in `out`
    begun from another state of the parent counts as one of other settings.

    `vocabs`: side → (file, Vocab), checked against the checkpoint's. Of data-parallel processes, each reads
    and decides the same, waits in `read_by_all` until all have read, and only the `owner` changes the folder."""
    path = out / "checkpoint.pt"
    state = aside = None
    origin = lineage(*parent) if parent else None
    if path.exists():
        saved, path = _readable_checkpoint(out, device)
        diffs = resume_mismatch(saved["config"], config, saved["update"])
        other_text = vocab_mismatch(saved, path, **vocabs)  # the text changed (data.source, say): its vocabulary
        if other_text:
            diffs.append(other_text)
        began = (saved.get("progress") or {}).get("continued_from") or {}
        if origin and began.get("sha256") != origin["sha256"]:
            diffs.append(f"begun from {began.get('checkpoint') or 'scratch'} "
                         f"({str(began.get('sha256'))[:12]}), not from {origin['checkpoint']} ({origin['sha256'][:12]})")
        if not diffs:
            state = _restore(saved, path, model, optimizer, batches, device, vocabs)
        elif not saved.get("progress", {}).get("finished"):
            raise InputError(f"{path}: written for another configuration ({'; '.join(diffs)}); "
                             "delete it to train from scratch")
        else:
            aside = diffs
    read_by_all()
    if state is not None:
        return state
    if owner:
        if aside:
            folder = _move_aside(out)
            log.warning("%s: %s holds a finished training of another configuration (%s): moved to %s (delete that "
                        "folder once you no longer need it); training %s", config["name"], path, "; ".join(aside),
                        folder, f"on from {origin['checkpoint']}" if origin else "from scratch")
        for old in [*out.glob("best-*.pt"), *out.glob("checkpoint-*.pt"), path]:  # an unfinished start's leftovers
            old.unlink(missing_ok=True)
    if origin:
        return continue_from(origin, out, config, (model, optimizer, batches), device, vocabs, owner)
    return None


def lineage(model: str, checkpoint: str) -> dict:
    """Where a continued training begins: the parent model, its final checkpoint and the file's SHA-256 (a
    retrained parent has another, and the child is trained again from it)."""
    path = Path(checkpoint)
    if not path.is_file():
        raise InputError(f"{path}: not found; the training of {model} must finish before the model that "
                         "continues it starts")
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return {"model": model, "checkpoint": str(path), "sha256": digest.hexdigest()}


def continue_from(origin: dict, out: Path, config: dict, trainable: tuple, device, vocabs: dict,
                  owner: bool) -> TrainState:
    """The parent's final state restored into (model, optimizer, batches), as this training's own: its update
    count, data position, RNG, curves, validations and best state; the owner links the parent's best state into
    `out` (it stays the selection until a validation here beats it)."""
    path = Path(origin["checkpoint"])
    saved = load_checkpoint(path, device)
    if not (saved.get("progress") or {}).get("finished"):
        raise InputError(f"{path}: {origin['model']}'s training has not finished (update {saved['update']}); "
                         f"{config['name']} continues only a finished training")
    diffs = resume_mismatch(saved["config"], config, saved["update"], CONTINUE_KEYS)
    if diffs:
        raise InputError(f"{path}: {config['name']} cannot continue this state of {origin['model']}: "
                         + "; ".join(diffs))
    state = _restore(saved, path, *trainable, device, vocabs)
    state.continued_from = {**origin, "update": state.update}
    if owner and state.best:
        out.mkdir(parents=True, exist_ok=True)
        link(best_path(path.parent, state.best["update"]), best_path(out, state.best["update"]))
    log.info("%s: continuing %s from update %d (%s)", config["name"], origin["model"], state.update, path)
    return state


def _readable_checkpoint(out: Path, device) -> tuple[dict, Path]:
    """checkpoint.pt, or if it cannot be read (a truncated file) the newest readable checkpoint-<update>.pt."""
    path = out / "checkpoint.pt"
    try:
        return load_checkpoint(path, device), path
    except InputError as damaged:
        for older in sorted(out.glob("checkpoint-*.pt"), reverse=True):
            try:
                saved = load_checkpoint(older, device)
            except InputError:
                continue
            log.warning("%s; resuming from %s (update %d) instead", damaged, older, saved["update"])
            return saved, older
        raise InputError(f"{damaged}; no readable checkpoint-<update>.pt beside it: delete {path} to train from "
                         "scratch") from None


def _move_aside(out: Path) -> Path:
    """Move a finished training's checkpoints and model into `out/replaced-<time>/`; returns that folder."""
    aside = out / time.strftime("replaced-%Y%m%dT%H%M%S")
    aside.mkdir(exist_ok=True)
    for old in [*out.glob("best-*.pt"), *out.glob("checkpoint*.pt"), out / "model.pt", out / "train_stats.json"]:
        if old.exists():
            os.replace(old, aside / old.name)
    return aside


def _restore(saved: dict, path: Path, model, optimizer, batches, device, vocabs: dict) -> TrainState:
    check_vocabs(saved, path, **vocabs)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    batches.restore(saved["data_position"])
    state = TrainState.from_dict(saved["progress"])
    # the checkpoint was loaded onto the training's device; a generator's state is a byte tensor on the host
    torch.set_rng_state(saved["rng"].cpu())
    if device.type == "cuda" and saved.get("cuda_rng") is not None:  # dropout masks on the GPU
        torch.cuda.set_rng_state(saved["cuda_rng"].cpu(), device)
    log.info("%s: resuming from %s at update %d", saved["config"]["name"], path, state.update)
    if state.runs and state.runs[-1]["ended_by"] is None:  # killed without a signal: lost what followed its checkpoint
        state.runs[-1]["ended_by"] = "killed (lost the updates after its last checkpoint)"
    state.finished = False
    return state


def best_path(out: Path, update: int) -> Path:
    return out / f"best-{update:09d}.pt"


def prune_best(out: Path, best: dict | None) -> None:
    """Delete best-<update>.pt files other than the current best. Called only when checkpoint.pt has just been
    written (or at the end), so a run killed later and resumed from that checkpoint still finds its best."""
    keep = best_path(out, best["update"]) if best else None
    for path in out.glob("best-*.pt"):
        if path != keep:
            path.unlink()


def link(source: Path, target: Path) -> None:
    """`target` as a hard link to `source` (a copy on a filesystem without hard links), replaced atomically."""
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def keep_last(out: Path, update: int, keep: int) -> None:
    """checkpoint-<update>.pt beside checkpoint.pt for the last `keep` checkpoints (hard links: no copy)."""
    if keep <= 0:
        return
    link(out / "checkpoint.pt", out / f"checkpoint-{update:09d}.pt")
    for old in sorted(out.glob("checkpoint-*.pt"))[:-keep]:
        old.unlink()


@contextlib.contextmanager
def stop_on_signals():
    """SIGTERM (Slurm's time limit, preemption) and SIGINT set a flag that the loop checks after each update."""
    flag: dict = {}
    handler = lambda signum, frame: flag.setdefault("signal", signum)  # noqa: E731
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)
