"""Reading and writing line-aligned text and JSON safely.

Every writer goes through a temporary file in the destination folder and an atomic rename, so an
interrupted stage never leaves a partial output that looks complete. Readers fail with the file and line.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator


class InputError(Exception):
    """Bad input: the message names the file (and line) and what was expected. Shown without a traceback."""


EXIT_INTERRUPTED = 75  # the CLI's exit status after Interrupted (EX_TEMPFAIL): rerun the same command to go on


class Interrupted(Exception):
    """A stage stopped on SIGTERM/SIGINT after saving what it needs to resume."""


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_lines_atomic(path: str | os.PathLike, lines: Iterable[str]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            if "\n" in line:
                raise ValueError(f"{path}: a line to write contains a newline: {line[:60]!r}")
            f.write(line + "\n")


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a UTF-8 text file without their newlines; invalid UTF-8 is an InputError naming the line."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: file not found")
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for i, raw in enumerate(lines, 1):
        try:
            out.append(raw.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise InputError(f"{path}:{i}: invalid UTF-8 at byte {e.start} of the line") from None
    return out


def read_parallel(src: str | os.PathLike, tgt: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Two line-aligned files; a different number of lines is an error naming both files and counts."""
    a, b = read_lines(src), read_lines(tgt)
    if len(a) != len(b):
        raise InputError(f"{src} has {len(a)} lines but {tgt} has {len(b)}: parallel files must align line by line")
    return a, b


def count_lines(path: str | os.PathLike) -> int:
    """Newline-terminated lines of a file, counted in 1 MiB blocks (a 40-million-line corpus in seconds)."""
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def read_json(path: str | os.PathLike):
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
