"""``autotune cleanup``: remove the stress and restore the targets a dead run left behind."""

from __future__ import annotations

import argparse
import sys

from autotune.backends import build
from autotune.clock import SystemClock
from autotune.commands import session
from autotune.errors import ExitCode
from autotune.platforms.kubernetes import stack as cluster
from autotune.study import storage as st


def main(args: argparse.Namespace) -> int:
    if args.file is None and args.namespace is None:
        print("cleanup: give an experiment file, or --namespace", file=sys.stderr)
        return ExitCode.USAGE
    done: list[str] = []
    if args.namespace is not None:
        done += cluster.cleanup_namespace(args.namespace, context=args.context,
                                          kubeconfig=args.kubeconfig, force=args.force)
    if args.file is not None:
        exp, _ = session.load(args.file)
        for member in exp.pool_members():  # every member of a pool; else the target
            backends = build(member, st.results_dir(exp), SystemClock(), context=args.context,
                             preflight=False)
            try:
                # The target first: on a cluster it takes the run Lease (a live run keeps its
                # stress)
                done += backends.target.cleanup() + backends.injector.cleanup()
            finally:
                backends.target.restore()  # nothing applied: only lets go (the run Lease)
                backends.source.close()
    for line in done:
        print(f"removed: {line}")
    if not done:
        print("nothing to clean up")
    return ExitCode.OK
