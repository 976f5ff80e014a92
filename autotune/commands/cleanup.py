"""``autotune cleanup``: remove the stress and restore the targets a dead run left behind."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.backends import build
from autotune.clock import SystemClock
from autotune.commands import session
from autotune.errors import AutotuneError, ExitCode
from autotune.experiment import Experiment
from autotune.platforms.kubernetes import stack as cluster
from autotune.study import storage as st
from autotune.study.loop import remove_leftovers


def main(args: argparse.Namespace) -> int:
    if args.file is None and args.namespace is None:
        print("cleanup: give an experiment file, or --namespace", file=sys.stderr)
        return ExitCode.USAGE
    if args.force and args.namespace is None:  # it would be ignored, silently
        print("cleanup: --force goes with --namespace", file=sys.stderr)
        return ExitCode.USAGE
    done: list[str] = []
    failed: list[AutotuneError] = []
    if args.namespace is not None:
        # Every step is tried; what failed is said after what was done.
        done += cluster.cleanup_namespace(args.namespace, context=args.context,
                                          kubeconfig=args.kubeconfig, force=args.force,
                                          failed=failed)
        for e in failed:
            print(f"cleanup of namespace {args.namespace} failed: {e}", file=sys.stderr)
    if args.file is not None:
        exp, _ = session.load(args.file)
        for member in exp.pool_members():  # every member of a pool; else the target
            try:
                done += _clean(member, st.results_dir(exp), args.context)
            except AutotuneError as e:  # the other members are cleaned all the same
                failed.append(e)
                print(f"cleanup of {member.member or member.name} failed: {e}", file=sys.stderr)
    if failed:
        for line in done:
            print(f"removed: {line}")
        raise failed[0]
    for line in done:
        print(f"removed: {line}")
    if not done:
        print("nothing to clean up")
    return ExitCode.OK


def _clean(exp: Experiment, results: Path, context: str | None) -> list[str]:
    backends = build(exp, results, SystemClock(), context=context, preflight=False)
    try:
        return remove_leftovers(backends)
    finally:
        backends.target.restore()  # nothing applied: only lets go (the run Lease)
        backends.source.close()
