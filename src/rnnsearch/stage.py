"""One stage record and its parts: `Stage` (a `rnnsearch <stage>` command: its help, function, arguments and
the params keys it reads), `Arg` (one command-line argument), `Params` (what a stage is given of params.yaml).
The records themselves are in `rnnsearch.stages` (the pipeline) and `rnnsearch.bench.stages` (benchmarks and
the JoeyNMT experiment)."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Arg:
    """One command-line argument: argparse's flags and keywords."""

    flags: tuple[str, ...]
    kw: dict = field(default_factory=dict)


def arg(*flags: str, **kw) -> Arg:
    return Arg(flags, kw)


def required(helps: dict[str, str], **kw) -> tuple[Arg, ...]:
    """Required arguments, flag → its help, with the same other keywords."""
    return tuple(Arg((f,), {"required": True, "help": h, **kw}) for f, h in helps.items())


@dataclass(frozen=True)
class Stage:
    """`call(function, args, params)` runs the stage: `args` is argparse's namespace, `params` maps each key of
    `keys` (dotted, `{model}` filled in from --model) to its value in the validated params files."""

    name: str
    help: str
    run: str  # "module:function", the function the stage runs
    call: Callable[[Callable, argparse.Namespace, "Params"], Any]
    args: tuple[Arg, ...] = ()
    keys: tuple[str, ...] = ()
    params: bool = True  # takes --params (params.yaml and overlays)
    rules: tuple[str, ...] = ()  # the Snakemake rules that run it (default: its name with _ for -)
    scripts: tuple[str, ...] = ()  # files it runs in another process, from src/rnnsearch
    runs_model: bool = False  # a process that trains or decodes: rnnsearch.runtime's allocator settings

    @property
    def module(self) -> str:
        return self.run.split(":")[0]

    def function(self) -> Callable:
        module, name = self.run.split(":")
        return getattr(importlib.import_module(module), name)

    def keys_for(self, model: str | None = None) -> list[str]:
        return [k.format(model=model) for k in self.keys]


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
