"""Shared fixtures: the repository root, the tiny config, the tiny DAG built once per test run by Snakemake,
and the real data in ../shared/data when it is there."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rnnsearch import config as cfg

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # rnnsearch, snakemake, dvc and torchrun of this environment
SHARED_DATA = Path(os.environ.get("RNNSEARCH_SHARED_DATA", REPO.parent / "shared" / "data"))


# Under pytest-xdist (README's test command: four workers, `--dist loadfile`), each test file runs on one worker,
# so that its module fixtures are built once and its tests keep their order. The files of long whole-pipeline runs
# go first: the two Slurm files (waiting on Slurm's queue, mostly) on two workers at once while the other two run
# the rest, DVC's chain of experiments (test_dvc.py, the longest on the cores) first. (test_triton.py's interpreter
# test, about 6 minutes of a core under load, fourth instead of twelfth: 15 min 18 s against 14 min 42 s here.)
LONG_FIRST = ("test_slurm_timelimit.py", "test_slurm.py", "test_dvc.py", "test_workflow.py", "test_peer.py",
              "test_multi30k.py", "test_docs.py", "test_reruns.py", "test_sentencepiece.py", "test_wmt14.py",
              "test_resume.py", "test_triton.py", "test_distributed.py", "test_rehearsal.py", "test_explorer.py")


def pytest_xdist_auto_num_workers(config) -> int:
    """pytest-xdist's `-n auto` (pyproject.toml's addopts): four workers for the whole suite, so that the files that
    wait (on Slurm's queue, on subprocesses) leave two to keep two cores busy; one per core for the quick loop
    (`-m "not slow"`), whose tests are all CPU-bound: four workers there took 13 % more CPU time (each one collects
    every file, and they contend for the cores) and 10 % longer on 2 cores."""
    if re.search(r"\bnot\s+slow\b", config.option.markexpr or ""):
        return os.cpu_count() or 1
    return 4


def pytest_configure(config):
    """Under pytest-xdist, each worker's share of the cores: torch's threads, and OMP_NUM_THREADS for the stages it
    starts. Two workers of two OpenMP threads each on two cores made every in-process torch test 8 to 15 times
    slower (threads spinning for a core the other worker holds). A process that sets its own threads (a rehearsal,
    a benchmark: 2 on 2 cores) still spins where the other workers hold the cores: OMP_WAIT_POLICY=PASSIVE makes
    its waiting threads sleep (the rehearsal's test beside two busy processes: 174 CPU-seconds, 73 with it)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch

        threads = str(max(1, (os.cpu_count() or 1) // workers))
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = threads
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        torch.set_num_threads(int(threads))


def pytest_collection_modifyitems(config, items):
    """The files of LONG_FIRST first, in that order; tests marked `cuda` skip with the reason where PyTorch sees
    no GPU."""
    import torch

    rank = {name: k for k, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))  # stable: the rest keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU; torch {torch.__version__} sees none")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    """The machine the run's durations were measured on: the CPU, its cores, whether it has AVX-512 and what
    PyTorch's CPU kernels use (README's test times name it)."""
    import torch

    from rnnsearch.runtime import cpu_name

    cpuinfo = Path("/proc/cpuinfo")
    avx512 = "yes" if cpuinfo.exists() and " avx512f" in cpuinfo.read_text() else "no"
    terminalreporter.write_line(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, AVX-512: {avx512}, torch "
                                f"{torch.__version__} CPU kernels: {torch.backends.cpu.get_cpu_capability()}")


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]  # parametrize a test over both


@pytest.fixture(autouse=True)
def torch_threads():
    """Benchmarks and stages set torch's thread count and (on CUDA) its TF32 switches for the process; give every
    test the count and switches it started with (results such as a training's last digits depend on them)."""
    import torch

    threads = torch.get_num_threads()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


@pytest.fixture
def float32_products():
    """float32 products in float32 on a GPU: cuDNN's default lets its GRU (the encoder of the plain path and of
    search) use TF32, whose results differ from float32's by about 1e-3, past the comparisons' bounds (torch_threads
    restores the switches after the test)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False


@pytest.fixture
def short_gemm(monkeypatch):
    """Utilisation's denominator, the GEMM rate, measured on 512² operands for 0.2 s: what a benchmark's test checks
    is that it is measured and divided by, not its value (2048² for 2 s, as the benchmarks measure it, took 4 to
    5 s of a test's time a benchmark on 2 cores). `speed.gemm_peak_gflops` and the names it is imported under."""
    from rnnsearch.bench import profile, speed

    real = speed.gemm_peak_gflops

    def short(*args, **kw) -> float:
        return real(*args, **{**kw, "seconds": 0.2, "size": 512})

    for module in (speed, profile):
        monkeypatch.setattr(module, "gemm_peak_gflops", short)


@pytest.fixture(scope="session")
def tiny_config() -> dict:
    return cfg.load_params([REPO / "params.yaml", REPO / "tests" / "configs" / "tiny.yaml"])


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "PROVENANCE.md").exists():
        pytest.skip(f"real data not found at {SHARED_DATA} (set RNNSEARCH_SHARED_DATA)")
    return SHARED_DATA


def repo_copy(dest: Path, overrides: dict | None = None) -> Path:
    """The repository's files (as a fresh clone would have them) in `dest`, with params.yaml replaced by the tiny
    config merged over it, then `overrides`."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, dest / f)
    merged = cfg.overlay(cfg.load_params([REPO / "params.yaml", REPO / "tests" / "configs" / "tiny.yaml"]), overrides or {},
                         "overrides")
    cfg.validate(merged)
    (dest / "params.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
    return dest


def _wait_policy() -> dict:
    """OMP_WAIT_POLICY where pytest_configure set it: the commands of a clean environment sleep too."""
    return {"OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"]} if "OMP_WAIT_POLICY" in os.environ else {}


HANG = 1200  # seconds: the longest command of the tests (the tiny DAG's build) takes about 4 minutes on 2 cores


def run(args: list, cwd: Path, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """A command of this environment (`snakemake`, `dvc`, `rnnsearch`, ...) in `cwd`, with $HOME=cwd as a user's
    clone would see it; with `check`, a failure shows the ends of both streams. A command that hangs fails its test
    after `timeout` (default HANG) seconds, killed, instead of holding the whole run."""
    env = {"PATH": f"{BIN}:/usr/bin:/bin:/usr/sbin", "HOME": str(cwd), "PYTHONUNBUFFERED": "1", **_wait_policy(),
           **kw.pop("env", {})}
    kw.setdefault("timeout", HANG)
    if Path(args[0]).name == "snakemake" and set(kw) <= {"timeout"}:
        from .forks import snakemake_command  # a fork of an interpreter that imported Snakemake: the same main()

        p = snakemake_command([str(a) for a in args[1:]], cwd, env, kw.get("timeout"))
    else:
        p = subprocess.run([str(BIN / args[0]) if (BIN / args[0]).exists() else args[0], *map(str, args[1:])], cwd=cwd,
                           capture_output=True, text=True, env=env, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout[-3000:]}\n"
                             f"{p.stderr[-3000:]}")
    return p


def built_once(tmp_path_factory, name: str, build) -> Path:
    """The folder `name`, made by `build(folder)` once per test run: by the first pytest-xdist worker that asks
    (the others wait for it, then share it) or by the one process. Tests only read it."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    folder, done = shared / name, shared / f"{name}.built"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def tiny_dag(tmp_path_factory) -> Path:
    """The whole DAG, `snakemake --cores 2` in a copy of the repository with the tiny config and two replicates of
    each model, built once per test run. Tests only read it; a test that changes or extends it works in
    `dag_copy(tiny_dag, ...)`."""
    return built_once(tmp_path_factory, "tiny_dag",
                      lambda ws: run(["snakemake", "--cores", "2"], repo_copy(ws, {"replicates": 2})))


def browser() -> str | None:
    """Headless Chromium's command where it is installed (.ci/run installs Debian's chromium)."""
    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


# What a person can tell apart on a screen: Chromium lays boxes out in fractions of a pixel and rounds them
# differently from one release to the next, so the browser tests compare positions to within a pixel.
PIXEL = 1.0


def on_screen(box: dict, height: float) -> bool:
    """`box` (its top and bottom in a window's coordinates) wholly inside a window `height` px tall, to a pixel."""
    return box["top"] >= -PIXEL and box["bottom"] <= height + PIXEL


# What every tests/browser script calls with its findings: they go into PRE#rnnsearch-check, which --dump-dom prints.
DONE = """function rnnsearchCheckDone(report) {
  const pre = document.createElement("pre");
  pre.id = "rnnsearch-check";
  pre.textContent = JSON.stringify(report);
  document.body.appendChild(pre);
}"""


def page_check(page: Path, script: str, tmp_path: Path, before: str, prelude: str = "",
               window: tuple[int, int] = (1280, 1000)) -> dict:
    """`page` with tests/browser/<script> (after `prelude`) injected before the last `before` (libraries inlined
    in a page may contain the tag in strings), opened by headless Chromium with every host unresolvable: the JSON
    the script leaves in PRE#rnnsearch-check. Skips where there is no Chromium."""
    chrome = browser()
    if chrome is None:
        pytest.skip("no chromium on this machine (.ci/run installs Debian's chromium)")
    text = page.read_text(encoding="utf-8")
    head, tail = text.rsplit(before, 1)
    js = (Path(__file__).parent / "browser" / script).read_text(encoding="utf-8")
    check = tmp_path / f"{page.stem}_check.html"
    check.write_text(f"{head}<script>{DONE}\n{prelude}\n{js}</script>{before}{tail}", encoding="utf-8")
    dom = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'chromium'}",
                          f"--window-size={window[0]},{window[1]}",
                          "--virtual-time-budget=120000", "--dump-dom", check.as_uri()], capture_output=True,
                         text=True, timeout=300).stdout
    found = dom.rsplit('<pre id="rnnsearch-check">', 1)
    assert len(found) == 2, "the check script did not finish in the page"
    return json.loads(html.unescape(found[1].split("</pre>", 1)[0]))


def dag_copy(dag: Path, dest: Path, overrides: dict | None = None) -> Path:
    """A copy of a built DAG in `dest` (times kept, so Snakemake finds its outputs up to date), with `overrides`
    merged into its params.yaml."""
    shutil.copytree(dag, dest, symlinks=True, dirs_exist_ok=True)
    if overrides:
        overlay_params(dest, overrides)
    return dest


def overlay_params(ws: Path, overrides: dict) -> None:
    """`overrides` merged into the params.yaml of workspace `ws`, validated, and written anew at once (a rename: a
    job that starts meanwhile reads the old file or the new one, never a part)."""
    params = ws / "params.yaml"
    merged = cfg.overlay(cfg.load_params([params]), overrides, "overrides")
    cfg.validate(merged)
    params.with_suffix(".new").write_text(yaml.safe_dump(merged, sort_keys=False))
    params.with_suffix(".new").replace(params)


def processes_in(folder: Path) -> dict[int, str]:
    """This machine's processes whose working directory lies in `folder`: process id → command line."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")).is_relative_to(folder):
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return found
