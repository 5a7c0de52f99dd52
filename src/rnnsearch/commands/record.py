"""One stage record and its parts: `Stage` (a `rnnsearch <stage>` command: its help, function, arguments and
the params keys it reads), `Arg` (one command-line argument), `Params` (what a stage is given of params.yaml).
The records themselves are in `rnnsearch.commands.pipeline` (the pipeline) and `rnnsearch.commands.benchmarks`
(benchmarks and the JoeyNMT experiment).

The stage's function is its interface: `Stage.bind` passes each of its parameters by name, from the command-line
argument of that name (`--src-vocab` → `src_vocab`), from the params key the record maps it to (`settings`), or,
for a parameter typed as a dataclass, that dataclass built field by field the same way (a typed request or the
typed settings of rnnsearch.settings). tests/test_registry.py checks that every argument and setting of every
record reaches its function and that every rule's command line is one the record's parser accepts.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Arg:
    """One command-line argument: argparse's flags and keywords. `job`: read by the command around the stage
    (cli.py, rnnsearch.jobs), not passed to the stage's function."""

    flags: tuple[str, ...]
    kw: dict = field(default_factory=dict)
    job: bool = False

    @property
    def dest(self) -> str:
        return self.kw.get("dest") or self.flags[0].lstrip("-").replace("-", "_")


def arg(*flags: str, job: bool = False, **kw) -> Arg:
    return Arg(flags, kw, job)


def required(helps: dict[str, str], **kw) -> tuple[Arg, ...]:
    """Required arguments, flag → its help, with the same other keywords."""
    return tuple(Arg((f,), {"required": True, "help": h, **kw}) for f, h in helps.items())


@dataclass(frozen=True)
class Stage:
    """`settings` maps a parameter of the function to the params key it takes (dotted, `{model}` filled in from
    --model, `{source}` from data.source), or to a tuple of keys: then the parameter takes all the stage reads as one nested mapping
    (`Params.nested`; with the entries of the models its model continues, rnnsearch.config.declared_keys)."""

    name: str
    help: str
    run: str  # "module:function", the function the stage runs
    args: tuple[Arg, ...] = ()
    settings: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    params: bool = True  # takes --params (params.yaml and overlays)
    rules: tuple[str, ...] = ()  # the Snakemake rules that run it (default: its name with _ for -)
    scripts: tuple[str, ...] = ()  # files it runs in another process, from src/rnnsearch
    runs_model: bool = False  # a process that trains or decodes: rnnsearch.runtime's allocator settings
    job_log: bool = False  # a pipeline job with --out-dir: its log is also appended to <out-dir>/<name>.log
    log: bool = True  # takes --log FILE

    @property
    def module(self) -> str:
        return self.run.split(":")[0]

    def function(self) -> Callable:
        module, name = self.run.split(":")
        return getattr(importlib.import_module(module), name)

    @property
    def keys(self) -> tuple[str, ...]:
        """The params keys the stage reads, in the order its settings name them."""
        out: list[str] = []
        for key in self.settings.values():
            out += [key] if isinstance(key, str) else list(key)
        return tuple(dict.fromkeys(out))

    def keys_for(self, model: str | None = None, source: str | None = None) -> list[str]:
        """The keys with `{model}` (--model) and `{source}` (data.source) filled in; without a model, none of a
        model's keys."""
        return [k.format(model=model, source=source) for k in self.keys if model is not None or "{model}" not in k]

    def bind(self, fn: Callable, args: argparse.Namespace, p: "Params") -> tuple[dict[str, Any], set[str]]:
        """The keyword arguments of `fn` for this command line and these params, and the names they used (the
        arguments' dests and the settings' parameters)."""
        used: set[str] = set()
        return _bind(fn, self._source(args, p), set(self.settings), used), used

    def _source(self, args: argparse.Namespace, p: "Params") -> Callable[[str], Any]:
        model = getattr(args, "model", None)

        def value(name: str):
            if name in self.settings:
                key = self.settings[name]
                if isinstance(key, str):
                    return p.get(key.format(model=model, source=p.get("data.source")), _MISSING)
                return p.nested()
            return getattr(args, name, _MISSING)

        return value


_MISSING = object()


def _dataclass_of(hint) -> type | None:
    """The dataclass a parameter's type names (`X` or `X | None`), else None."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    found = [h for h in options if isinstance(h, type) and dataclasses.is_dataclass(h)]
    return found[0] if found else None


def _bind(fn_or_cls: Callable, value: Callable[[str], Any], settings: set[str], used: set[str]) -> dict[str, Any]:
    """`fn_or_cls`'s keyword arguments from `value(name)`; a setting without a value (no --params: a user's
    translation) takes the parameter's default."""
    hints = typing.get_type_hints(fn_or_cls)
    out = {}
    for name, param in inspect.signature(fn_or_cls).parameters.items():
        got, cls = value(name), _dataclass_of(hints.get(name))
        if got is not _MISSING:
            used.add(name)
            out[name] = cls(**{f.name: got[f.name] for f in dataclasses.fields(cls)}) \
                if cls is not None and isinstance(got, dict) else got
        elif cls is not None and name not in settings:
            out[name] = cls(**_bind(cls, value, settings, used))
        elif param.default is inspect.Parameter.empty:
            raise TypeError(f"{getattr(fn_or_cls, '__qualname__', fn_or_cls)}: parameter {name!r} is neither an "
                            "argument nor a setting of the stage")
    return out


class Params(dict):
    """{dotted key: value} of exactly the keys a stage declares, from the params files given with --params."""

    def nested(self) -> dict:
        """The same values as a nested mapping ({"models": {"rnnsearch-50": …}, …})."""
        out: dict = {}
        for key, value in self.items():
            *parents, leaf = key.split(".")
            node = out
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        return out


def at_least(low: float, kind=int) -> Callable[[str], float]:
    """An argparse type: a number (`kind`) of at least `low`; anything else is the stage's usage error naming
    the accepted range."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'} of at least "
                                             f"{low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'} of at least "
                                             f"{low}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def name_value(text: str) -> tuple[str, str]:
    """An argparse type: NAME=VALUE as the pair (NAME, VALUE), split at the first '='."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value
