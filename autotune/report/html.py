"""Blocks -> one self-contained HTML file: inline CSS, figures as base64 data URIs, no external
reference of any kind (the file is mailed around and opened offline).

Same blocks, same order as report.md; only the presentation is HTML's own. Checked in a real
browser at a laptop's width (tests/report/test_browser.py): the verdict on the first screen, no
sideways scrolling, plots scaled to the page."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Sequence
from html import escape

from autotune.report.document import (
    VERDICT_HEADING,
    VERDICT_TITLE,
    Block,
    Bullets,
    Heading,
    Paragraph,
    Table,
)

# Wide enough for the 14-column tables at a laptop's 1366 px, while paragraphs keep a line
# length one can read (max-width on p/li). Tables that are wider anyway scroll inside their own
# box, never the page; figures shrink to the page (max-width) and keep their proportions.
STYLE = """
:root { --muted: #5a5a5a; --rule: #d8d8d8; --head: #f1f3f5; }
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1d;
       line-height: 1.45; max-width: 80rem; margin: 1.5rem auto 3rem; padding: 0 1.5rem; }
h1 { font-size: 1.7rem; margin: 0 0 0.4rem; }
h2 { font-size: 1.35rem; margin: 2.5rem 0 0.8rem; padding-bottom: 0.25rem;
     border-bottom: 2px solid var(--rule); }
h3 { font-size: 1.1rem; margin: 1.8rem 0 0.6rem; }
p, li { max-width: 62rem; }
header p { color: var(--muted); margin: 0.2rem 0; }
nav { font-size: 0.9rem; margin: 1rem 0 0; color: var(--muted); }
nav a { color: #1a5fb4; text-decoration: none; margin-right: 1.1rem; white-space: nowrap; }
nav a:hover { text-decoration: underline; }
.verdict { margin: 1.2rem 0 0; padding: 0.2rem 1.4rem 0.6rem; border-radius: 6px;
           border-left: 8px solid #777; background: #f4f4f4; }
.verdict h2 { border-bottom: none; margin: 0.8rem 0 0.4rem; font-size: 1.5rem; }
.verdict .strong { font-size: 1.1rem; }
.verdict p:not(.strong) { font-size: 0.92rem; }
.verdict.adopt { border-left-color: #2e7d32; background: #eef7ee; }
.verdict.keep-current { border-left-color: #1565c0; background: #edf3fb; }
.verdict.inconclusive { border-left-color: #c77700; background: #fdf5e6; }
.table { overflow-x: auto; margin: 1rem 0; }
table { border-collapse: collapse; font-size: 0.88rem; font-variant-numeric: tabular-nums; }
table.wide { font-size: 0.8rem; }
th, td { border: 1px solid var(--rule); padding: 0.3rem 0.55rem; text-align: left;
         vertical-align: top; }
th { background: var(--head); font-weight: 600; }
tbody tr:nth-child(even) { background: #fafafa; }
.verdict tbody tr:nth-child(even), .verdict tbody tr { background: #fff; }
td.nw { white-space: nowrap; }
figure { margin: 1.5rem 0 2rem; }
figure img { display: block; max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 0.9rem; margin-top: 0.3rem; max-width: 62rem; }
.strong { font-weight: 600; font-size: 1.05rem; }
"""

# A short cell that is one token, or one and a short unit (a time stamp, a setting, "0.00576 s",
# "240 1/s", "#4 r1"): kept on one line, so "2026-12-01T07:14:17+00:00" does not break at its
# hyphens nor a number lose its unit to the next line.
_ONE_TOKEN = re.compile(r"^(?=.{1,40}$)\S+(?: \S{1,4})?$")
# Tables this wide (the configurations' metrics, all trials) get the smaller type.
_WIDE = 9


def _header_cell(text: str) -> str:
    # Metric names are long words joined by "_" or "/": let a header break there rather than
    # widen its column (gc_pause_p99 -> gc_ pause_ p99).
    return re.sub(r"([_/])", r"\1<wbr>", escape(text))


def _table(t: Table) -> str:
    head = "".join(f"<th>{_header_cell(h)}</th>" for h in t.header)
    rows = "".join(
        "<tr>" + "".join(f'<td class="nw">{escape(c)}</td>' if _ONE_TOKEN.match(c)
                         else f"<td>{escape(c)}</td>" for c in row) + "</tr>"
        for row in t.rows)
    cls = ' class="wide"' if len(t.header) >= _WIDE else ""
    return (f'<div class="table"><table{cls}><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>")


def _block(b: Block, read: Callable[[str], bytes]) -> str:
    if isinstance(b, Heading):
        return f"<h{b.level}>{escape(b.text)}</h{b.level}>"
    if isinstance(b, Paragraph):
        cls = ' class="strong"' if b.strong else ""
        return f"<p{cls}>{escape(b.text)}</p>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, Table):
        return _table(b)
    data = base64.b64encode(read(b.file)).decode("ascii")
    return (f'<figure><img alt="{escape(b.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(b.caption)}</figcaption></figure>")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _verdict_class(heading: str) -> str | None:
    """'adopt', 'keep-current' or 'inconclusive' for the verdict's heading, else None."""
    for kind, title in VERDICT_TITLE.items():
        if heading.startswith(VERDICT_HEADING + title):
            return kind.replace(" ", "-")
    return None


def render(blocks: Sequence[Block], title: str, read: Callable[[str], bytes]) -> str:
    """``read(file)`` returns the bytes of a figure's PNG.

    The blocks before the first level-2 heading are the page's header; every level-2 heading
    opens a <section> (its id from the heading) that lasts until the next one. The verdict's
    section is a coloured box by verdict, and a line of links to the other sections follows it,
    so the first screen holds the verdict and the way to the rest."""
    header: list[str] = []
    sections: list[tuple[str, str, str | None, list[str]]] = []  # id, label, verdict, body
    for b in blocks:
        if isinstance(b, Heading) and b.level == 2:
            verdict = _verdict_class(b.text)
            label = "Verdict" if verdict else b.text
            sid = _slug(label)
            while sid in {s[0] for s in sections}:  # ids are unique even if headings are not
                sid += "-"
            sections.append((sid, label, verdict, []))
        (sections[-1][3] if sections else header).append(_block(b, read))

    out = ["<header>", *header, "</header>"]
    links = [f'<a href="#{sid}">{escape(label)}</a>'
             for sid, label, verdict, _ in sections if verdict is None]
    nav = f'<nav aria-label="sections">{"".join(links)}</nav>' if links else ""
    for sid, _, verdict, body in sections:
        cls = f' class="verdict {verdict}"' if verdict else ""
        out += [f'<section id="{sid}"{cls}>', *body, "</section>"]
        if verdict and nav:
            out.append(nav)
            nav = ""
    if nav:  # no verdict section: the links go under the header
        out.insert(len(header) + 2, nav)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(out) + "\n</body>\n</html>\n")
