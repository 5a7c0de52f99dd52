"""The conda environment for cluster users pins what pyproject.toml pins."""

from __future__ import annotations

import tomllib

import yaml

from .conftest import REPO


def test_conda_env_pins_match_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + project["optional-dependencies"]["workflow"]
    env = yaml.safe_load((REPO / "envs" / "rnnsearch.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    for line in pip:
        if line.startswith("-e"):
            continue
        assert line in declared, f"envs/rnnsearch.yaml pins {line!r}, pyproject.toml does not"
    pinned = [d for d in declared if "==" in d]
    assert all(p in pip for p in pinned), f"pyproject.toml pins {pinned}; the conda env must carry them all"
