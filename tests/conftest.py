"""Shared fixtures: the repository root, the tiny config, a tiny trained pipeline built through the stage
functions (no Snakemake), and the real data in ../shared/data when it is there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rnnsearch import config as cfg

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RNNSEARCH_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def tiny_config() -> dict:
    return cfg.load_params([REPO / "params.yaml", REPO / "tests" / "configs" / "tiny.yaml"])


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "PROVENANCE.md").exists():
        pytest.skip(f"real data not found at {SHARED_DATA} (set RNNSEARCH_SHARED_DATA)")
    return SHARED_DATA
