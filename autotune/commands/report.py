"""``autotune report``: results/<name>/report.{md,html,json}, the plots, and the night-by-night
section when the study has nights."""

from __future__ import annotations

import argparse
from pathlib import Path

from autotune.commands import session
from autotune.errors import ExitCode
from autotune.experiment import Experiment
from autotune.report import build_report, check_directory, history, write_report
from autotune.study import storage as st


def main(args: argparse.Namespace) -> int:
    exp, _ = session.load(args.file)
    written, verdict = write(exp, args.storage, Path(args.out) if args.out else None)
    for path in written:
        print(f"wrote {path}")
    print(verdict)
    return ExitCode.OK


def write(exp: Experiment, storage: str | None, out: Path | None) -> tuple[list[Path], str]:
    """Write the report (with the night-by-night section): the files, and the verdict line."""
    url = st.storage_url(exp, storage)
    studies = st.open_existing(exp, url)
    report = build_report(exp, studies)
    if out is not None:  # a directory of the user's, not autotune's results directory
        check_directory(out)
    out = out or st.results_dir(exp)
    nights = history.load(exp, url)
    # The report's "Night by night" section, with its plot and data next to it: written first,
    # so that report.html embeds the plot as report.md links it.
    night_files = history.write(nights, out) if nights else []
    section = (history.blocks(nights, history.PLOT if (out / history.PLOT).exists() else None)
               if nights else [])
    written = write_report(report, out, studies, section) + night_files
    chosen = report.configuration(report.best_candidate)
    return written, session.verdict_line({
        "verdict": report.verdict, "reason": report.reason,
        "candidate": None if chosen is None else {"settings": chosen.settings,
                                                  "env": chosen.env}})


def report_line(exp: Experiment, storage: str | None) -> int:
    """The nightly's report step: written, one line (the verdict was printed by the run)."""
    written, _ = write(exp, storage, None)
    if written:
        print(f"report: {written[0]} (and {len(written) - 1} more files next to it)")
    return ExitCode.OK
