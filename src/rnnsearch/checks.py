"""Checks of params.yaml beyond what its JSON schema can say (rnnsearch.config runs them): numbers that are not
finite, and GNMT's penalties where they cannot take effect. No torch here: Snakemake parses the workflow with them."""

from __future__ import annotations

import math
from typing import Any, Iterable

from rnnsearch.model.presets import PRESETS
from rnnsearch.settings import MODEL_TRAIN_KEYS, train_config


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


def decoding(config: dict, name: str) -> dict:
    """The `decode:` settings model `name` is decoded with: params.yaml's, with its entry's own `decode:` over them
    (an entry that `decodes` another)."""
    return {**config["decode"], **config["models"][name].get("decode", {})}


def trained(config: dict, name: str) -> str:
    """The model whose training `name`'s checkpoints are: the one it `decodes`, else itself."""
    return config["models"][name].get("decodes", name)


def penalty_checks(config: dict) -> list[str]:
    """GNMT's penalties (decode.length_penalty, decode.coverage_penalty, or an entry's own `decode:`) where they
    can take effect."""
    problems, blind = [], []
    for name, entry in config["models"].items():
        decode, own = decoding(config, name), entry.get("decode", {})

        def key(k: str) -> str:
            return f"'models.{name}.decode.{k}'" if k in own else f"'decode.{k}'"

        if decode["length_penalty"] or decode["coverage_penalty"]:
            if decode["length_norm"]:
                problems.append(f"{key('length_norm')}: GNMT's penalties replace its division by the length; set it "
                                "false")
            if decode["beam"] == 1:
                problems.append("'decode.beam': GNMT's penalties rank a beam's finished translations; beam 1 has one")
        if decode["coverage_penalty"] and not has_attention(entry):
            blind.append((key("coverage_penalty"), name))
    for where in dict.fromkeys(w for w, _ in blind):
        names = [n for w, n in blind if w == where]
        problems.append(f"{where} sums each model's attention, and {', '.join(names)} "
                        f"{'have' if len(names) > 1 else 'has'} none: drop {'them' if len(names) > 1 else 'it'} from "
                        f"this run (an overlay's `remove: [{', '.join('models.' + n for n in names)}]`)")
    return list(dict.fromkeys(problems))


def coverage_loss_checks(config: dict) -> list[str]:
    """train.coverage_loss (or a model's own) sums α: a model without attention has none to sum."""
    problems = []
    for name, entry in config["models"].items():
        own = "coverage_loss" in entry
        if train_config(config, name).coverage_loss and not has_attention(entry):
            where = f"'models.{name}.coverage_loss'" if own else "'train.coverage_loss'"
            problems.append(f"{where} sums the alignments α of {name}, which has no attention: set it 0 "
                            f"{'there' if own else f'for it (models.{name}.coverage_loss: 0)'}")
    return problems


def decodes_checks(config: dict, network) -> list[str]:
    """An entry that `decodes` another model (a decode-only ablation): that model trains (it decodes no other), is
    the same network on the same text, and the entry sets nothing that only a training of its own could use.
    `network(config, name)`: a model's resolved architecture (rnnsearch.model.presets.model_config)."""
    problems, models = [], config["models"]
    for name, entry in models.items():
        where = f"'models.{name}.decodes'"
        if "decode" in entry and "decodes" not in entry:
            problems.append(f"'models.{name}.decode': a model's own decode settings belong to an entry that decodes "
                            f"it (`decodes: {name}`), so that changing them retrains nothing")
        if "decodes" in models.get(entry.get("continues"), {}):
            problems.append(f"'models.{name}.continues': {entry['continues']} trains nothing; continue "
                            f"{models[entry['continues']]['decodes']}")
        source = entry.get("decodes")
        if source is None:
            continue
        if source not in models or source == name or "decodes" in models[source]:
            trainings = ", ".join(m for m, e in models.items() if "decodes" not in e and m != name)
            problems.append(f"{where}: {source!r} is not another trained model of 'models' ({trainings})")
            continue
        same_text = entry["train_max_len"] == models[source]["train_max_len"]
        if network(config, name) != network(config, source) or not same_text:
            problems.append(f"{where}: {name} must be {source}'s network (arch, sizes and switches) and train_max_len")
        idle = [k for k in ("continues", *MODEL_TRAIN_KEYS) if k in entry]
        if idle:
            problems.append(f"{where}: {name} trains nothing, so {', '.join(idle)} cannot take effect; drop them")
    return problems
