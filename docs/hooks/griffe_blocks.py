"""Griffe extension for the API reference: the docstrings as Markdown reads them.

mannlab's docstrings are plain text: a heading line followed by an indented
block (a glossary, the equations of a time step, a usage example). Markdown
needs a blank line before an indented block to read it as preformatted text,
otherwise the block is folded into the paragraph above and loses its layout.
This inserts that blank line, and turns the Sphinx roles some docstrings use
(":class:`NTMTrace`") into code spans; the docstrings themselves stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: a Google-style section title ("Args:"), whose indented entries griffe reads as a table
SECTION = re.compile(
    r"(Args|Arguments|Parameters|Keyword Args|Other Parameters|Returns|Yields|Raises|Warns|"
    r"Attributes|Examples?|Notes?|Warnings?):\s*"
)


def separate_indented_blocks(text: str) -> str:
    """A blank line before every indented block that directly follows a text line, except
    the entries of a section ("Args:"), which griffe parses itself."""
    out: list[str] = []
    for line in text.split("\n"):
        previous = out[-1] if out else ""
        if (
            line.startswith("    ")
            and previous.strip()
            and not previous.startswith("    ")
            and not SECTION.fullmatch(previous.strip())
        ):
            out.append("")
        out.append(line)
    return "\n".join(out)


SPHINX_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|obj|exc):`~?([^`]+)`")


def plain_roles(text: str) -> str:
    """ ":class:`NTMTrace`" -> "`NTMTrace`" (and the other Python roles)."""
    return SPHINX_ROLE.sub(r"`\1`", text)


class IndentedBlocks(griffe.Extension):
    """Apply `separate_indented_blocks` and `plain_roles` to every docstring of the loaded
    package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._visit(pkg, set())

    def _visit(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = separate_indented_blocks(plain_roles(obj.docstring.value))
        for member in obj.members.values():
            if not member.is_alias:
                self._visit(member, seen)
