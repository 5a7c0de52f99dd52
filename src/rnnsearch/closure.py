"""The files of package `rnnsearch` a module can run: its static import closure (imports inside functions
included), which the stage registry declares as each stage's source dependencies."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent  # src/rnnsearch
REPO = PACKAGE.parents[1]


@cache
def _imports(path: Path) -> tuple[Path, ...]:
    """The files of package `rnnsearch` that the module at `path` imports, anywhere in its body."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name == "rnnsearch" or name.startswith("rnnsearch."):
                found += _files_of(name)
    return tuple(found)


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
