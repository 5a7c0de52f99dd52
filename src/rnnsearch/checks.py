"""Checks of params.yaml beyond what its JSON schema can say (rnnsearch.config runs them): numbers that are not
finite, and GNMT's penalties where they cannot take effect. No torch here: Snakemake parses the workflow with them."""

from __future__ import annotations

import math
from typing import Any, Iterable

from rnnsearch.model.presets import PRESETS


def dotted(path: Iterable[Any]) -> str:
    """A key's path as params.yaml's dotted name (train.lr)."""
    return ".".join(str(p) for p in path) or "(top level)"


def non_finite(value: Any, schema: dict, path: tuple = ()) -> list[str]:
    """A problem for each NaN or ±inf in `value` (params.yaml's `.nan`, `.inf`; --config's, `dvc exp run -S`'s),
    naming its key and what the schema allows there."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite(v, _below(schema, k), path + (k,))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite(v, _below(schema, i), path + (i,))]
    if not isinstance(value, float) or math.isfinite(value):
        return []
    bounds = [f"{sign} {schema[word]}" for word, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"),
                                                          ("maximum", "≤"), ("exclusiveMaximum", "<")) if word in schema]
    return [f"'{dotted(path)}': expected a finite number{' ' + ' and '.join(bounds) if bounds else ''}, got {value}"]


def _below(schema: dict, key: str | int) -> dict:
    """The part of a JSON schema that describes `key` of the value `schema` describes ({} where none does)."""
    if isinstance(key, int):
        items = schema.get("items")
        return items if isinstance(items, dict) else {}
    if key in schema.get("properties", {}):
        return schema["properties"][key]
    further = schema.get("additionalProperties")
    return further if isinstance(further, dict) else {}


def has_attention(entry: dict) -> bool:
    """Whether a model of `models` (its entry: arch and overrides) has an alignment model."""
    return entry.get("attention", PRESETS[entry["arch"]]["attention"]) != "none"


def penalty_checks(config: dict) -> list[str]:
    """GNMT's penalties (decode.length_penalty, decode.coverage_penalty) where they can take effect."""
    decode, problems = config["decode"], []
    if decode["length_penalty"] or decode["coverage_penalty"]:
        if decode["length_norm"]:
            problems.append("'decode.length_norm': GNMT's penalties replace its division by the length; set it false")
        if decode["beam"] == 1:
            problems.append("'decode.beam': GNMT's penalties rank a beam's finished translations; beam 1 has one")
    blind = [name for name, entry in config["models"].items() if not has_attention(entry)]
    if decode["coverage_penalty"] and blind:
        problems.append(f"'decode.coverage_penalty' sums each model's attention, and {', '.join(blind)} have none: "
                        f"drop them from this run (an overlay's `remove: [{', '.join('models.' + b for b in blind)}]`)")
    return problems
