"""``autotune doctor``: the prerequisites, and how to fix what is missing."""

from __future__ import annotations

import argparse

from autotune import doctor
from autotune.commands import session
from autotune.errors import ExitCode


def main(args: argparse.Namespace) -> int:
    exp = session.load(args.file)[0] if args.file else None
    checks = doctor.run(exp, context=args.context)
    for c in checks:
        print(f"[{'ok' if c.ok else 'MISSING'}] {c.name}: {c.detail}")
        if not c.ok and c.fix:
            print(f"      fix: {c.fix}")
    return ExitCode.OK if all(c.ok for c in checks) else ExitCode.CONFIG
