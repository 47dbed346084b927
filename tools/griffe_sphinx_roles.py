"""A griffe extension for the API reference: Sphinx roles in docstrings become Markdown.

Docstrings of this package state their math as `$...$` / `$$...$$` and name objects in code
spans. Docstrings still written with Sphinx roles and directives (`:math:`, `.. math::`,
`.. code-block::`, `:func:` and the like) are rewritten to that form when the reference is
built, so that they render the same; the source is not changed. A docstring without roles passes
through untouched.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_OBJECT_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc):`(~?)\.?([^`]+)`")
_MATH_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<first>.*)$")
_CODE_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\. code(?:-block)?::[ \t]*(?P<first>\S*)[ \t]*$")


def _object_role(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"


def _blocks(text: str) -> str:
    """`.. math::` blocks as `$$` blocks and `.. code-block::` blocks as fenced code."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        math, code = _MATH_BLOCK.match(lines[i]), _CODE_BLOCK.match(lines[i])
        if not (math or code):
            out.append(lines[i])
            i += 1
            continue
        indent = (math or code).group("indent")
        body = [math.group("first").strip()] if math and math.group("first").strip() else []
        i += 1
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
        ):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        while body and not body[0].strip():
            body.pop(0)
        if math:
            out += [f"{indent}$$", *(f"{indent}{line.strip()}" for line in body), f"{indent}$$", ""]
        else:
            cut = min(len(line) - len(line.lstrip()) for line in body if line.strip())
            fence = f"{indent}```{code.group('first')}"
            out += [fence, *(f"{indent}{line[cut:]}" for line in body), f"{indent}```", ""]
    return "\n".join(out)


def markdown_from_sphinx(text: str) -> str:
    """`text` with its Sphinx math and cross-reference roles written as Markdown."""
    if ".. math::" in text or ".. code" in text:
        text = _blocks(text)
    text = _MATH_ROLE.sub(lambda m: f"${m.group(1)}$", text)
    return _OBJECT_ROLE.sub(_object_role, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring once the object tree is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_from_sphinx(obj.docstring.value)
