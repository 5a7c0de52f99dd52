"""The names figures and tables give models: the paper's (RNNencdec-30, RNNsearch-50, RNNsearch-50*, §4.2) for
the models of params.yaml and paper.yaml, the config key for any other. Files and JSONs keep the config keys."""

from __future__ import annotations

import re

_PAPER = re.compile(r"(rnnencdec|rnnsearch)-(\d+)(-star)?")
_ARCH = {"rnnencdec": "RNNencdec", "rnnsearch": "RNNsearch"}


def paper_name(key: str, arch: str | None) -> str:
    """`rnnsearch-50` → RNNsearch-50, `rnnsearch-50-star` → RNNsearch-50* when the model's architecture is the one
    its key names; any other key (a user's own model, or `rnnsearch-50` set to another arch) as it is."""
    m = _PAPER.fullmatch(key)
    if m is None or m.group(1) != arch:
        return key
    return f"{_ARCH[arch]}-{m.group(2)}" + ("*" if m.group(3) else "")


def paper_names(records: list[dict]) -> dict[str, str]:
    """{config key: name shown} for score or train_stats records (each with "model" and "arch")."""
    return {r["model"]: paper_name(r["model"], r.get("arch")) for r in records}
