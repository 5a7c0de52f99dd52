"""params.yaml: loading, overlays, validation with messages that name the key, and what each stage reads.

`params.yaml` is the one source of configuration. Overlays (e.g. `workflow/configs/paper.yaml`) are merged
over it key by key, the way Snakemake merges `--configfile`: a value restated (null included) changes nothing,
so a copy of params.yaml is an overlay too. An entry of a collection (a model of `models`, a set of
`extra_tests`) is dropped by naming it in the overlay's top-level `remove:` list. The merged config is validated against
`workflow/schemas/params.schema.yaml` (the same file Snakemake validates with) plus a few cross-key checks.
`snakemake --config key=value` (a section as YAML: `--config 'train={lr: 0.001}'`) is merged last; the workflow
hands it to the stages it starts in $RNNSEARCH_CONFIG.

Each stage reads only the keys its record in `rnnsearch.commands` declares; the Snakemake rules declare the same
keys as `params:` (so a change reruns exactly the affected jobs) and `dvc.yaml` lists them under `params:`.
"""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

import yaml

from rnnsearch.checks import coverage_loss_checks, decodes_checks, dotted as _key, has_attention, non_finite
from rnnsearch.checks import penalty_checks
from rnnsearch.checks import decoding, trained  # noqa: F401 (config.decoding, config.trained: the workflow's)
from rnnsearch.commands import BY_NAME, Params
from rnnsearch.data.corpus import SOURCES
from rnnsearch.model.presets import PRESETS, check, model_config  # noqa: F401 (config.model_config: the model)
from rnnsearch.settings import MODEL_TRAIN_KEYS, TrainConfig, train_config, typed  # noqa: F401
from rnnsearch.textio import InputError

REPO = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO / "workflow" / "schemas" / "params.schema.yaml"
CONFIG_ENV = "RNNSEARCH_CONFIG"  # the workflow's --config values, for the stages it starts
# Settings of how a job runs, like the machine it runs on: a change of one reruns no job (rerun_keys). On a GPU they
# change only speed; on a CPU the thread count changes the rounding of matrix products, as another processor does
# (docs/ablations.md). train_stats.json and decode_stats.json record the threads a job ran with.
SPEED_ONLY = ("train.threads", "decode.threads")


class ConfigError(InputError):
    """An invalid params.yaml: the message names the key and what was expected."""


REMOVE = "remove"  # an overlay's list of entries to drop: remove: [models.rnnencdec-30, extra_tests.news]
COLLECTIONS = ("models", "extra_tests")  # the mappings whose keys the user names, and so may remove


def merge(base: dict, overlay: dict) -> dict:
    """Deep merge: dicts merge key by key, anything else in `overlay` (null included) replaces the value in
    `base`."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def overlay(config: dict, data: dict, source: str) -> dict:
    """`data` (one params file, or the --config values) merged over `config`, then its `remove:` entries dropped:
    each a dotted `<collection>.<name>` of COLLECTIONS that the merged configuration has."""
    data = dict(data)
    removals = data.pop(REMOVE, [])
    if not isinstance(removals, list) or not all(isinstance(r, str) for r in removals):
        raise ConfigError(f"{source}: '{REMOVE}': expected a list of entries such as models.rnnencdec-30, "
                          f"got {removals!r}")
    out = merge(config, data)
    for entry in removals:
        collection, _, name = entry.partition(".")
        if collection not in COLLECTIONS or not name:
            raise ConfigError(f"{source}: '{REMOVE}': {entry!r} is not an entry of {' or '.join(COLLECTIONS)} "
                              f"(expected e.g. models.rnnencdec-30)")
        if name not in (out.get(collection) or {}):
            have = ", ".join(out.get(collection) or {}) or "none"
            raise ConfigError(f"{source}: '{REMOVE}': {entry!r} is not in the configuration ({collection}: {have})")
        del out[collection][name]
    return out


# libyaml's parser where PyYAML was built with it (its wheels are): load_params, which each stage and each Snakemake
# start runs, took 0.12 s with PyYAML's parser in Python, 0.02 s with libyaml's.
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (YAML's last-one-wins hides a pasted
    block)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f"{self.name}:{key_node.start_mark.line + 1}: key {key!r} given twice (first on "
                                  f"line {seen[key] + 1}): YAML would keep only the last one")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _UniqueKeyLoader.construct_mapping)


def load_yaml(path: str | Path) -> dict:
    """A params file: YAML syntax errors and duplicate keys are ConfigErrors naming the file and line."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: file not found")
    try:
        loader = _UniqueKeyLoader(path.read_text(encoding="utf-8-sig"))
        loader.name = str(path)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: invalid UTF-8") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level, got {type(data).__name__}")
    return data


