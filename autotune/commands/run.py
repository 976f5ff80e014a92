"""``autotune run``: run (or resume) the study of an experiment."""

from __future__ import annotations

import argparse

from autotune.commands import session


def main(args: argparse.Namespace) -> int:
    exp, digest = session.load(args.file)
    return session.study_run(exp, digest, args)
