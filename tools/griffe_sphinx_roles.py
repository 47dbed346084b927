"""A griffe extension for the API reference: Sphinx roles in docstrings become Markdown.

Docstrings of this package state their math as `$...$` / `$$...$$` and name objects in code
spans. Docstrings still written with Sphinx roles (`:math:`, `.. math::`, `:func:` and the like)
are rewritten to that form when the reference is built, so that they render the same; the
source is not changed. A docstring without roles passes through untouched.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_OBJECT_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc):`(~?)\.?([^`]+)`")
_MATH_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<first>.*)$")


def _object_role(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"


def _math_blocks(text: str) -> str:
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _MATH_BLOCK.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent = match.group("indent")
        body = [match.group("first").strip()] if match.group("first").strip() else []
        i += 1
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
        ):
            body.append(lines[i].strip())
            i += 1
        while body and not body[-1]:
            body.pop()
        out += [f"{indent}$$", *(f"{indent}{line}" for line in body), f"{indent}$$", ""]
    return "\n".join(out)


def markdown_from_sphinx(text: str) -> str:
    """`text` with its Sphinx math and cross-reference roles written as Markdown."""
    if ":math:" in text or ".. math::" in text:
        text = _MATH_ROLE.sub(lambda m: f"${m.group(1)}$", _math_blocks(text))
    return _OBJECT_ROLE.sub(_object_role, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring once the object tree is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_from_sphinx(obj.docstring.value)
