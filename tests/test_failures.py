"""Nothing silently wrong: a diverging training, a damaged checkpoint, a full disk, a replaced model, and the
file and line named by each error."""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rnnsearch.data.corpus.local import run_local_corpus
from rnnsearch.data.corpus.sgm import read_sgm
from rnnsearch.textio import (
    InputError,
    file_mode,
    write_json_atomic,
    write_lines_atomic,
)

from .conftest import REPO
from .forks import rnnsearch
from .test_resume import UPDATES, train, train_cmd
from .test_resume import data as data  # noqa: F401 (the module's fixtures)
from .test_resume import reference as reference  # noqa: F401


def _with_train(data: Path, tmp_path: Path, **train) -> Path:
    """A copy of the fixture's params.yaml with `train` values changed, in a folder of its own."""
    params = yaml.safe_load((data / "params.yaml").read_text())
    params["train"].update(train)
    for name in ("train.en", "train.fr", "dev.en", "dev.fr", "vocab.en.tsv", "vocab.fr.tsv", "train.src.bin",
                 "train.tgt.bin", "train.idx", "train.json"):
        os.symlink(data / name, tmp_path / name)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return tmp_path


def _refused(d: Path, out: Path) -> str:
    """Runs a training that must stop before its first update; returns its stderr."""
    proc = train(d, out, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert [p.name for p in out.iterdir()] == ["train.log"]  # nothing but the log
    return proc.stderr


def test_a_binarized_set_of_another_shortlist_or_a_changed_text_stops_training(data: Path, tmp_path: Path):
    d = _with_train(data, tmp_path)
    other = [line.split("\t") for line in (data / "vocab.en.tsv").read_text().splitlines()]
    other[3][2] = str(int(other[3][2]) + 1)  # one count differs: another shortlist file
    (tmp_path / "vocab.en.tsv").unlink()
    (tmp_path / "vocab.en.tsv").write_text("".join("\t".join(row) + "\n" for row in other))
    err = _refused(d, tmp_path / "out")
    assert f"{tmp_path / 'train'}.json: made with the shortlist {data / 'vocab.en.tsv'}, which is not " \
           f"{tmp_path / 'vocab.en.tsv'}" in err

    (tmp_path / "vocab.en.tsv").unlink()
    os.symlink(data / "vocab.en.tsv", tmp_path / "vocab.en.tsv")
    (tmp_path / "train.fr").unlink()
    lines = (data / "train.fr").read_text().splitlines()
    (tmp_path / "train.fr").write_text("\n".join(lines[1:] + lines[:1]) + "\n")  # same size, other order
    err = _refused(d, tmp_path / "out2")
    assert f"{tmp_path / 'train'}.json: stale against {tmp_path / 'train.fr'}" in err


def _damage(d: Path, name: str, change) -> None:
    """`d`'s link to a binarized file replaced by a copy of it changed in place by `change` (on a numpy array)."""
    target = d / name
    array = np.fromfile(target.resolve(), dtype=np.int64 if name.endswith(".idx") else np.uint8)
    target.unlink()
    change(array.reshape(-1, 2) if name.endswith(".idx") else array)
    array.tofile(target)


@pytest.mark.parametrize("case", ["source offset past the end", "target offset past the end", "offsets falling",
                                  "id outside the shortlist"])
def test_a_damaged_binarized_set_stops_training_naming_the_file(data: Path, tmp_path: Path, case: str):
    """A corrupt index or id file (a failing disk, an interrupted copy, a stray edit): checked when training maps
    it, before the first update; the error names the file, the pair and what was expected, nothing is written."""
    d = _with_train(data, tmp_path)
    header = json.loads((data / "train.json").read_text())
    tokens = header["src"]["tokens"]
    if case == "source offset past the end":
        _damage(d, "train.idx", lambda o: o.__setitem__((7, 0), tokens + 100))
        expected = f"{d / 'train.idx'}: the src offset in row 8 of {header['pairs'] + 1} is {tokens + 100}, outside"
    elif case == "target offset past the end":
        _damage(d, "train.idx", lambda o: o.__setitem__((-1, 1), header["tgt"]["tokens"] + 1))
        expected = f"{d / 'train.idx'}: the tgt offset in row {header['pairs'] + 1} of {header['pairs'] + 1} is"
    elif case == "offsets falling":
        _damage(d, "train.idx", lambda o: o.__setitem__((5, 0), o[4, 0] - 1))
        expected = f"{d / 'train.idx'}: the src offsets in rows 5 and 6 fall"
    else:
        _damage(d, "train.tgt.bin", lambda ids: ids.__setitem__(10, 255))  # uint8 ids, a 153-word shortlist
        expected = f"{d / 'train.tgt.bin'}: id 255 at position 10 (pair"
    err = _refused(d, tmp_path / "out")
    assert expected in err and "rerun the binarize stage" in err, err


def test_binarize_on_a_full_disk_names_the_file_and_leaves_no_temporary(data: Path, tmp_path: Path):
    """A write that fails (the file size limit standing in for a full disk) is reported for the file being
    written, with nothing under the final names; a rerun removes what a killed run left (its temporaries)."""
    out = tmp_path / "bin" / "train"
    cmd = [sys.executable, "-m", "rnnsearch.cli", "binarize", "--src", data / "train.en", "--tgt", data / "train.fr",
           "--src-vocab", data / "vocab.en.tsv", "--tgt-vocab", data / "vocab.fr.tsv", "--out", out]
    size = (data / "train.src.bin").stat().st_size
    assert size > 5_000  # the first of the three files written past the limit
    proc = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: _limit_file_size(5_000))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{out}.src.bin: cannot write (File too large)" in proc.stderr, proc.stderr
    assert not list(out.parent.iterdir())  # no final name, no temporary
    # what a run killed while writing leaves: atomic_path's temporaries, then the rerun
    for name in ("train.src.bin", "train.idx", "train.json"):
        (out.parent / f".{name}.k1ll3d.tmp").write_bytes(b"partial")
    (out.parent / ".other.k1ll3d.tmp").write_bytes(b"not binarize's")
    subprocess.run(list(map(str, cmd)), check=True, capture_output=True, timeout=300)
    assert sorted(p.name for p in out.parent.iterdir()) == [".other.k1ll3d.tmp", "train.idx", "train.json",
                                                             "train.src.bin", "train.tgt.bin"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_device_cuda_without_cuda_stops_naming_the_key(data: Path, reference: Path, tmp_path: Path):
    """train.device and decode.device `cuda` where CUDA is not (a GPU request lost on a cluster): the stage stops
    before any work, naming the key and `auto`, which falls back to the CPU."""
    d = _with_train(data, tmp_path, device="cuda")
    err = _refused(d, tmp_path / "out")
    assert "train.device: cuda, but CUDA is not available here" in err and "set train.device: auto" in err, err
    params = yaml.safe_load((d / "params.yaml").read_text())
    params["train"]["device"], params["decode"]["device"] = "auto", "cuda"
    (tmp_path / "decode.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "translations"
    proc = rnnsearch("translate", "--params", str(tmp_path / "decode.yaml"), "--checkpoint", str(reference), "--src",
                     str(data / "dev.en"), "--ref", str(data / "dev.fr"), "--src-vocab", str(data / "vocab.en.tsv"),
                     "--tgt-vocab", str(data / "vocab.fr.tsv"), "--out-dir", str(out))
    assert proc.returncode == 2 and "decode.device: cuda, but CUDA is not available here" in proc.stderr, proc.stderr
    assert not out.exists() or not list(out.iterdir())


@pytest.mark.slow
def test_a_diverging_training_stops_and_writes_no_model(data: Path, tmp_path: Path):
    d = _with_train(data, tmp_path, optimizer="adadelta", lr=1e6)  # the paper's optimizer, as in params.yaml
    out = tmp_path / "out"
    proc = train(d, out, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "rnnsearch-50: training diverged at update" in proc.stderr
    assert "no model.pt is written" in proc.stderr and "Traceback" not in proc.stderr
    update = int(proc.stderr.split("diverged at update ")[1].split()[0])
    assert update < UPDATES // 2  # within a few updates of the first non-finite loss, not at the budget
    assert not (out / "model.pt").exists() and not (out / "train_stats.json").exists()
    assert not list(out.glob("best-*.pt"))
    if (out / "checkpoint.pt").exists():  # what was kept holds finite weights only
        saved = torch.load(out / "checkpoint.pt", weights_only=True)
        assert all(torch.isfinite(w).all() for w in saved["model"].values())
        assert f"the last checkpoint, {out / 'checkpoint.pt'}, is kept" in proc.stderr


@pytest.mark.slow
def test_a_damaged_checkpoint_gives_way_to_the_newest_readable_one(data: Path, reference: Path, tmp_path: Path):
    """checkpoint-<update>.pt files of an interrupted run, then checkpoint.pt truncated: the run resumes from
    the newest readable one and ends with the uninterrupted run's weights."""
    out = tmp_path / "out"
    proc = subprocess.Popen(train_cmd(data, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while len(list(out.glob("checkpoint-*.pt"))) < 2:
        assert proc.poll() is None, "training ended before two checkpoints"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    newest = sorted(out.glob("checkpoint-*.pt"))[-1]
    (out / "checkpoint.pt").unlink()  # the newest dated one is a hard link to it: damage a copy instead
    good = newest.read_bytes()
    (out / "checkpoint.pt").write_bytes(good[: len(good) // 3])
    train(data, out)
    log = (out / "train.log").read_text()
    assert f"{out / 'checkpoint.pt'}: a damaged or truncated checkpoint" in log
    assert f"resuming from {newest} (update " in log
    final, ref = torch.load(out / "model.pt", weights_only=True)["model"], torch.load(reference, weights_only=True)["model"]
    assert all(torch.equal(final[k], ref[k]) for k in ref)


def _limit_file_size(size: int = 60_000):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


@pytest.mark.slow
def test_a_full_disk_while_saving_is_one_line_naming_the_file(data: Path, tmp_path: Path):
    out = tmp_path / "out"
    cmd = train_cmd(data, out)
    cmd[cmd.index("--log") + 1] = str(tmp_path / "train.log")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size)
    assert proc.returncode == 2
    assert f"{out / 'checkpoint.pt'}: cannot write (File too large); nothing was written under this name" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "checkpoint.pt").exists() and not list(out.glob(".*.tmp"))


@pytest.mark.slow
def test_a_finished_training_of_another_configuration_is_moved_aside_with_a_warning(data: Path, reference: Path,
                                                                                    tmp_path: Path):
    d = _with_train(data, tmp_path, clip_norm=2.0)
    out = tmp_path / "out"
    shutil.copytree(reference.parent, out)
    proc = train(d, out)
    assert "holds a finished training of another configuration (train.clip_norm: 1.0 in the checkpoint, 2.0 now)" \
           in proc.stderr  # on the console, although --log is given
    (aside,) = out.glob("replaced-*")
    assert "moved to " + str(aside) in proc.stderr
    kept = torch.load(aside / "model.pt", weights_only=True)["model"]
    ref = torch.load(reference, weights_only=True)["model"]
    assert all(torch.equal(kept[k], ref[k]) for k in ref)
    assert (out / "model.pt").exists()


def test_json_outputs_are_strict_json(tmp_path: Path):
    write_json_atomic(tmp_path / "s.json", {"train_nll": float("nan"), "curve": [1.5, float("inf")]})
    text = (tmp_path / "s.json").read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}")) == {
        "train_nll": None, "curve": [1.5, None]}


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_files_are_written_with_the_umask_mode(tmp_path: Path, umask: int):
    old = os.umask(umask)
    try:
        write_lines_atomic(tmp_path / "a.txt", ["x"])
        assert file_mode() == 0o666 & ~umask
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o666 & ~umask


def test_invalid_utf8_is_reported_in_the_file_that_has_it(tmp_path: Path):
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.en").write_bytes(b"a b\n" * 1233 + b"caf\xe9\n")
        (tmp_path / f"{split}.fr").write_text("c d\n" * 1234)
    prefixes = {s: str(tmp_path / s) for s in ("train", "dev", "test")}
    with pytest.raises(InputError, match=rf"^{tmp_path / 'train.en'}:1234: invalid UTF-8 at byte 3"):
        run_local_corpus(prefixes, "en", "fr", tmp_path / "raw")


def test_an_unclosed_seg_is_reported_at_its_own_line(tmp_path: Path):
    lines = ["<srcset>", '<doc docid="d">'] + [f'<seg id="{i}">word {i}</seg>' for i in range(1, 200)] + ["</doc>"]
    lines[126] = '<seg id="125">no closing tag'  # line 127
    (tmp_path / "t.sgm").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"t.sgm:127: <seg> without its closing </seg>"):
        read_sgm(tmp_path / "t.sgm")


def test_raw_test_references_are_kept_byte_for_byte(tmp_path: Path):
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.en").write_text("two  spaces  here\n")
        (tmp_path / f"{split}.fr").write_text("deux  espaces\tici\n")
    run_local_corpus({s: str(tmp_path / s) for s in ("train", "dev", "test")}, "en", "fr", tmp_path / "raw")
    assert (tmp_path / "raw/test.fr").read_text() == "deux  espaces\tici\n"
    assert (tmp_path / "raw/train.fr").read_text() == "deux espaces ici\n"  # training text: whitespace squeezed


def _translate(checkpoint: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return rnnsearch("translate", "--checkpoint", checkpoint, *args, stdin=stdin)


def test_translate_refuses_vocabularies_other_than_the_checkpoints(data: Path, reference: Path, tmp_path: Path):
    words = (data / "vocab.en.tsv").read_text().splitlines()
    (tmp_path / "other.tsv").write_text("\n".join(words[:-1]) + "\n")
    proc = _translate(reference, "--src-vocab", str(tmp_path / "other.tsv"), "--tgt-vocab",
                      str(data / "vocab.fr.tsv"), stdin="a b\n")
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"{tmp_path / 'other.tsv'}: not the src vocabulary {reference} was trained with" in proc.stderr


def test_translate_reports_empty_cut_and_unknown_lines(data: Path, reference: Path):
    src = (data / "dev.en").read_text().splitlines()[:2]
    stdin = "\n".join([src[0], "", "zzqx qqzy", src[1]]) + "\n"
    proc = _translate(reference, "--max-len-a", "0", "--max-len-b", "2", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")
    assert len(out) == 5 and out[1] == "" and out[4] == ""  # four lines, the empty one empty
    cut = re.search(r"(\d) of 4 lines whose translation reached the output limit \(0 × source length \+ 2 "
                    r"words\) and may be cut short: line ([\d, ]+)", proc.stderr)
    assert cut and "1" in cut.group(2).split(", ") and "2" not in cut.group(2).split(", ")
    assert "1 of 4 lines without a single word of the model's source vocabulary: line 3" in proc.stderr


def _dry_run(ws: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--snakefile", str(REPO / "Snakefile"), "-d",
                           str(ws), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    return proc.stdout + proc.stderr


def test_yaml_errors_name_file_and_line_under_snakemake(tmp_path: Path):
    text = (REPO / "params.yaml").read_text()
    (tmp_path / "params.yaml").write_text(text + "broken: [12\n")
    line = len(text.splitlines()) + 2  # the parser stops at the end of the file, after the unclosed [
    out = _dry_run(tmp_path)  # libyaml's words ("did not find expected"), or PyYAML's own where it has no libyaml
    assert re.search(rf"params\.yaml:{line}: not valid YAML \((did not find )?expected ',' or '\]'", out), out
    (tmp_path / "params.yaml").write_text(text)
    (tmp_path / "overlay.yaml").write_text("decode:\n  beam: 5\n  batch_size: 8\n  beam: 6\n")
    assert "overlay.yaml:4: key 'beam' given twice (first on line 2)" in _dry_run(tmp_path, "--configfile",
                                                                               str(tmp_path / "overlay.yaml"))


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_a_folder_that_cannot_hold_the_temporary_names_the_users_file(tmp_path: Path, monkeypatch, err):
    """A read-only or forbidden folder fails at the hidden temporary beside the file: the error names the user's
    path, not `.out.txt.<random>.tmp`, and nothing is left (the regression of `translate --output ro/out.txt`)."""
    import tempfile

    from rnnsearch.textio import WriteError, write_lines_atomic

    def refuse(prefix, suffix, dir):
        raise OSError(err, os.strerror(err), os.path.join(dir, f"{prefix}axyh6_h2{suffix}"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    out = tmp_path / "ro" / "out.txt"
    with pytest.raises(WriteError) as raised:
        write_lines_atomic(out, ["a"])
    assert str(raised.value) == f"{out}: cannot write ({os.strerror(err)}); nothing was written under this name"
    assert list(out.parent.iterdir()) == []
