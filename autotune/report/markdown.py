"""Blocks -> Markdown (GitHub flavour); figures are linked as the PNG files next to it."""

from __future__ import annotations

import re
from collections.abc import Sequence

from autotune.report.document import Block, Bullets, Figure, Heading, Paragraph, Table

_INLINE = re.compile(r"[\\`*\[\]<~&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_BLOCK_START = re.compile(r"^(?:[#>+=-]|\d+[.)])")
_ENTITY = {"<": "&lt;", "&": "&amp;"}


def text(value: str) -> str:
    """Plain text as Markdown that shows exactly that text and nothing else.

    Reasons in a report quote what servers answered (a Prometheus error body, an API server's
    message): read as Markdown, such text could end the table, start a heading that forges a
    verdict, embed raw HTML, or an image a viewer fetches from anywhere. So newlines become
    spaces, HTML's characters entities, and every character with an inline meaning (emphasis,
    code, links and images, strikethrough) or a block meaning at the start is escaped.
    Underscores inside words (``gc_pause_p99``) mean nothing in CommonMark and stay as they are.
    """
    # Leading spaces would let "   # x" still be a heading (or four of them a code block).
    flat = " ".join(value.splitlines()).strip()
    out = _INLINE.sub(lambda m: _ENTITY.get(m.group(), "\\" + m.group()), flat)
    return _BLOCK_START.sub(lambda m: "\\" + m.group() if m.group()[0] in "#>+=-"
                            else m.group()[:-1] + "\\" + m.group()[-1], out)


def _cell(value: str) -> str:
    # A pipe would end the cell.
    return text(value).replace("|", "\\|")


def render(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {text(b.text)}")
        elif isinstance(b, Paragraph):
            out.append(f"**{text(b.text)}**" if b.strong else text(b.text))
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {text(item)}" for item in b.items))
        elif isinstance(b, Table):
            lines = ["| " + " | ".join(_cell(h) for h in b.header) + " |",
                     "|" + "---|" * len(b.header)]
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Figure):
            out.append(f"![{text(b.caption)}]({b.file})\n\n*{text(b.caption)}*")
    return "\n\n".join(out) + "\n"
