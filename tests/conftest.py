"""Shared fixtures: the repository root, the tiny config, a tiny trained pipeline built through the stage
functions (no Snakemake), and the real data in ../shared/data when it is there."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rnnsearch import config as cfg

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RNNSEARCH_SHARED_DATA", REPO.parent / "shared" / "data"))


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` skip with the reason where PyTorch sees no GPU."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU; torch {torch.__version__} sees none")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]  # parametrize a test over both


@pytest.fixture(autouse=True)
def torch_threads():
    """Benchmarks and stages set torch's thread count for the process; give every test the count it started with
    (results such as a training's last digits depend on it)."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


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
