"""``autotune nightly``: one night in one process, what the CronJob runs: the study run; only
when it exits 0, on ADOPT the export into the promote directory; then the report and the
history, after every night that ends by itself (a failed one too: they show what happened;
one stopped by a signal exits 130 after its undo, and the next history shows it "interrupted").

What the CronJob's shell script did in four processes, in one: as PID 1 of the pod's container
it is the process the kubelet's SIGTERM reaches, and its handlers cover every step and the
moments between them. The steps are called through their modules (``session.study_run``...),
so a test can stand in for each.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from autotune.commands import (
    EXPORT_FORMATS,
    PROMOTE_DIR_VAR,
    PROMOTE_FORMAT_VAR,
    export,
    history,
    outcome,
    report,
    session,
)
from autotune.errors import ExitCode
from autotune.platforms.kubernetes.grace import grace_warnings


def main(args: argparse.Namespace) -> int:
    promote_dir = args.promote_dir or os.environ.get(PROMOTE_DIR_VAR) or None
    fmt = args.promote_format or os.environ.get(PROMOTE_FORMAT_VAR) or "kustomize"
    if fmt not in EXPORT_FORMATS:
        print(f"nightly: ${PROMOTE_FORMAT_VAR} is {fmt!r}, not one of "
              f"{', '.join(EXPORT_FORMATS)}", file=sys.stderr)
        return ExitCode.USAGE
    if promote_dir is not None and args.no_confirm:
        # Review finding: without the confirmation an ADOPT rests on single search measurements
        # (the 20% fallback margin, no rank test), and it was promoted like a confirmed one.
        print(f"nightly: a promotion (--promote-dir or ${PROMOTE_DIR_VAR}) needs the "
              "confirmation's evidence: drop --no-confirm, or the promote directory",
              file=sys.stderr)
        return ExitCode.USAGE
    exp, digest = session.load(args.file)
    if promote_dir is not None and fmt == "kustomize" and exp.target.kind != "kubernetes":
        # Review finding: every night "promoted" nothing and exited 0, the job green.
        print(f"nightly: the promote format kustomize patches a Deployment, and {args.file} "
              f"has a {exp.target.kind} target: give --promote-format (or "
              f"${PROMOTE_FORMAT_VAR}) env, json or helm-values", file=sys.stderr)
        return ExitCode.USAGE
    for warning in grace_warnings(exp):  # in the night's log, where the operator looks
        print(f"nightly: warning: {warning}", file=sys.stderr)
    code = outcome.guarded(lambda: session.study_run(exp, digest, args, unattended=True))
    # Only a night that ran to its end promotes: a drifted or failed one has nothing to say.
    if code == ExitCode.OK and promote_dir is not None:
        code = outcome.guarded(lambda: export.promote(exp, args.storage, fmt,
                                                      Path(promote_dir)))
    for step in (lambda: report.report_line(exp, args.storage),
                 lambda: history.show(exp, args.storage, None, as_json=False)):
        done = outcome.guarded(step)
        if code == ExitCode.OK:
            code = done
    return code
