"""The files of package `rnnsearch` a module can run: its static import closure (imports inside functions
included), which the stage registry declares as each stage's source dependencies."""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent  # src/rnnsearch
REPO = PACKAGE.parents[1]


# An import statement that names rnnsearch, from its line's start to its end: a parenthesized list of names up to
# its `)`, lines continued by a backslash. Finding these first and parsing only them gives the same imports as
# parsing every module whole (a test checks that for every module of the package), in a tenth of the time: every
# Snakemake start (the main process and each job's) computes every stage's closure.
_STATEMENT = re.compile(r"^[ \t]*(?:from[ \t]+rnnsearch\b|import[ \t][^\n]*\brnnsearch\b)"
                        r"(?:[^\n(]*\([^)]*\)|[^\n]*\\\n)*[^\n]*", re.M)


@cache
def _imports(path: Path) -> tuple[Path, ...]:
    """The files of package `rnnsearch` that the module at `path` imports, anywhere in its body. A statement found
    in a docstring counts if it parses (an extra source dependency); one after `;` or `:` on its line would be
    missed, which test_registry.py's comparison with a whole parse of every module catches."""
    found = []
    for statement in _STATEMENT.finditer(path.read_text(encoding="utf-8")):
        try:
            found += files_imported(ast.parse(textwrap.dedent(statement.group()), str(path)).body)
        except SyntaxError:  # prose in a docstring
            continue
    return tuple(found)


def files_imported(nodes: Iterable[ast.AST]) -> list[Path]:
    """The files of package `rnnsearch` that the import statements among `nodes` load."""
    return [f for node in nodes for name in _imported_names(node)
            if name == "rnnsearch" or name.startswith("rnnsearch.") for f in _files_of(name)]


def _imported_names(node: ast.AST) -> list[str]:
    """The modules an import statement may load: `from a import b` loads a and, if b is a submodule, a.b."""
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def _files_of(module: str) -> list[Path]:
    """A module's file and the `__init__.py` of each package on its way (Python runs them all on import)."""
    parts = module.split(".")[1:]
    files = [PACKAGE.joinpath(*parts[:i], "__init__.py") for i in range(len(parts))]
    target = PACKAGE.joinpath(*parts)
    files.append(target / "__init__.py" if target.is_dir() else target.with_suffix(".py"))
    return [f for f in files if f.exists()]


def import_closure(module: str) -> list[Path]:
    """Every file of `rnnsearch` that importing `module` and running its functions can import (static: imports
    inside functions count too)."""
    seen: set[Path] = set()
    todo = _files_of(module)
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += _imports(path)
    return sorted(seen)
