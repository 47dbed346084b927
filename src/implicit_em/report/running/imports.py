"""The modules of the `implicit_em` package a piece of code uses, and their content hashes.

The import graph is read from the source files under a `root` (the folder that holds the
`implicit_em` package), not from a hand-kept list: a module's edges are every `import` and
`from ... import` in its file, at module level and inside functions (lazy imports) alike,
resolved to the module that defines the imported name (`from implicit_em.report import Outcome`
leads to `implicit_em.report.running.registry`, where `Outcome` is defined, through the package's
re-export), and a submodule read as an attribute of an imported package (`iem.trace`, which the
package loads on first access) is an edge too. `closure` follows these edges from a start module; what it reaches is an
over-approximation of the code that can run, never an under-approximation of what is imported.

A module's hash is the SHA-256 (16 hex digits) of its syntax tree with its docstrings left out:
an edit to code changes it, an edit to a comment, a docstring or the layout does not.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

import implicit_em

__all__ = [
    "PACKAGE",
    "SOURCE_ROOT",
    "closure",
    "imported_packages",
    "imports_of",
    "module_file",
    "module_hash",
]

PACKAGE = "implicit_em"
SOURCE_ROOT = Path(implicit_em.__file__).resolve().parent.parent
"""The folder that holds the installed or checked-out `implicit_em` package."""


def module_file(name: str, root: Path = SOURCE_ROOT) -> Path | None:
    """The source file of module `name`: under `root` for the package's modules (a module's
    `.py`, or a package's `__init__.py`), else the file of the loaded module; None when there
    is none."""
    if name == PACKAGE or name.startswith(PACKAGE + "."):
        base = Path(root, *name.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None
    loaded = getattr(sys.modules.get(name), "__file__", None)
    return Path(loaded) if loaded and Path(loaded).is_file() else None


def module_hash(name: str, root: Path = SOURCE_ROOT) -> str:
    """The hash of module `name`'s code (docstrings, comments and layout left out), or
    `"missing"` when it has no source file."""
    path = module_file(name, root)
    if path is None:
        return "missing"
    stat = path.stat()
    return _code_hash(str(path), stat.st_size, stat.st_mtime_ns)


@cache
def _code_hash(path: str, size: int, mtime_ns: int) -> str:
    source = Path(path).read_bytes()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return hashlib.sha256(source).hexdigest()[:16]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def imports_of(name: str, root: Path = SOURCE_ROOT) -> set[str]:
    """The package's modules that module `name` imports anywhere in its file, each resolved to
    the module defining the imported name."""
    path = module_file(name, root)
    if path is None:
        return set()
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _import_nodes(str(path), path.stat().st_mtime_ns):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if _ours(a.name))
            continue
        base = _absolute(name, is_package, node.module, node.level)
        if base is None or not _ours(base):
            continue
        for alias in node.names:
            found.add(_defining(base, alias.name, root) if alias.name != "*" else base)
    for base, attribute in _module_attributes(str(path), path.stat().st_mtime_ns):
        if _ours(base) and module_file(f"{base}.{attribute}", root) is not None:
            found.add(f"{base}.{attribute}")  # `iem.trace`: a submodule loaded on access
    found.discard(name)
    return found


def imported_packages(name: str, root: Path = SOURCE_ROOT) -> set[str]:
    """The top-level packages outside `implicit_em` that module `name` imports anywhere in its
    file (`torch`, `sklearn`, ...)."""
    path = module_file(name, root)
    if path is None:
        return set()
    found = set()
    for node in _import_nodes(str(path), path.stat().st_mtime_ns):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return {f for f in found if f != PACKAGE}


def closure(
    start: Iterable[str], root: Path = SOURCE_ROOT, follow: Callable[[str, str], bool] | None = None
) -> set[str]:
    """Every module reached from `start` along `imports_of` edges, `start` included; an edge
    from `a` to `b` is taken only where `follow(a, b)` (every edge when None)."""
    seen = set(start)
    todo = list(seen)
    while todo:
        here = todo.pop()
        for there in imports_of(here, root):
            if there not in seen and (follow is None or follow(here, there)):
                seen.add(there)
                todo.append(there)
    return seen


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


@cache
def _import_nodes(path: str, mtime_ns: int) -> tuple[ast.Import | ast.ImportFrom, ...]:
    try:
        tree = ast.parse(Path(path).read_bytes())
    except SyntaxError:
        return ()
    return tuple(n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom))


@cache
def _module_attributes(path: str, mtime_ns: int) -> tuple[tuple[str, str], ...]:
    """Each `(module, attribute)` the file reads as `alias.attribute`, where `alias` is bound by
    a plain `import module [as alias]`."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except SyntaxError:
        return ()
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = (
                    a.name if a.asname else a.name.split(".")[0]
                )
    return tuple(
        (aliases[n.value.id], n.attr)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
    )


def _absolute(name: str, is_package: bool, module: str | None, level: int) -> str | None:
    """The absolute module name of a `from` import written in module `name`."""
    if level == 0:
        return module
    parts = name.split(".") if is_package else name.split(".")[:-1]
    if level - 1 > len(parts):
        return None
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([module] if module else [])]) or None


def _defining(base: str, attribute: str, root: Path, depth: int = 0) -> str:
    """The module that defines `attribute` of module `base`: a submodule of that name, the
    module a package re-exports it from, or `base` itself."""
    if module_file(f"{base}.{attribute}", root) is not None:
        return f"{base}.{attribute}"
    path = module_file(base, root)
    if path is None or path.name != "__init__.py" or depth > 8:
        return base
    for node in _import_nodes(str(path), path.stat().st_mtime_ns):
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) == attribute:
                source = _absolute(base, True, node.module, node.level)
                if source is not None and _ours(source):
                    return _defining(source, alias.name, root, depth + 1)
    return base
