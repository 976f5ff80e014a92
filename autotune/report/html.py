"""Blocks -> one self-contained HTML file: inline CSS, figures as base64 data URIs, no external
reference of any kind (the file is mailed around and opened offline)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from html import escape

from autotune.report.document import Block, Bullets, Figure, Heading, Paragraph, Table

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
figure { margin: 1.5rem 0; }
img { max-width: 100%; }
figcaption { color: #555; font-size: 0.9rem; }
.strong { font-weight: 600; font-size: 1.05rem; }
"""


def render(blocks: Sequence[Block], title: str, read: Callable[[str], bytes]) -> str:
    """``read(file)`` returns the bytes of a figure's PNG."""
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{escape(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            cls = ' class="strong"' if b.strong else ""
            body.append(f"<p{cls}>{escape(b.text)}</p>")
        elif isinstance(b, Bullets):
            body.append("<ul>" + "".join(f"<li>{escape(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{escape(h)}</th>" for h in b.header)
            rows = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                           for row in b.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(b, Figure):
            data = base64.b64encode(read(b.file)).decode("ascii")
            body.append(f'<figure><img alt="{escape(b.caption)}" '
                        f'src="data:image/png;base64,{data}">'
                        f"<figcaption>{escape(b.caption)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
