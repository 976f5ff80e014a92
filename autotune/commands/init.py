"""``autotune init``: write a first experiment for your service.

The edges only: start the local command once (or read a URL, or a Deployment) to learn which
series its ``/metrics`` exports and which CPU limit it runs under; ``autotune.scaffold`` turns
that into the experiment (its docstring has the rules). A command started here is started once,
on 127.0.0.1, through ``platforms.local.proc`` like every process autotune starts (its own
process group, stopped by PID before init returns).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

import requests

from autotune import files, redaction, scaffold
from autotune.advice import advise
from autotune.clock import SystemClock
from autotune.errors import ExitCode, ExperimentError, PrerequisiteError, TargetError
from autotune.experiment import parse_experiment
from autotune.platforms.kubernetes.client import connect
from autotune.platforms.kubernetes.envpatch import cpu_cores
from autotune.platforms.kubernetes.objects import DEPLOYMENTS
from autotune.platforms.local import proc
from autotune.platforms.local.ports import free_port
from autotune.platforms.local.service import SERVICE_JOB

STOP_GRACE = 5.0
"""Seconds the probed command gets to exit on SIGTERM before its group gets SIGKILL."""


def main(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)  # first: the default file name is read from --command
    if problem is not None:
        print(f"autotune init: error: {problem}", file=sys.stderr)
        return ExitCode.USAGE
    out = Path(args.output or f"{_name(args)}.yaml")
    if out.exists() and not args.force:  # before the service is started for nothing
        print(f"{out} exists; give -o another file, or --force to replace it", file=sys.stderr)
        return ExitCode.USAGE
    if not out.parent.is_dir():  # found before the service is started, not after
        print(f"autotune init: error: -o {out}: {out.parent} is not a directory",
              file=sys.stderr)
        return ExitCode.USAGE
    problem = _option_problem(args)
    if problem is not None:  # a bad command line: nothing is asked or started
        print(f"autotune init: error: {problem}", file=sys.stderr)
        return ExitCode.USAGE
    service = _deployment(args) if args.deployment else _command(args)
    text = scaffold.draft(service)
    # Replaced as a whole, the link itself where -o names a symlink (--force): never the file
    # it points to (autotune.files, as every file autotune writes).
    files.replace(out, text)
    print(f"wrote {out}")
    for line in text.splitlines():
        if not line.startswith("# - "):
            continue
        print(f"  {line[4:]}")
    for warning in advise(parse_experiment(text), service.cpu_limit):
        print(f"  warning: {warning}", file=sys.stderr)
    print(f"next: autotune validate {out} && autotune run {out}")
    return ExitCode.OK


def _name(args: argparse.Namespace) -> str:
    """The experiment's name: --name, else from the Deployment or the command's program."""
    if args.name:
        return str(args.name)
    if args.deployment:
        return scaffold.experiment_name(args.deployment.partition("/")[2])
    argv = shlex.split(args.service_command or "")
    return scaffold.experiment_name(Path(argv[0]).stem if argv else "service")


def _command(args: argparse.Namespace) -> scaffold.Service:
    argv = tuple(shlex.split(args.service_command))  # checked by _usage_problem
    findings: list[str] = []
    health = args.health
    if args.url is not None:
        series, health_ok = _read(args.url.rstrip("/"), args.metrics_path, health, args.path)
        findings.append(f"/metrics read from {redaction.url(args.url)}")
    else:
        series, health_ok = _probe(argv, args.metrics_path, health, args.path,
                                   args.ready_timeout, args.cwd)
        findings.append("/metrics read from the command, started once on 127.0.0.1")
    if not health_ok:
        findings.append(f"health: {health} did not answer 200, so readiness is {args.metrics_path}")
        health = args.metrics_path
    return scaffold.Service(
        name=_name(args), series=series, cpu_limit=args.cpus, local_command=argv, cwd=args.cwd,
        health=health,
        metrics_path=args.metrics_path, path=args.path, forcegc_env=args.forcegc_env,
        service_job=SERVICE_JOB, findings=findings)


COMMAND_ONLY = {"cpus": ("--cpus", 1.0), "path": ("--path", "/"),
                "health": ("--health", "/healthz"), "cwd": ("--cwd", None),
                "ready_timeout": ("--ready-timeout", 30.0)}
DEPLOYMENT_ONLY = {"container": "--container", "prometheus": "--prometheus",
                   "context": "--context", "kubeconfig": "--kubeconfig"}
"""Options of one mode: given in the other they would be dropped without a word (review
finding: ``--command ... --prometheus URL`` wrote a file without it)."""


def _usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line itself (exit 2), before anything starts."""
    if not args.deployment:
        other = [flag for key, flag in DEPLOYMENT_ONLY.items() if getattr(args, key) is not None]
        if other:
            return f"{', '.join(other)}: only with --deployment"
        return _command_problem(args)
    other = [flag for key, (flag, default) in COMMAND_ONLY.items()
             if getattr(args, key) != default]
    if other:
        return f"{', '.join(other)}: only with --command"
    namespace, _, name = args.deployment.partition("/")
    if not namespace or not name or "/" in name:
        return f"--deployment {args.deployment!r}: write NAMESPACE/NAME"
    if not args.prometheus:
        return ("--deployment needs --prometheus URL: the Prometheus that scrapes the "
                "Deployment's pods")
    return None


