"""The recommendation and its evidence: compute (``build_report``), then render
(``write_report``, ``export``).

``build_report`` reads the studies and hands plain data to the pure ``summarize``; the
renderers only render the resulting ``Report``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autotune.errors import PrerequisiteError
from autotune.report.collect import build_report
from autotune.report.document import Block
from autotune.report.export import FORMATS, export
from autotune.report.model import Report
from autotune.study.storage import Studies

__all__ = ["FORMATS", "Report", "build_report", "check_directory", "export", "write_report"]


def write_report(report: Report, out_dir: Path, studies: Studies | None = None,
                 extra: Sequence[Block] = ()) -> list[Path]:
    """Write report.md, report.html (self-contained), report.json and the PNG plots into
    ``out_dir``; return the paths (md, html, json, then the PNGs). With ``studies``, the contour
    plot is Optuna's (else a heat map drawn from the report)."""
    # matplotlib is imported only when a report is drawn: `export` must stay quick, and works
    # without the optional dependency.
    try:
        from autotune.report.write import write_report as write
    except ImportError as e:
        raise PrerequisiteError(f"the report needs matplotlib ({e}): "
                                "pip install 'autotune[report]'") from e
    return write(report, out_dir, studies, extra)


def check_directory(out_dir: Path) -> None:
    """Refuse a directory given for the report whose files of the report's names no report
    wrote (``StudyError``): they would be replaced or removed."""
    try:
        from autotune.report.write import check_directory as check
    except ImportError as e:
        raise PrerequisiteError(f"the report needs matplotlib ({e}): "
                                "pip install 'autotune[report]'") from e
    check(out_dir)
