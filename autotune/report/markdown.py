"""Blocks -> Markdown (GitHub flavour); figures are linked as the PNG files next to it."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.report.document import Block, Bullets, Figure, Heading, Paragraph, Table


def _cell(text: str) -> str:
    # A pipe would end the cell and a newline the row.
    return text.replace("|", "\\|").replace("\n", " ")


def render(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {b.text}")
        elif isinstance(b, Paragraph):
            out.append(f"**{b.text}**" if b.strong else b.text)
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Table):
            lines = ["| " + " | ".join(_cell(h) for h in b.header) + " |",
                     "|" + "---|" * len(b.header)]
            lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Figure):
            out.append(f"![{b.caption}]({b.file})\n\n*{b.caption}*")
    return "\n\n".join(out) + "\n"