def _command_problem(args: argparse.Namespace) -> str | None:
    if not args.service_command:
        return "init needs --command (a local service) or --deployment (a Deployment on a cluster)"
    try:
        argv = shlex.split(args.service_command)
    except ValueError as e:
        return f"--command: {e}"
    if not argv:
        return "--command is empty"
    if not any("{port}" in a for a in argv):  # with --url too: the file runs the command
        return ("--command must contain {port} where the service takes its listening port "
                "(e.g. --command './server -addr 127.0.0.1:{port}'): autotune gives each "
                "trial's service a free port")
    return None


OPTION_OF = {
    "name": "--name", "target.local.command": "--command", "target.local.cwd": "--cwd",
    "target.local.cpus": "--cpus", "chaos.stress.workers": "--cpus",
    "target.local.load.path": "--path", "target.local.health": "--health",
    "target.local.metrics_path": "--metrics-path",
    "target.kubernetes.namespace": "--deployment", "target.kubernetes.deployment": "--deployment",
    "target.kubernetes.container": "--container", "prometheus.url": "--prometheus",
}
"""The experiment's fields that ``init`` fills from its options."""


def _option_problem(args: argparse.Namespace) -> str | None:
    """An option whose value the written file would refuse (``--cpus 300``, ``--path api``),
    named as the option, before the service is started: a draft of the file without the
    service's series is validated first (the real one is the same in those fields)."""
    if args.deployment:
        # Before the cluster is asked (review finding: `--name "My Service"` or `--prometheus
        # notaurl` contacted it, then failed with exit 1); the container as named, else a
        # valid stand-in for the one the Deployment has.
        namespace, _, name = args.deployment.partition("/")
        service = scaffold.Service(
            name=_name(args), series=None, cpu_limit=None,
            deployment=(namespace, name, args.container or "app"),
            prometheus_url=args.prometheus, forcegc_env=args.forcegc_env)
    elif args.service_command:
        try:
            argv = tuple(shlex.split(args.service_command))
        except ValueError as e:
            return f"--command: {e}"
        if not argv or not any("{port}" in a for a in argv):
            return None  # _command says what --command lacks, in its words
        service = scaffold.Service(
            name=_name(args), series=None, cpu_limit=args.cpus, local_command=argv,
            cwd=args.cwd, health=args.health, metrics_path=args.metrics_path, path=args.path,
            forcegc_env=args.forcegc_env, service_job=SERVICE_JOB)
    else:
        return None
    try:
        scaffold.draft(service)
    except ExperimentError as e:
        said = []
        for part in str(e).split("; "):
            where, colon, what = part.partition(": ")
            option = (OPTION_OF.get(where) or
                      ("--forcegc-env" if re.fullmatch(r"parameters\[\d+\]\.env", where)
                       else None))
            said.append(f"{option}: {what}" if option and colon else part)
        return "; ".join(dict.fromkeys(said))
    return None


