"""Whether a directory a user named for autotune's files (``report --out``, ``history --out``)
holds files of those names that autotune did not write: writing would replace them, and the
report removes the plots it did not draw."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from autotune.errors import StudyError


def check_directory(out_dir: Path, names: Sequence[str], what: str) -> None:
    """``StudyError`` when ``out_dir`` holds any of ``names`` and no report.json or
    nights.json of autotune's is next to them."""
    present = [name for name in names if (out_dir / name).exists()]
    if not present or _ours(out_dir):
        return
    raise StudyError(f"{out_dir} holds {', '.join(present)}, not written by autotune (no "
                     f"report.json or nights.json of its own there): {what} would replace or "
                     "remove them. Give an empty or new directory, or remove those files")


def _ours(out_dir: Path) -> bool:
    """A report (or `autotune history --out`, or a report that failed after its night
    section) wrote here: its report.json, or its nights.json, is there."""
    def read(name: str) -> object:
        try:
            return json.loads((out_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    report, nights = read("report.json"), read("nights.json")
    return ((isinstance(report, dict) and {"schema", "experiment", "verdict"} <= set(report))
            or (isinstance(nights, list)  # [] before the first night
                and all(isinstance(n, dict) and {"night", "study", "status"} <= set(n)
                        for n in nights)))
