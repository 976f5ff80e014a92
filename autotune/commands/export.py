"""``autotune export``: the recommendation ready to apply (printed, or written for a GitOps
pipeline on ADOPT), and the nightly's promotion of it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.commands import session
from autotune.errors import ExitCode
from autotune.experiment import Experiment
from autotune.report import build_report
from autotune.report import export as render
from autotune.report.export import write_to
from autotune.study import storage as st


def main(args: argparse.Namespace) -> int:
    if args.write_to is not None and args.force:
        print("export: --write-to promotes adopted recommendations only; it does not take "
              "--force", file=sys.stderr)
        return ExitCode.USAGE
    if args.overwrite and args.write_to is None:
        print("export: --overwrite is for --write-to DIR (it replaces a file there that is "
              "not autotune's)", file=sys.stderr)
        return ExitCode.USAGE
    exp, _ = session.load(args.file)
    studies = st.open_existing(exp, st.storage_url(exp, args.storage), as_measured=True)
    text, code = render(build_report(exp, studies), args.format, force=args.force)
    if code != 0 or args.write_to is None:
        print(text, file=sys.stdout if code == 0 else sys.stderr)
        return ExitCode(code)  # 1 (CONFIG) when nothing is exported: not ADOPT, no candidate
    path, written = write_to(Path(args.write_to), exp.name, args.format, text,
                             overwrite=args.overwrite)
    print(f"wrote {path}" if written else f"unchanged {path} (same variables)")
    return ExitCode.OK


def promote(exp: Experiment, storage: str | None, fmt: str, directory: Path) -> int:
    """``export --write-to DIR`` for the nightly: a verdict other than ADOPT is no failure."""
    studies = st.open_existing(exp, st.storage_url(exp, storage), as_measured=True)
    text, code = render(build_report(exp, studies), fmt)
    if code != 0:
        print(f"promote: {text}")
        return ExitCode.OK
    path, written = write_to(directory, exp.name, fmt, text)
    print(f"wrote {path}" if written else f"unchanged {path} (same variables)")
    return ExitCode.OK
