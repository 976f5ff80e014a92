"""``autotune validate``: check an experiment file (and, asked, the cluster and the metrics);
start nothing."""

from __future__ import annotations

import argparse
import sys

from autotune.advice import advise
from autotune.commands import session
from autotune.errors import ExitCode
from autotune.experiment import Experiment
from autotune.platforms.kubernetes import stack as cluster
from autotune.platforms.kubernetes.grace import grace_warnings


def main(args: argparse.Namespace) -> int:
    exp, _ = session.load(args.file)
    if _usage_problem(exp, args):
        return ExitCode.USAGE
    note = session.check_promql(exp, args.file)  # an invalid query is an invalid experiment
    size = len(exp.pool_members())
    pool = f" in a pool of {size}" if size > 1 else ""
    storms = (f", {len(exp.chaos.scenarios)} chaos scenarios combined by {exp.chaos.combine}"
              if exp.chaos.scenarios else "")
    print(f"{args.file}: valid ({exp.target.kind} target{pool}, {len(exp.parameters)} "
          f"parameters, {exp.study.trials} trials{storms})")
    for warning in [*advise(exp), *grace_warnings(exp)]:
        print(f"  warning: {warning}", file=sys.stderr)
    if note:
        print(f"  note: {note}", file=sys.stderr)
    if not (args.cluster or args.live):
        return ExitCode.OK
    warnings: list[str] = []
    problems: list[str] = []
    members = exp.pool_members()
    for member in members:  # every member of a pool, each named; else the target
        prefix = f"{member.member}: " if len(members) > 1 else ""
        found = (cluster.validate_cluster(member, context=args.context, warnings=warnings)
                 if args.cluster else [])
        if args.live:
            found += cluster.validate_live(member, context=args.context)
        problems += [prefix + p for p in found]
    for warning in warnings:
        print(f"  warning: {warning}", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    checked = " and ".join(x for x, on in (("cluster", args.cluster), ("metrics", args.live)) if on)
    print(f"{checked}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
    return ExitCode.OK if not problems else ExitCode.CONFIG


def _usage_problem(exp: Experiment, args: argparse.Namespace) -> bool:
    """--cluster or --live asked of an experiment they do not apply to: said (on stderr)
    before the file is called valid, so that no "valid" line precedes exit 2."""
    if exp.target.kubernetes is None and args.cluster:
        print("--cluster: this experiment has no kubernetes target", file=sys.stderr)
        return True
    if args.context and exp.target.kubernetes is None:
        print("--context: this experiment has no kubernetes target (no kubeconfig is read)",
              file=sys.stderr)
        return True
    if args.context and not (args.cluster or args.live):
        print("--context goes with --cluster or --live: nothing else asks the cluster",
              file=sys.stderr)
        return True
    if exp.target.local is not None and args.live:
        # The service exists only during a run (and its series with it), whatever Prometheus
        # scrapes it: nothing to query now.
        scraper = ("the Prometheus at prometheus.url" if exp.prometheus.url
                   else "the Prometheus autotune starts for it")
        print(f"--live: this experiment has a local target: autotune starts its service for "
              f"each run, and {scraper} has none of its series before that; `autotune doctor` "
              "checks what a local run needs", file=sys.stderr)
        return True
    if exp.target.kubernetes is None and args.live and not exp.prometheus.url:
        print(f"--live: this experiment has a {exp.target.kind} target and no prometheus.url: "
              "there is nothing to query", file=sys.stderr)
        return True
    return False
