"""``autotune history``: each night's study, environment, verdict, recommendation and
objective; also nights.{md,json,png}."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.commands import session
from autotune.errors import ExitCode
from autotune.experiment import Experiment
from autotune.report import history, ownership
from autotune.study import storage as st


def main(args: argparse.Namespace) -> int:
    exp, _ = session.load(args.file)
    return show(exp, args.storage, Path(args.out) if args.out else None, as_json=args.json)


def show(exp: Experiment, storage: str | None, out: Path | None, *, as_json: bool) -> int:
    nights = history.load(exp, st.storage_url(exp, storage))
    if out is not None:  # a directory of the user's, not autotune's results directory
        ownership.check_directory(out, history.FILES, "the history")
    written = history.write(nights, out or st.results_dir(exp))
    print(history.to_json(nights) if as_json else history.text(nights), end="" if as_json
          else "\n")
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return ExitCode.OK
