"""Downloads that survive a flaky network and never leave a corrupt file looking complete.

`download(remote, dest)` fetches one file over HTTP(S):

* it writes to `<dest>.part`; a later call (the same job retried, or a new one) continues that file with an HTTP
  `Range` request, and starts over when the server ignores the range (200 instead of 206);
* network errors and 5xx/429 answers are retried with exponential backoff; other 4xx answers fail at once;
* only when the size and every recorded checksum match is `.part` renamed onto `dest`; a mismatch deletes the
  partial file and fails naming the URL, the expected and the actual values.

`Remote` carries what is recorded of a file. Where a publisher gives only an MD5 or only a size, that is what is
checked; `Remote.checks()` says which.

`extract_tar` unpacks with tarfile's `data` filter (no absolute paths, no `..`, no links leaving the target, no
device files), into a temporary folder renamed into place only after the expected members were found.
`gunzip` decompresses one `.gz` member the same way and can check the sha256 of the decompressed text.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rnnsearch.textio import InputError, atomic_path

log = logging.getLogger("rnnsearch.download")

CHUNK = 1 << 20
RETRYABLE_HTTP = {408, 425, 429, 500, 502, 503, 504}


class DownloadError(InputError):
    """A download that failed for good (after the retries) or whose content is not what was recorded."""


@dataclass(frozen=True)
class Remote:
    """A file on a server and what is recorded of it: size in bytes, sha256, md5 (any may be None)."""

    url: str
    size: int | None = None
    sha256: str | None = None
    md5: str | None = None

    def checks(self) -> str:
        done = [name for name, v in (("size", self.size), ("sha256", self.sha256), ("md5", self.md5)) if v]
        return ", ".join(done) if done else "nothing (no size or checksum is recorded for this file)"


def file_digests(path: Path) -> dict[str, str]:
    sha, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            sha.update(block)
            md5.update(block)
    return {"sha256": sha.hexdigest(), "md5": md5.hexdigest()}


def verify(path: Path, remote: Remote) -> None:
    """Raise DownloadError (and delete `path`) unless its size and recorded checksums match `remote`."""
    problems = []
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        problems.append(f"size: expected {remote.size} bytes, got {size}")
    else:
        digests = file_digests(path) if (remote.sha256 or remote.md5) else {}
        for kind in ("sha256", "md5"):
            expected = getattr(remote, kind)
            if expected and digests[kind] != expected.lower():
                problems.append(f"{kind}: expected {expected.lower()}, got {digests[kind]}")
    if problems:
        path.unlink(missing_ok=True)
        raise DownloadError(f"{remote.url}: the download does not match what is recorded ({'; '.join(problems)}); "
                            f"the partial file {path} was deleted, run again to download it afresh")


def download(remote: Remote, dest: str | os.PathLike, retries: int = 6, backoff: float = 2.0,
             timeout: float = 60.0) -> Path:
    """Fetch `remote` to `dest` (resuming `<dest>.part`), check it, then rename it into place.

    A `dest` that already exists is checked and kept (a wrong one is deleted and fetched again).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        try:
            verify(dest, remote)
            log.info("%s: already here; checked: %s", dest, remote.checks())
            return dest
        except DownloadError as e:
            log.warning("%s; fetching it again", e)
    part = dest.with_name(dest.name + ".part")
    for attempt in range(retries + 1):
        try:
            _fetch(remote, part, timeout)
            break
        except DownloadError:
            raise
        except (OSError, urllib.error.URLError, TimeoutError) as e:  # HTTPError is a URLError
            code = getattr(e, "code", None)
            if code is not None and code not in RETRYABLE_HTTP:
                raise DownloadError(f"{remote.url}: HTTP {code} {getattr(e, 'reason', '')}".rstrip()) from None
            if attempt == retries:
                raise DownloadError(f"{remote.url}: failed after {retries + 1} attempts; last error: {e}; "
                                    f"{part} keeps the {_size(part)} bytes fetched so far, run again to resume") from None
            wait = backoff * 2 ** attempt
            log.warning("%s: %s; %d bytes so far; retrying in %.0f s (attempt %d of %d)", remote.url, e,
                        _size(part), wait, attempt + 2, retries + 1)
            time.sleep(wait)
    verify(part, remote)
    os.replace(part, dest)
    log.info("%s: %d bytes from %s; checked: %s", dest, dest.stat().st_size, remote.url, remote.checks())
    return dest


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _fetch(remote: Remote, part: Path, timeout: float) -> None:
    """One attempt: continue `part` from its current size (or start it), to the end of the file."""
    have = _size(part)
    if remote.size is not None and have > remote.size:  # not a prefix of this file
        part.unlink()
        have = 0
    if remote.size is not None and have == remote.size:
        return
    request = urllib.request.Request(remote.url, headers={"User-Agent": "rnnsearch"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing after what we have: the file is complete (verify decides)
            return
        raise
    with response:
        if have and response.status == 200:  # the server ignored the range: start over
            log.info("%s: the server does not resume (200 to a Range request); starting over", remote.url)
            have = 0
        elif have:
            first = _content_range_start(response.headers.get("Content-Range", ""))
            if first != have:
                raise OSError(f"asked for bytes from {have}, the server sent Content-Range "
                              f"{response.headers.get('Content-Range')!r}")
            log.info("%s: resuming at byte %d", remote.url, have)
        length = response.headers.get("Content-Length")
        total = remote.size or (have + int(length) if length and length.isdigit() else None)
        bar = _bar(total, have, Path(part.name.removesuffix(".part")).name)
        with open(part, "ab" if have else "wb") as f:
            while block := response.read(CHUNK):
                f.write(block)
                if bar is not None:
                    bar.update(len(block))
        if bar is not None:
            bar.close()
        if length and length.isdigit() and _size(part) != have + int(length):  # the connection dropped
            raise OSError(f"connection closed after {_size(part) - have} of {length} bytes")


def _content_range_start(value: str) -> int | None:
    # "bytes 100-199/200"
    try:
        return int(value.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return None


def _bar(total: int | None, initial: int, desc: str):
    """A byte progress bar on a terminal (off otherwise)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, initial=initial, desc=desc, unit="B", unit_scale=True, disable=None, leave=False,
                file=sys.stderr, mininterval=2)


def extract_tar(archive: str | os.PathLike, dest: str | os.PathLike, members: list[str],
                select: Callable[[str], bool] | None = None) -> Path:
    """Unpack `archive` into the folder `dest`, which appears only when every name in `members` is there.
    With `select`, only the members whose name it accepts are written (a multi-language archive, 1 pair needed).

    Absolute names are refused, and tarfile's `data` filter refuses `..`, links pointing outside `dest` and special
    files; such an archive is an error naming the member.
    """
    archive, dest = Path(archive), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        try:
            with tarfile.open(archive) as tar:
                if select is None:
                    tar.extractall(tmp, filter=_strict_data_filter)
                else:  # one pass over the (compressed) stream
                    for member in tar:
                        if select(member.name):
                            tar.extract(member, tmp, filter=_strict_data_filter)
        except tarfile.FilterError as e:
            raise InputError(f"{archive}: refused to extract {e.tarinfo.name!r}: {e}") from None
        except (tarfile.TarError, EOFError, OSError) as e:
            raise InputError(f"{archive}: not a readable tar archive ({type(e).__name__}: {e})") from None
        missing = [m for m in members if not (tmp / m).exists()]
        if missing:
            raise InputError(f"{archive}: expected member(s) missing after extraction: {', '.join(missing)}")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return dest


def _strict_data_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
    """tarfile's `data` filter, which would quietly strip a leading "/": refuse absolute names outright."""
    if member.name.startswith("/") or (len(member.name) > 1 and member.name[1] == ":"):
        raise tarfile.AbsolutePathError(member)
    return tarfile.data_filter(member, path)


def gunzip(src: str | os.PathLike, dest: str | os.PathLike, sha256: str | None = None) -> Path:
    """Decompress `src` (.gz) to `dest`; with `sha256`, the decompressed bytes must have it."""
    src, dest = Path(src), Path(dest)
    with atomic_path(dest) as tmp:
        sha = hashlib.sha256()
        try:
            with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
                while block := fin.read(CHUNK):
                    sha.update(block)
                    fout.write(block)
        except (OSError, EOFError) as e:
            raise InputError(f"{src}: not a readable gzip file ({type(e).__name__}: {e})") from None
        if sha256 and sha.hexdigest() != sha256.lower():
            raise InputError(f"{src}: the decompressed text does not match what is recorded "
                             f"(sha256: expected {sha256.lower()}, got {sha.hexdigest()})")
    return dest
