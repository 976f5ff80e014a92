"""``autotune status``: the trials so far and the best feasible one."""

from __future__ import annotations

import argparse
import json

from autotune.commands import session
from autotune.errors import ExitCode
from autotune.study import storage as st
from autotune.study.status import status_data, status_text


def main(args: argparse.Namespace) -> int:
    exp, _ = session.load(args.file)
    studies = st.open_existing(exp, st.storage_url(exp, args.storage))
    data = status_data(exp, studies)
    print(json.dumps(data, indent=2, default=str) if args.json else status_text(data))
    return ExitCode.OK
