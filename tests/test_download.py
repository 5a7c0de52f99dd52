"""Downloads and extraction against a loopback HTTP server that serves archives built here: resume with Range,
retries with backoff, checksums, servers that ignore Range, and archives that try to write outside their folder."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rnnsearch.data.corpus.download import (
    DownloadError,
    Remote,
    download,
    extract_tar,
    gunzip,
)
from rnnsearch.textio import InputError

BODY = bytes(range(256)) * 4096  # 1 MiB, not compressible into a lucky coincidence


class Server:
    """Files by path, with per-path misbehaviour: `fail` answers 503 that many times, `drop` closes the
    connection after that many bytes (for the first `drops` requests), `no_range` answers 200 to a Range."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.fail: dict[str, int] = {}
        self.drop: dict[str, tuple[int, int]] = {}
        self.no_range: set[str] = set()
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                if server.fail.get(self.path, 0) > 0:
                    server.fail[self.path] -= 1
                    self.send_error(503, "try later")
                    return
                if self.path not in server.files:
                    self.send_error(404, "no such file")
                    return
                body, start = server.files[self.path], 0
                rng = self.headers.get("Range")
                if rng and self.path not in server.no_range:
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    if start >= len(body):
                        self.send_error(416, "range not satisfiable")
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                chunk = body[start:]
                after, times = server.drop.get(self.path, (0, 0))
                if times > 0:
                    server.drop[self.path] = (after, times - 1)
                    chunk = chunk[:after]
                self.wfile.write(chunk)
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def remote(self, path: str, **recorded) -> Remote:
        body = self.files[path]
        values = {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        values.update(recorded)
        return Remote(self.url + path, **values)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.httpd.shutdown()


def test_a_dropped_connection_is_resumed_with_range_and_checked(server, tmp_path):
    server.files["/a.tgz"] = BODY
    server.drop["/a.tgz"] = (300_000, 2)  # the first two connections close early
    out = download(server.remote("/a.tgz"), tmp_path / "a.tgz", backoff=0.01)
    assert out.read_bytes() == BODY and not (tmp_path / "a.tgz.part").exists()
    assert server.requests == [("/a.tgz", None), ("/a.tgz", "bytes=300000-"), ("/a.tgz", "bytes=600000-")]


def test_a_partial_file_left_by_an_earlier_job_is_continued(server, tmp_path):
    server.files["/a.tgz"] = BODY
    (tmp_path / "a.tgz.part").write_bytes(BODY[:12345])
    download(server.remote("/a.tgz"), tmp_path / "a.tgz", backoff=0.01)
    assert (tmp_path / "a.tgz").read_bytes() == BODY
    assert server.requests == [("/a.tgz", "bytes=12345-")]


def test_a_server_that_ignores_range_restarts_the_file(server, tmp_path):
    server.files["/a.tgz"] = BODY
    server.no_range.add("/a.tgz")
    (tmp_path / "a.tgz.part").write_bytes(BODY[:5000])
    download(server.remote("/a.tgz"), tmp_path / "a.tgz", backoff=0.01)
    assert (tmp_path / "a.tgz").read_bytes() == BODY  # not the first 5000 bytes twice


def test_server_errors_are_retried_with_backoff_and_then_given_up(server, tmp_path):
    server.files["/a.tgz"] = BODY
    server.fail["/a.tgz"] = 2
    download(server.remote("/a.tgz"), tmp_path / "a.tgz", backoff=0.01)
    assert len(server.requests) == 3

    server.fail["/b.tgz"] = 10
    server.files["/b.tgz"] = BODY
    with pytest.raises(DownloadError, match=r"/b.tgz: failed after 3 attempts; last error: HTTP Error 503"):
        download(server.remote("/b.tgz"), tmp_path / "b.tgz", retries=2, backoff=0.01)


def test_not_found_fails_at_once_naming_the_url(server, tmp_path):
    with pytest.raises(DownloadError, match=r"127\.0\.0\.1:\d+/missing.tgz: HTTP 404"):
        download(Remote(server.url + "/missing.tgz", size=10), tmp_path / "m.tgz", backoff=0.01)
    assert len(server.requests) == 1 and not (tmp_path / "m.tgz").exists()


@pytest.mark.parametrize("kind", ["sha256", "md5", "size"])
def test_a_checksum_mismatch_deletes_the_partial_file_and_names_both_values(server, tmp_path, kind):
    server.files["/a.tgz"] = BODY
    wrong = {"sha256": {"sha256": "0" * 64}, "md5": {"sha256": None, "md5": "f" * 32}, "size": {"size": 999}}[kind]
    remote = server.remote("/a.tgz", **wrong)
    with pytest.raises(DownloadError) as e:
        download(remote, tmp_path / "a.tgz", backoff=0.01)
    message = str(e.value)
    assert remote.url in message and f"{kind}: expected" in message
    actual = {"sha256": hashlib.sha256(BODY).hexdigest(), "md5": hashlib.md5(BODY).hexdigest(), "size": "got 999"}
    assert (actual[kind] if kind != "size" else "expected 999 bytes, got 1048576") in message
    assert list(tmp_path.iterdir()) == []  # neither the file nor its .part


def test_an_existing_good_file_is_kept_and_a_bad_one_fetched_again(server, tmp_path):
    server.files["/a.tgz"] = BODY
    (tmp_path / "a.tgz").write_bytes(BODY)
    download(server.remote("/a.tgz"), tmp_path / "a.tgz")
    assert server.requests == []
    (tmp_path / "a.tgz").write_bytes(b"corrupt")
    download(server.remote("/a.tgz"), tmp_path / "a.tgz")
    assert (tmp_path / "a.tgz").read_bytes() == BODY and len(server.requests) == 1


def test_md5_only_is_checked_and_said(server, tmp_path):
    server.files["/dev+test.tgz"] = BODY
    remote = Remote(server.url + "/dev+test.tgz", md5=hashlib.md5(BODY).hexdigest())
    assert remote.checks() == "md5"
    download(remote, tmp_path / "dev+test.tgz")
    assert (tmp_path / "dev+test.tgz").read_bytes() == BODY


def make_tar(path, members: list[tuple[str, bytes | None, str | None]]):
    """(name, content, symlink target) members; content None with a target makes a symlink."""
    with tarfile.open(path, "w:gz") as tar:
        for name, content, target in members:
            info = tarfile.TarInfo(name)
            if target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))