def _deployment(args: argparse.Namespace) -> scaffold.Service:
    namespace, _, name = args.deployment.partition("/")
    kube = connect(SystemClock(), context=args.context, kubeconfig=args.kubeconfig)
    dep = kube.get(DEPLOYMENTS, namespace, name)
    if dep is None:
        raise TargetError(f"Deployment {namespace}/{name} not found")
    containers = dep["spec"]["template"]["spec"]["containers"]
    names = [c["name"] for c in containers]
    if args.container is None and len(containers) > 1:
        raise PrerequisiteError(f"Deployment {namespace}/{name} has containers {names}: "
                                "say which with --container")
    chosen = [c for c in containers if args.container in (None, c["name"])]
    if not chosen:
        raise PrerequisiteError(f"Deployment {namespace}/{name} has no container "
                                f"{args.container!r} (it has {names})")
    container = chosen[0]
    limit = cpu_cores(((container.get("resources") or {}).get("limits") or {}).get("cpu"))
    findings = [f"container {container['name']}: "
                + (f"CPU limit {limit:g}" if limit is not None else "no CPU limit")]
    series = None
    if args.url is not None:
        series, _ = _read(args.url.rstrip("/"), args.metrics_path, None, None)
        findings.append(f"/metrics read from {redaction.url(args.url)}")
    return scaffold.Service(
        name=_name(args), series=series, cpu_limit=limit,
        deployment=(namespace, name, container["name"]), prometheus_url=args.prometheus,
        forcegc_env=args.forcegc_env, findings=findings)


def _read(base: str, metrics_path: str, health: str | None,
          path: str | None) -> tuple[frozenset[str], bool]:
    """The series ``base + metrics_path`` exports, and whether ``health`` answers 200.

    One request to ``path`` first: a labelled histogram (promhttp's middleware, a HistogramVec)
    exports no series at all before its first observation, so an idle service shows none. That
    request must succeed: the load generator sends nothing else, and counts every answer that is
    not 2xx as an error (a study of 404s measures nothing)."""
    if path is not None:
        try:
            status = requests.get(base + path, timeout=10).status_code
        except requests.RequestException as e:
            raise TargetError(f"GET {path} failed: {redaction.scrub(str(e))}") from None
        if not 200 <= status < 300:
            raise PrerequisiteError(
                f"GET {path} answered {status}: the load generator would send only that request "
                "and count every answer as an error; give --path an endpoint that serves a real "
                "request (e.g. --path /api/items)")
    try:
        answer = requests.get(base + metrics_path, timeout=10)
        answer.raise_for_status()
    except requests.RequestException as e:
        raise TargetError(f"cannot read {redaction.url(base + metrics_path)}: "
                          f"{redaction.scrub(str(e))}") from None
    healthy = False
    if health is not None:
        try:
            healthy = requests.get(base + health, timeout=10).status_code == 200
        except requests.RequestException:
            healthy = False
    return scaffold.exported_series(answer.text), healthy


def _probe(argv: tuple[str, ...], metrics_path: str, health: str, path: str, timeout: float,
           cwd: str | None) -> tuple[frozenset[str], bool]:
    """Start the command on a free port (in its own process group, with the environment a
    run gives the service: no storage URL, no token), read its /metrics once it answers, stop
    it by PID."""
    port = free_port()
    command = [a.replace("{port}", str(port)) for a in argv]
    base = f"http://127.0.0.1:{port}"
    shown = shlex.join(redaction.argv(command))  # a --password=x in it is masked
    with tempfile.TemporaryDirectory(prefix="autotune-init-") as tmp:
        service = proc.start(command, role="service (init's probe)", cwd=cwd,
                             env=redaction.child_env([]), log_path=Path(tmp) / "service.log")
        try:
            deadline = time.monotonic() + timeout
            while True:
                if not service.running():
                    tail = service.tail()
                    raise TargetError(f"{shown} exited with {service.returncode} "
                                      f"before serving {metrics_path}" +
                                      (f":\n{tail}" if tail else ""))
                try:
                    if requests.get(base + metrics_path, timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.monotonic() > deadline:
                    raise TargetError(f"{shown} did not serve {metrics_path} on "
                                      f"port {port} within {timeout:g} s")
                time.sleep(0.2)  # poll interval of a condition, not a wait for an outcome
            return _read(base, metrics_path, health, path)
        finally:
            service.stop(grace=STOP_GRACE)