def load_params(files: Iterable[str | Path], overrides: dict | None = None) -> dict:
    """Merge the files in order, then `overrides` (Snakemake's --config values), and validate the result."""
    files = list(files)
    config: dict = {}
    for f in files:
        config = overlay(config, load_yaml(f), str(f))
    source = " + ".join(str(f) for f in files)
    if overrides:
        config = overlay(config, overrides, "--config")
        source += " + --config " + json.dumps(overrides, sort_keys=True)
    validate(config, source=source)
    return config


def command_line(settings: dict) -> dict:
    """Snakemake's --config values with types: Snakemake types a plain value (3, 0.5, true) but reads a section
    (`train={lr: 0.001}`) with YAML's base loader, every value in it a string; these are read again as YAML."""

    def typed_value(value):
        if isinstance(value, dict):
            return {k: typed_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [typed_value(v) for v in value]
        return yaml.safe_load(value) if isinstance(value, str) else value

    return {key: typed_value(value) if isinstance(value, (dict, list)) else value for key, value in settings.items()}


def env_overrides() -> dict | None:
    """The --config values of the `snakemake` run that started this stage ($RNNSEARCH_CONFIG, JSON), if any."""
    text = os.environ.get(CONFIG_ENV)
    return json.loads(text) if text else None


def _schema() -> dict:
    """workflow/schemas/params.schema.yaml with each data source's section (`data.<name>`, from its record)."""
    if not SCHEMA_PATH.exists():
        raise ConfigError(f"{SCHEMA_PATH}: schema not found (rnnsearch must run from its repository checkout)")
    schema = yaml.load(SCHEMA_PATH.read_text(encoding="utf-8"), Loader=SafeLoader)
    data = schema["properties"]["data"]
    data["properties"].update({name: s.section for name, s in SOURCES.items() if s.section})
    data["properties"]["source"]["enum"] = list(SOURCES)
    return schema


def validate(config: dict, source: str = "params.yaml") -> None:
    """Raise ConfigError listing every problem, each with its dotted key."""
    import jsonschema

    schema = _schema()
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for err in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        key = _key(err.absolute_path)
        if isinstance(err.instance, float) and not math.isfinite(err.instance):
            continue  # non_finite says it
        if err.validator == "additionalProperties":
            allowed = sorted(err.schema.get("properties", {}))
            extra = sorted(set(err.instance) - set(allowed)) if isinstance(err.instance, dict) else []
            for e in extra:
                name = f"{key}.{e}" if err.absolute_path else e
                hint = f" (allowed here: {', '.join(allowed)})" if allowed else ""
                problems.append(f"unknown key '{name}'{hint}")
        elif err.validator == "required":
            missing = err.message.split("'")[1]
            problems.append(f"missing required key '{key + '.' if err.absolute_path else ''}{missing}'")
        elif err.validator == "type":
            dropped = err.instance is None and len(err.absolute_path) == 2 and err.absolute_path[0] in COLLECTIONS
            hint = f" (to drop it, name it in an overlay's list `{REMOVE}: [{key}]`)" if dropped else ""
            problems.append(f"'{key}': expected {err.validator_value}, got {err.instance!r}{hint}")
        elif err.validator == "enum":
            problems.append(f"'{key}': expected one of {', '.join(map(str, err.validator_value))}, got {err.instance!r}")
        elif err.validator == "propertyNames":
            problems.append(f"'{key}': model name {err.instance!r} must match {err.schema.get('pattern')}")
        else:
            problems.append(f"'{key}': {err.message}")
    problems = non_finite(config, schema) + problems  # NaN passes every bound of a JSON schema (a NaN < 0 is false)
    if not problems:
        problems = _cross_checks(config)
    if problems:
        raise ConfigError(f"{source}: invalid configuration:\n  - " + "\n  - ".join(problems))


def _cross_checks(config: dict) -> list[str]:
    problems = []
    fig = config["figures"]
    target = config["models"].get(fig["alignment_model"])
    if target is None:
        problems.append(f"'figures.alignment_model': {fig['alignment_model']!r} is not a key of 'models' "
                        f"({', '.join(config['models'])})")
    elif not has_attention(target):
        problems.append(f"'figures.alignment_model': {fig['alignment_model']!r} has no attention (arch {target['arch']})")
    for name, entry in config["models"].items():
        sizes = {**config["model"], **entry}
        switches = {**PRESETS[entry["arch"]], **entry, "n": sizes["n"]}
        problems += [f"'models.{name}': {p}" for p in check(switches)]
    problems += _continuation_checks(config)
    problems += _data_checks(config["data"])
    if config["vocab"]["kind"] == "sentencepiece" and config["aer"]["gold"] != "none":
        problems.append("'aer.gold': word alignments cannot score the attention of a subword model "
                        "(vocab.kind: sentencepiece); set aer.gold: none")
    if config["aer"]["gold"] == "synthetic" and config["data"]["source"] != "synthetic":
        problems.append("'aer.gold': 'synthetic' links exist only for data.source: synthetic (give a file, or none)")
    if config["peer"]["model"] not in config["models"]:
        problems.append(f"'peer.model': {config['peer']['model']!r} is not a key of 'models' ({', '.join(config['models'])})")
    if fig["alignment_min_len"] > fig["alignment_max_len"]:
        problems.append("'figures.alignment_min_len' is larger than 'figures.alignment_max_len'")
    problems += penalty_checks(config) + decodes_checks(config, model_config) + coverage_loss_checks(config)
    edges = config["score"]["length_buckets"]
    if edges != sorted(set(edges)):
        problems.append(f"'score.length_buckets': upper edges must increase strictly, got {edges}")
    return problems


def _continuation_checks(config: dict) -> list[str]:
    """A model that `continues` another: the same network and training text, a larger budget, no schedule that
    the parent's budget shapes, no cycle."""
    problems, models = [], config["models"]
    for name, entry in models.items():
        parent = entry.get("continues")
        if parent is None:
            continue
        where = f"'models.{name}.continues'"
        if parent not in models or parent == name:
            problems.append(f"{where}: {parent!r} is not another key of 'models' ({', '.join(models)})")
            continue
        try:
            ancestors(config, name)
        except ConfigError as e:
            problems.append(str(e))
            continue
        if model_config(config, name) != model_config(config, parent):
            problems.append(f"{where}: {name} and {parent} must be the same network (arch, sizes and switches)")
        if entry["train_max_len"] != models[parent]["train_max_len"]:
            problems.append(f"{where}: {name} must train on {parent}'s text (train_max_len "
                            f"{models[parent]['train_max_len']}, got {entry['train_max_len']})")
        if job_updates(config, name) <= 0:
            problems.append(f"{where}: max_updates {train_config(config, name).max_updates} leaves nothing to "
                            f"train after {parent}'s {train_config(config, parent).max_updates}")
    if any("continues" in e for e in models.values()) and config["train"]["lr_decay"]:
        problems.append(f"'train.lr_decay': {config['train']['lr_decay']}: a continued model's step sizes would "
                        "jump back up after its parent's had fallen by the parent's budget; continuing needs 0 "
                        "(a constant rate, the paper's)")
    return problems


def ancestors(config: dict, model: str) -> list[str]:
    """The models `model` continues, nearest first (models.<name>.continues, in turn)."""
    chain, name = [], config["models"][model].get("continues")
    while name is not None:
        if name == model or name in chain:
            raise ConfigError(f"'models.{model}.continues': a cycle ({' -> '.join([model, *chain, name])})")
        chain.append(name)
        name = config["models"].get(name, {}).get("continues")
    return chain


def _data_checks(data: dict) -> list[str]:
    """Two languages; the chosen source's section, and its own checks (rnnsearch.data.corpus.SOURCES)."""
    pair, source = (data["src"], data["tgt"]), SOURCES[data["source"]]
    if pair[0] == pair[1]:
        return [f"'data.src', 'data.tgt': both are {pair[0]!r}; expected the source and the target language, two codes"]
    if source.section and source.name not in data:
        keys = ", ".join(source.section["properties"])
        return [f"'data.{source.name}': data.source is '{source.name}' but no data.{source.name} is given ({keys})"]
    return source.check(data)


def lookup(config: dict, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def stage_params(config: dict, stage: str, model: str | None = None) -> dict[str, Any]:
    """{dotted key: value} of exactly what `stage` reads."""
    return Params({k: lookup(config, k) for k in declared_keys(config, stage, model)})


def declared_keys(config: dict, stage: str, model: str | None = None) -> list[str]:
    """The keys `stage` declares, for `model`, that the params hold (a model entry's optional keys, such as the
    `decode:` of an entry that decodes another, only where given); a stage that reads its model's entry also reads
    the entries of the models that one continues (their budgets are the start of its training)."""
    keys = [k for k in BY_NAME[stage].keys_for(model, config["data"]["source"]) if _holds(config, k)]
    if model is not None and f"models.{model}" in keys:
        keys += [f"models.{m}" for m in ancestors(config, model)]
    return keys


def _holds(config: dict, dotted: str) -> bool:
    try:
        lookup(config, dotted)
    except KeyError:
        return False
    return True


def rerun_params(config: dict, stage: str, model: str | None = None) -> dict[str, Any]:
    """{dotted key: value} of `rerun_keys`: a rule's `params:`, so that a change of one reruns its jobs."""
    return {k: lookup(config, k) for k in rerun_keys(config, stage, model)}


def rerun_keys(config: dict, stage: str, model: str | None = None) -> list[str]:
    """The keys of what `stage` reads whose change can change what it writes: its declared keys, a section that
    holds a speed-only setting (SPEED_ONLY) split into its other keys. Snakemake's `params:` and dvc.yaml's
    `params` take these, so that a change of threads reruns no job."""
    keys = []
    for key in declared_keys(config, stage, model):
        if any(s.startswith(key + ".") for s in SPEED_ONLY):
            keys += [f"{key}.{leaf}" for leaf in lookup(config, key) if f"{key}.{leaf}" not in SPEED_ONLY]
        elif key not in SPEED_ONLY:
            keys.append(key)
    return keys


def params_files(given: list[str] | None) -> list[str]:
    """--params as given; else $RNNSEARCH_PARAMS (the workflow's params.yaml and overlays, os.pathsep between
    them); else params.yaml."""
    env = os.environ.get("RNNSEARCH_PARAMS")
    return given or (env.split(os.pathsep) if env else ["params.yaml"])


def dump(files: Iterable[str | Path] | None) -> str:
    """The merged, validated params files as YAML."""
    return yaml.safe_dump(load_params(params_files(files), env_overrides()), sort_keys=False)


def print_params(params: list[str] | None) -> None:
    """`rnnsearch check-params`: the merged, validated params files (--params) on stdout, as YAML."""
    print(dump(params), end="")


def job_updates(config: dict, name: str) -> int:
    """The updates a model's own training job makes: its max_updates, less those of the model it continues."""
    parent = config["models"][name].get("continues")
    return train_config(config, name).max_updates - (train_config(config, parent).max_updates if parent else 0)


def train_lengths(config: dict) -> list[int]:
    """The training-set length limits the models need (the paper: 30 and 50)."""
    return sorted({m["train_max_len"] for m in config["models"].values()})
