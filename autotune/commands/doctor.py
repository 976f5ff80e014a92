"""``autotune doctor``: the prerequisites, and how to fix what is missing."""

from __future__ import annotations

import argparse
import sys

from autotune import doctor
from autotune.commands import session
from autotune.errors import ExitCode


def main(args: argparse.Namespace) -> int:
    exp = session.load(args.file)[0] if args.file else None
    if args.context and (exp is None or exp.target.kubernetes is None):
        # As validate: an option nothing would use is a mistake to name, not to ignore.
        print("doctor: --context: " + ("give an experiment with a kubernetes target"
                                       if exp is None else "this experiment has no kubernetes "
                                       "target (no kubeconfig is read)"), file=sys.stderr)
        return ExitCode.USAGE
    checks = doctor.run(exp, context=args.context)
    for c in checks:
        print(f"[{'ok' if c.ok else 'MISSING'}] {c.name}: {c.detail}")
        if not c.ok and c.fix:
            print(f"      fix: {c.fix}")
    return ExitCode.OK if all(c.ok for c in checks) else ExitCode.CONFIG
