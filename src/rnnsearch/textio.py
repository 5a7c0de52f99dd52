"""Reading and writing line-aligned text and JSON safely.

Every writer goes through a temporary file in the destination folder and an atomic rename, so an
interrupted stage never leaves a partial output that looks complete. Readers fail with the file and line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
import unicodedata
from pathlib import Path
from typing import Iterable, Iterator

BOM = "\ufeff"  # the byte-order mark Windows editors write at the start of a UTF-8 file
UNICODE_FORMS = ("NFC", "NFKC", "none")


def normalise(text: str, form: str = "NFC") -> str:
    """`text` in Unicode normal form `form` (NFC: composed accents, "é" as one code point; NFKC: also
    compatibility characters such as ligatures and full-width letters), or as it is (`none`)."""
    return text if form == "none" else unicodedata.normalize(form, text)


class InputError(Exception):
    """Bad input: the message names the file (and line) and what was expected. Shown without a traceback."""


EXIT_INTERRUPTED = 75  # the CLI's exit status after Interrupted (EX_TEMPFAIL): rerun the same command to go on


class Interrupted(Exception):
    """A stage stopped on SIGTERM/SIGINT after saving what it needs to resume."""


class WriteError(InputError):
    """A file could not be written (no space left, quota, read-only filesystem, file too large)."""


# errors of the filesystem, not of the input: reported as one line naming the file being written
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode `open()` would give a new file under this process's umask (mkstemp's is always 0600)."""
    return 0o666 & ~_umask()


def _temporary_name(path: Path) -> tuple[str, str]:
    """The prefix and suffix of atomic_path's temporary files beside `path`: `.<name>.<random>.tmp`."""
    return f".{path.name}.", ".tmp"


def leftover_temporaries(path: str | os.PathLike) -> list[Path]:
    """The temporary files of atomic_path writes of `path` that never finished (a killed process leaves them)."""
    path = Path(path)
    prefix, suffix = _temporary_name(path)
    return sorted(path.parent.glob(f"{prefix}*{suffix}"))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` (with the umask's mode, as `open()` would
    create it) only if the block succeeds. A full disk, a quota, a read-only filesystem: a WriteError naming
    `path`, and nothing under that name changes."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        prefix, suffix = _temporary_name(path)
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
        os.close(fd)
        yield Path(tmp)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except OSError as e:  # before the temporary exists (mkdir, mkstemp: a read-only folder) or on it or `path`
        if tmp is None or e.filename in (tmp, str(path)) or (e.filename is None and e.errno in _WRITE_ERRNOS):
            raise WriteError(f"{path}: cannot write ({e.strerror or e}); nothing was written under this name"
                             ) from None
        raise
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def write_lines_atomic(path: str | os.PathLike, lines: Iterable[str]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            if "\n" in line:
                raise ValueError(f"{path}: a line to write contains a newline: {line[:60]!r}")
            f.write(line + "\n")


def finite_json(obj):
    """`obj` with every NaN or infinity replaced by None (JSON has no such numbers: strict parsers reject them)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    """Strict JSON: NaN and infinities are written as null."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(finite_json(obj), f, indent=2, ensure_ascii=False, allow_nan=False)
        f.write("\n")


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a UTF-8 text file without their newlines (and without a leading byte-order mark); invalid
    UTF-8 is an InputError naming the line."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: file not found")
    return list(iter_lines(path))


def iter_lines(path: str | os.PathLike, digest=None) -> Iterator[str]:
    """The lines of `read_lines`, streamed (memory of one line); each line's raw bytes also go to `digest` (a
    hashlib object) when given."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if digest is not None:
                digest.update(raw)
            if lineno == 1:
                raw = raw.removeprefix(BOM.encode("utf-8"))
            try:
                yield raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}:{lineno}: invalid UTF-8 at byte {e.start} of the line") from None


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
