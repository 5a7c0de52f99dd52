"""What a training writes beside its checkpoints: the progress bar, dvclive metrics, the TSV curves, and the
names of its device and durations in the log."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from rnnsearch.runtime import cpu_name
from rnnsearch.textio import write_lines_atomic

log = logging.getLogger("rnnsearch.train")


def write_tsv(path: Path, rows: list[dict]) -> None:
    write_lines_atomic(path, ["\t".join(rows[0])] + ["\t".join(str(v) for v in row.values()) for row in rows])


def progress_bar(initial: int, total: int, name: str):
    """A progress bar over updates when stderr is a terminal (tqdm turns itself off otherwise)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with dvc
        return None
    return tqdm(total=total, initial=initial, desc=name, unit="upd", disable=None, leave=False, mininterval=2)


def live(path: Path, resume: bool = False):
    """dvclive logger (metrics and plots DVC reads), or None when dvclive is not installed."""
    try:
        from dvclive import Live
    except ImportError:  # pragma: no cover - dvclive is a declared dependency
        return None
    try:
        return Live(str(path), save_dvc_exp=False, dvcyaml=None, report=None, resume=resume)
    except Exception as e:  # dvclive inspects the git repository; outside one (or in an empty one) it can fail
        log.warning("dvclive disabled (%s: %s); the learning curve is still in the log", type(e).__name__, e)
        return None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU: {cpu_name()}"


def hms(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