def test_extraction_checks_the_expected_members(tmp_path):
    make_tar(tmp_path / "dev.tgz", [("dev/newstest2012.en", b"a\n", None), ("dev/newstest2012.fr", b"b\n", None)])
    out = extract_tar(tmp_path / "dev.tgz", tmp_path / "dev", ["dev/newstest2012.en", "dev/newstest2012.fr"])
    assert (out / "dev/newstest2012.fr").read_bytes() == b"b\n"
    with pytest.raises(InputError, match=r"dev.tgz: expected member\(s\) missing after extraction: dev/newstest2013.en"):
        extract_tar(tmp_path / "dev.tgz", tmp_path / "again", ["dev/newstest2013.en"])
    assert not (tmp_path / "again").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("member", [("../escape.txt", b"x", None), ("/tmp/absolute.txt", b"x", None),
                                    ("link", None, "/etc/passwd"), ("link", None, "../../outside")])
def test_extraction_refuses_members_that_leave_the_folder(tmp_path, member):
    make_tar(tmp_path / "evil.tgz", [("ok.txt", b"fine", None), member])
    with pytest.raises(InputError, match=r"evil.tgz: refused to extract"):
        extract_tar(tmp_path / "evil.tgz", tmp_path / "out" / "x", ["ok.txt"])
    assert not (tmp_path / "out" / "x").exists() and not (tmp_path / "escape.txt").exists()
    assert [p.name for p in (tmp_path / "out").iterdir()] == []  # no temporary folder left behind


def test_a_truncated_archive_is_an_error(tmp_path):
    make_tar(tmp_path / "a.tgz", [("a.txt", BODY, None)])
    data = (tmp_path / "a.tgz").read_bytes()
    (tmp_path / "a.tgz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="a.tgz: not a readable tar archive"):
        extract_tar(tmp_path / "a.tgz", tmp_path / "out", ["a.txt"])


def test_gunzip_checks_the_decompressed_text(tmp_path):
    (tmp_path / "train.en.gz").write_bytes(gzip.compress(b"A dog runs .\n"))
    gunzip(tmp_path / "train.en.gz", tmp_path / "train.en", hashlib.sha256(b"A dog runs .\n").hexdigest())
    assert (tmp_path / "train.en").read_bytes() == b"A dog runs .\n"
    with pytest.raises(InputError, match=r"train.en.gz: the decompressed text does not match .*sha256: expected 0+, got"):
        gunzip(tmp_path / "train.en.gz", tmp_path / "other.en", "0" * 64)
    assert not (tmp_path / "other.en").exists()
    (tmp_path / "bad.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="bad.gz: not a readable gzip file"):
        gunzip(tmp_path / "bad.gz", tmp_path / "bad")
