"""The package's modules import one another without a circle.

The import graph is read from the source with `ast`, not by importing: a module $m$ has an edge
to every module of the package that it names in an import anywhere in its body, an import under
`if TYPE_CHECKING:` or inside a function included (a typing-only or deferred import still ties
the two modules together). `import a.b` is an edge to `a.b`; `from a import b` is an edge to the
module `a.b` when there is one, else to `a`; a relative import is resolved against the
module's package. A circle is a strongly connected component of two or more modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "implicit_em"

Graph = dict[str, set[str]]


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` under `root`, by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: set[str]
) -> Iterator[str]:
    """The modules in `modules` that `node`, an import statement of `module`, imports."""
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = package[: len(package) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        candidates = [
            f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
            for alias in node.names
        ]
    yield from (c for c in candidates if c in modules and c != module)


def import_graph(root: Path, package: str) -> Graph:
    """The edges from each module of `package` (under `root`) to the package's modules it
    imports (see the module)."""
    modules = _modules(root, package)
    graph: Graph = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[module].update(
                    _targets(node, module, path.name == "__init__.py", set(modules))
                )
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of two or more modules, each sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_graph_sees_typing_only_relative_and_submodule_imports(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import sub\n",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import X\n",
            "pkg/b.py": "def f():\n    from . import a\n",
            "pkg/sub/__init__.py": "from .. import c\n",
            "pkg/sub/d.py": "from pkg.sub import name\nimport pkg.c as c\n",
            "pkg/c.py": "X = 1\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph == {
        "pkg": {"pkg.sub"},
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.a"},
        "pkg.sub": {"pkg.c"},
        "pkg.sub.d": {"pkg.sub", "pkg.c"},
        "pkg.c": set(),
    }
    assert circles(graph) == [["pkg.a", "pkg.b"]]


def test_circles_finds_each_component_once() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert circles(graph) == [["a", "b", "c"], ["d", "e"]]


def test_no_module_of_the_package_imports_itself_back() -> None:
    graph = import_graph(SRC, PACKAGE)
    assert len(graph) > 100, "the source scan found too few modules"
    found = circles(graph)
    assert not found, "import circles (break each by moving what both sides need below both):\n" + (
        "\n".join(" <-> ".join(c) for c in found)
    )
