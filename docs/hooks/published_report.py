"""MkDocs hook: the published full-size report (`results/full/`) on the documentation site.

When `results/full/index.html` exists, the self-contained page is added to the site as
`full-report/index.html`, and the page `results-full.md` gets the published `summary.md` and a
link to that page below its own text. Without a publication the page says that none exists, and
nothing links to a missing file (`mkdocs build --strict` stays clean).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

PAGE = "results-full.md"
SITE_PATH = "full-report/index.html"


def _published(config: Any) -> Path:
    return Path(config.config_file_path).parent / "results" / "full"


def on_files(files: Files, config: Any) -> Files:
    page = _published(config) / "index.html"
    if page.is_file():
        files.append(File.generated(config, SITE_PATH, abs_src_path=str(page)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    folder = _published(config)
    if not (folder / "index.html").is_file() or not (folder / "summary.md").is_file():
        return markdown + "\n**No full-size run is published yet.**\n"
    summary = (folder / "summary.md").read_text(encoding="utf-8")
    title, _, rest = summary.partition("\n")
    return (
        f"{markdown}\n[The published page]({SITE_PATH}) "
        f"(self-contained: every section, table and figure).\n\n**{title}**\n{rest}"
    )
