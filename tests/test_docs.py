"""The documentation site: it builds without a warning, documents every public name, loads nothing
from the network, and the examples in the converted docstrings run as written."""

from __future__ import annotations

import ast
import doctest
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import yaml

import implicit_em

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "mkdocs.yml"
REFERENCE = "reference/"

# Top-level submodules that the reference does not document: the command line (and the checks
# of its arguments) is documented by `implicit-em --help` and the guides.
NOT_REFERENCED = {"implicit_em.cli", "implicit_em.arguments"}

# Modules whose docstrings follow the NumPy convention with doctest examples.
DOCTESTED = (
    "implicit_em",
    "implicit_em.core",
    "implicit_em.distances",
    "implicit_em.attention",
    "implicit_em.objectives",
    "implicit_em.identities",
    "implicit_em.mixture.estimator",
)


class _Ids(HTMLParser):
    """Collects every `id` attribute and every external script or stylesheet of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        url = values.get("src") if tag == "script" else None
        if tag == "link" and "stylesheet" in (values.get("rel") or ""):
            url = values.get("href")
        if tag == "link" and "preconnect" in (values.get("rel") or ""):
            url = values.get("href")
        if url and re.match(r"^(https?:)?//", url):
            self.external.append(url)


def _nav_pages(nav: list) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def _page_html(site: Path, page: str) -> Path:
    stem = page.removesuffix(".md")
    if stem == "index" or stem.endswith("/index"):
        return site / stem.removesuffix("index") / "index.html"
    return site / stem / "index.html"


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`mkdocs build --strict` into a temporary folder (the same build as `make docs`)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "-d", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def _parse(path: Path) -> _Ids:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _public_names() -> list[str]:
    """`module.name` for every name in the `__all__` of the package and its public submodules.

    A public subpackage without an `__all__` of its own is documented through its submodules'.
    """
    names = [f"implicit_em.{name}" for name in implicit_em.__all__]
    for info in pkgutil.iter_modules(implicit_em.__path__, "implicit_em."):
        if info.name in NOT_REFERENCED or info.name.rsplit(".", 1)[1].startswith("_"):
            continue
        names.extend(_module_names(importlib.import_module(info.name)))
    return names


def _module_names(module: ModuleType) -> list[str]:
    if hasattr(module, "__all__"):
        return [module.__name__] + [f"{module.__name__}.{name}" for name in module.__all__]
    assert hasattr(module, "__path__"), f"{module.__name__} has no __all__"
    names = [module.__name__]
    for info in pkgutil.iter_modules(module.__path__, module.__name__ + "."):
        if not info.name.rsplit(".", 1)[1].startswith("_"):
            names.extend(_module_names(importlib.import_module(info.name)))
    return names


def test_every_public_name_has_an_entry_in_the_reference(config: dict, site: Path) -> None:
    pages = [p for p in _nav_pages(config["nav"]) if p.startswith(REFERENCE)]
    assert pages, "mkdocs.yml has no API reference pages in its nav"
    documented: set[str] = set()
    for page in pages:
        documented |= _parse(_page_html(site, page)).ids
    missing = [name for name in _public_names() if name not in documented]
    assert not missing, f"public names without an entry in the API reference: {missing}"


def test_every_page_is_in_the_nav(config: dict) -> None:
    in_nav = set(_nav_pages(config["nav"]))
    excluded = set((config.get("exclude_docs") or "").split())
    docs = ROOT / config.get("docs_dir", "docs")
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")} - excluded
    assert pages - in_nav == set(), "pages missing from the nav of mkdocs.yml"
    assert in_nav - pages == set(), "nav entries without a page"


def test_pages_load_nothing_from_the_network(site: Path) -> None:
    external = {
        f"{page.relative_to(site)}: {url}"
        for page in site.rglob("*.html")
        for url in _parse(page).external
    }
    assert not external, f"scripts or stylesheets from the network: {sorted(external)}"


def test_math_is_typeset_by_the_bundled_katex(config: dict, site: Path) -> None:
    for asset in config["extra_javascript"] + config["extra_css"]:
        assert (site / asset).is_file(), f"{asset} is not in the built site"
    core = (site / "reference" / "core" / "index.html").read_text(encoding="utf-8")
    assert 'class="arithmatex"' in core, "the docstring math did not reach the page"
    assert ":math:" not in core, "a Sphinx role was left in a converted docstring"
    # Math that Markdown did not hand to arithmatex (a $$ block under-indented in a list item,
    # a space before a closing $) reaches the page as raw dollars.
    raw = []
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        html = re.sub(r"<(pre|code|script)\b.*?</\1>", "", html, flags=re.S)
        html = re.sub(r'<(div|span) class="arithmatex">.*?</\1>', "", html, flags=re.S)
        if "$" in html:
            raw.append(str(page.relative_to(site)))
    assert not raw, f"math left unrendered on: {raw}"
    fonts = re.findall(r"url\((fonts/[^)]+)\)", (site / "assets/katex/katex.min.css").read_text())
    assert fonts, "the KaTeX stylesheet names no fonts"
    missing = [f for f in fonts if not (site / "assets/katex" / f).is_file()]
    assert not missing, f"fonts named by the KaTeX stylesheet but not shipped: {missing}"


@pytest.mark.parametrize("name", DOCTESTED)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0, f"{result.failed} docstring examples of {name} failed"


# Sphinx roles and directives, Google-style section headers and reStructuredText tables: none
# of them renders in the reference (NumPy convention, Markdown) or reads cleanly in help().
_NOT_NUMPY = re.compile(
    r":(?:py:)?(?:math|func|class|meth|mod|attr|data|obj|exc):`"
    r"|^\s*\.\. [a-z-]+::"
    r"|^\s*(?:Args|Arguments|Returns|Raises|Yields|Attributes|Examples?|Notes?):\s*$"
    r"|^\s*={3,}\s+={3,}",
    flags=re.M,
)


def _docstrings() -> list[tuple[str, int, str]]:
    """(file, line, text) of every docstring in the package's source."""
    out = []
    for path in sorted((ROOT / "src" / "implicit_em").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                out.append((str(path.relative_to(ROOT)), node.lineno, node.value.value))
    return out


def test_docstrings_follow_the_numpy_convention() -> None:
    docstrings = _docstrings()
    assert len(docstrings) > 100, "the source scan found too few docstrings"
    bad = [f"{f}:{line}" for f, line, text in docstrings if _NOT_NUMPY.search(text)]
    assert not bad, f"docstrings with Sphinx or Google markup: {bad}"
    # A lost backslash (`"\beta"` in a non-raw string) leaves a control character in the text.
    ctrl = [
        f"{f}:{line}" for f, line, text in docstrings if re.search(r"[\x00-\x08\x0b-\x1f]", text)
    ]
    assert not ctrl, f"docstrings with a control character (a lost backslash?): {ctrl}"


def _griffe_package() -> Any:
    griffe = pytest.importorskip("griffe")
    return griffe.load("implicit_em", search_paths=[str(ROOT / "src")], docstring_parser="numpy")


def _sections(obj: Any, kind: str) -> list[str]:
    return [
        item.name
        for section in obj.docstring.parse("numpy")
        if section.kind.value == kind
        for item in section.value
    ]


def test_parameters_sections_name_the_signature() -> None:
    """A docstring with a Parameters section documents exactly its signature's parameters."""
    wrong, checked = [], 0

    def visit(obj: Any) -> None:
        nonlocal checked
        for member in obj.members.values():
            if member.is_alias:
                continue
            if member.is_module or member.is_class:
                visit(member)
            if not (member.is_function or member.is_class) or member.docstring is None:
                continue
            documented = _sections(member, "parameters")
            function = member if member.is_function else member.members.get("__init__")
            if not documented or function is None or function.is_alias:
                continue
            signature = {
                p.name
                for p in function.parameters
                if p.name not in ("self", "cls") and not p.kind.value.startswith("variadic")
            }
            checked += 1
            if signature != set(documented):
                wrong.append(
                    f"{member.path}: undocumented {sorted(signature - set(documented))}, "
                    f"not in the signature {sorted(set(documented) - signature)}"
                )

    visit(_griffe_package())
    assert checked > 50, f"only {checked} Parameters sections were found"
    assert not wrong, "\n".join(wrong)


def test_gaussian_mixture_documents_every_fitted_attribute() -> None:
    pd = pytest.importorskip("pandas")
    from implicit_em.mixture import GaussianMixture

    documented = set(
        _sections(_griffe_package()["mixture.estimator.GaussianMixture"], "attributes")
    )
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(60, 2)).astype(np.float32), columns=["a", "b"])
    fitted = {
        name
        for gm in (
            GaussianMixture(2, random_state=0).fit(frame),
            GaussianMixture(2, random_state=0).partial_fit(frame.to_numpy()),
        )
        for name in vars(gm)
        if name.endswith("_") and not name.startswith("_")
    }
    assert fitted, "the fits set no attributes"
    assert fitted <= documented, f"fitted attributes not documented: {sorted(fitted - documented)}"


def test_every_record_field_of_every_site_kind_is_documented() -> None:
    from implicit_em.trace import records
    from implicit_em.trace.sites import KINDS

    section = {"classification": "Responsibility sites", "mixture": "Responsibility sites"}
    tables: dict[str, set[str]] = {}
    for title, body in re.findall(r"\*\*([^*]+)\*\*(.*?)(?=\n\*\*|\Z)", records.__doc__, re.S):
        tables[title.strip()] = set(re.findall(r"^\| `(\w+)` \|", body, flags=re.M))
    common = tables["Every site record"]
    assert {"kind", "step", "site", "type", "missing"} <= common
    for kind in KINDS:
        fields = set(kind.metrics + kind.gradient_metrics + kind.probe_metrics)
        documented = common | tables[section.get(kind.type, f"{kind.type.capitalize()} sites")]
        if kind.type == "router":  # a router also has the responsibility metrics of its softmax
            documented |= tables["Responsibility sites"]
        missing = fields - documented
        assert not missing, f"{type(kind).__name__} records fields not documented: {missing}"
