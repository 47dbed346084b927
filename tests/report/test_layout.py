"""The report package reads as its design: small modules, and no import cycle between them."""

from __future__ import annotations

import ast
from pathlib import Path

import implicit_em.report

PACKAGE = Path(implicit_em.report.__file__).parent
LIMIT = 450


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The report modules `name` imports anywhere in its file: at module level, inside a
    function (a lazy import runs when it is called) and under `if TYPE_CHECKING:` (a type read
    from a module is a dependency on it), each with the packages whose `__init__` it loads."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets.update(
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            )
    parents = {t.rsplit(".", i)[0] for t in targets for i in range(1, t.count(".") + 1)}
    return {t for t in targets | parents if t in known and t != name and not name.startswith(t)}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` as the modules along it, or [] when there is none."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_report_module_is_over_450_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert not long, f"modules over {LIMIT} lines: {long}"


def test_the_report_package_has_no_import_cycle():
    modules = _modules()
    graph = {name: _imported(name, path, set(modules)) for name, path in modules.items()}
    assert (
        "implicit_em.report.running.registry" in graph["implicit_em.report.running.runner"]
    )  # it reads edges
    assert _cycle(graph) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_the_report_package_is_its_design_packages():
    top = {p.name for p in PACKAGE.iterdir() if p.suffix == ".py"}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert top == {"__init__.py", "cli.py"}, "a report module belongs to one of its packages"
    assert packages == {
        "experiments",
        "items",
        "judging",
        "publishing",
        "rendering",
        "rules",
        "running",
    }
