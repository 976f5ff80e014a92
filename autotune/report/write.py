"""Write report.md, report.html, report.json and the plots into one directory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autotune import files
from autotune.report import document, html, markdown, ownership, plots
from autotune.report.model import Report
from autotune.report.serialize import to_json
from autotune.study.storage import Studies

FILES = ("report.md", "report.html", "report.json", *(f"{stem}.png" for stem in plots.PLOTS),
         "nights.md", "nights.json", "nights.png")
"""What ``autotune report`` writes into its directory (replacing them; a plot not drawn is
removed)."""


def check_directory(out_dir: Path) -> None:
    """Refuse a directory given for the report that holds files of the report's names no
    report wrote (a history.png, a report.md of the user's own)."""
    ownership.check_directory(out_dir, FILES, "the report")


def _write(path: Path, text: str) -> Path:
    # Readers (a browser refreshing, CI collecting artifacts) never see half a file; a link
    # planted in the results directory is replaced, never written through (autotune.files).
    files.replace(path, text)
    return path


def write_report(report: Report, out_dir: Path, studies: Studies | None = None,
                 extra: Sequence[document.Block] = ()) -> list[Path]:
    """Returns the files written: md, html, json, then the PNGs. ``extra``: sections after
    the report's own (their figures already in ``out_dir``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = plots.render(report, out_dir, studies.search if studies is not None else None)
    blocks = [*document.build(report, figures), *extra]
    title = f"autotune report: {report.experiment}"
    written = [
        _write(out_dir / "report.md", markdown.render(blocks)),
        _write(out_dir / "report.html",
               html.render(blocks, title, lambda f: (out_dir / f).read_bytes())),
        _write(out_dir / "report.json", to_json(report)),
    ]
    return written + [out_dir / f.file for f in figures.values()]
