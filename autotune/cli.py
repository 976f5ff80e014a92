"""argv -> calls -> exit code (``autotune.errors.ExitCode``).

SIGINT and SIGTERM are handled for the whole command, from the first line of ``main()``: as PID 1
of a container (the CronJob runs ``autotune nightly`` with no shell in between) a process
receives only the signals it has a handler for (pid_namespaces(7)), so a moment without one
would drop the kubelet's SIGTERM and leave it to the SIGKILL after the grace period to end a run
that changed the target. Heavy imports (pydantic, Optuna, the Kubernetes client) are made inside
the commands for the same reason: at module level they would run before ``main()``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import __version__, redaction
from autotune.errors import AutotuneError, ExitCode, ExperimentError, StudyError, exit_codes_text
from autotune.study.interrupts import Interrupted, signals_as_exceptions

if TYPE_CHECKING:
    from autotune.experiment import Experiment

log = logging.getLogger("autotune")

# autotune.report.export.FORMATS, spelled out: importing it loads Optuna, seconds spent before
# main() could install the signal handlers (tests/unit/test_exit_codes.py keeps them equal).
EXPORT_FORMATS = ("kustomize", "env", "json", "helm-values")
PROMOTE_DIR_VAR, PROMOTE_FORMAT_VAR = "AUTOTUNE_PROMOTE_DIR", "AUTOTUNE_PROMOTE_FORMAT"
CHANGES_THINGS = frozenset({"run", "confirm", "cleanup", "nightly"})
"""Commands that inject stress or configure a target: an interrupt of them undoes something."""

DESCRIPTION = """\
Find the Go runtime settings (GOMAXPROCS, GOGC, GOMEMLIMIT, a forced-GC interval, ...) that
keep a service's latency low under CPU contention: every trial applies a candidate, injects CPU
stress (Chaos Mesh StressChaos in a cluster, stress-ng in the service's cgroup locally), measures
a window from Prometheus under the same load (autotune's open-loop generator: a process locally,
optionally a pod in a cluster) and removes the stress again. Results persist in an Optuna study;
re-running a command resumes it. A study starts from your own candidates (study.enqueue), a
Go-aware prior (GOMAXPROCS at the CPU limit, GOGC raised) and a space-filling design, never
measures a configuration twice, and ends with interleaved confirmation rounds that go on while
the best candidate is not separated from the runner-up or the baseline. Each trial also
records what happened inside the Go scheduler (scheduling-latency and GC-pause heat maps, CPU
classes, CFS throttling; with measure.schedtrace the run queues and an overflow detector, read
from the service's stderr locally or the pods' logs in a cluster), and the report explains the
verdict from those figures; measure.capture adds a runtime trace and CPU profile of the baseline
and the recommendation under stress (in a cluster through the pod proxy). Run nightly, a study
continues while the environment's fingerprint is unchanged, starts a warm-started one when it
changes, re-checks the last recommendation against production (--fail-on-drift) and keeps a
history.
"""

EPILOG = """\
examples:
  autotune validate experiments/local.yaml
  autotune run experiments/local.yaml --trials 5      # a short run; run again to resume
  autotune status experiments/local.yaml --json
  autotune report experiments/local.yaml             # report.md/.html/.json + plots
  autotune export experiments/api.yaml --format kustomize > patch.yaml
  autotune export experiments/api.yaml --format kustomize --write-to gitops/   # only on ADOPT
  autotune run experiments/api.yaml --fail-on-drift   # exit 4 when production drifted
  autotune nightly experiments/api.yaml --fail-on-drift --promote-dir gitops/   # the CronJob
  autotune history experiments/api.yaml               # night by night, + nights.{md,json,png}
  autotune cleanup experiments/local.yaml             # remove stress/processes a dead run left

exit codes:
""" + exit_codes_text() + "\n"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autotune", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, description=help_text)

    p = add("run", "run (or resume) the study of an experiment")
    _run_options(p)

    p = add("nightly", "one night in one process (what the CronJob runs): `run`; only when it "
                       "exits 0, on ADOPT the export into the promote directory (not adopted "
                       "tonight is no error); then `report` and `history`. Exits with the run's "
                       "code (0, or 4 with --fail-on-drift), else with the first failing step's; "
                       "SIGINT/SIGTERM at any step stops the night (130), the running trial "
                       "undone first")
    _run_options(p)
    p.add_argument("--promote-dir", metavar="DIR",
                   help=f"on ADOPT write the export here, as `export --write-to DIR` (default "
                        f"${PROMOTE_DIR_VAR}; neither: promote nothing)")
    p.add_argument("--promote-format", choices=EXPORT_FORMATS,
                   help=f"the export's format (default ${PROMOTE_FORMAT_VAR}, else kustomize)")

    p = add("validate", "check an experiment file; start nothing (exit 0 valid, 1 invalid)")
    p.add_argument("file")
    p.add_argument("--cluster", action="store_true",
                   help="also check the cluster: RBAC for every verb (pods/log with "
                        "measure.schedtrace, pods/proxy with measure.capture, create/delete "
                        "pods with target.kubernetes.load), Deployment and container, the "
                        "StressChaos CRD, server-side dry-runs of the patch and the chaos")
    p.add_argument("--live", action="store_true",
                   help="also run every metric query against Prometheus over a recent window")
    p.add_argument("--context", help="kubeconfig context")

    p = add("schema", "print the JSON Schema of experiment files")

    p = add("status", "show the trials so far and the best feasible one")
    p.add_argument("file")
    p.add_argument("--storage")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("confirm", "re-measure the top candidates and the baseline, interleaved and shuffled, "
                       "and give the verdict (adopt / keep current / inconclusive)")
    p.add_argument("file")
    p.add_argument("--storage")
    p.add_argument("--plain", action="store_true", help="log lines instead of a live display")
    p.add_argument("--context", help="kubeconfig context (kubernetes targets)")
    _confirm_options(p)

    p = add("report", "write results/<name>/report.{md,html,json} and the plots")
    p.add_argument("file")
    p.add_argument("--storage")
    p.add_argument("--out", help="directory (default results/<name>/)")

    p = add("export", "print the recommendation ready to apply")
    p.add_argument("file")
    p.add_argument("--storage")
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    p.add_argument("--force", action="store_true",
                   help="export the best candidate even when the verdict is not 'adopt'")
    p.add_argument("--write-to", metavar="DIR",
                   help="on ADOPT, write DIR/<experiment>-patch.yaml (.env, .json, "
                        "-values.yaml) for a GitOps pipeline instead of printing; rewritten "
                        "only when the variables change; not with --force")
    p.add_argument("--overwrite", action="store_true",
                   help="with --write-to: replace the file even if autotune did not write it "
                        "(it lacks autotune's first line)")

    p = add("history", "each night's study, environment, verdict, recommendation and objective; "
                       "also writes nights.{md,json,png}")
    p.add_argument("file")
    p.add_argument("--storage")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--out", help="directory for nights.{md,json,png} (default results/<name>/)")

    p = add("cleanup", "remove stress and restore targets that a dead run left behind")
    p.add_argument("file", nargs="?", help="experiment file (its own leftovers)")
    p.add_argument("--namespace", help="kubernetes: delete every StressChaos and load generator "
                                       "pod labelled as ours and restore every Deployment "
                                       "autotune annotated; refused while a run holds a "
                                       "Deployment's Lease there")
    p.add_argument("--force", action="store_true",
                   help="with --namespace: clean up even while another run holds a Lease (its "
                        "stress is removed under it; that run's window is then discarded)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--kubeconfig", help="kubeconfig file")

    p = add("doctor", "check the prerequisites (local tools, cgroups; cluster access for "
                      "kubernetes experiments) and say how to fix what is missing")
    p.add_argument("file", nargs="?", help="experiment file (default: check the local stack)")
    p.add_argument("--context", help="kubeconfig context (kubernetes experiments)")

    for sp in sub.choices.values():
        for action in sp._actions:
            if action.dest == "storage":
                action.help = ("study storage URL (default: $AUTOTUNE_STORAGE, else study.storage, "
                               "else sqlite:///results/<name>/study.db)")
    return parser


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="experiment YAML file")
    p.add_argument("--trials", type=_positive, help="search-trial budget (overrides study.trials)")
    p.add_argument("--storage", help="study storage URL (default sqlite:///results/<name>/study.db)")
    p.add_argument("--new-study", action="store_true",
                   help="start a new study even if one exists (the old one is kept)")
    p.add_argument("--plain", action="store_true", help="log lines instead of a live display")
    p.add_argument("--context", help="kubeconfig context (kubernetes targets)")
    p.add_argument("--no-confirm", action="store_true",
                   help="skip the re-measurements: the confirmation of the top candidates at "
                        "the end and the drift check")
    p.add_argument("--fail-on-drift", action="store_true",
                   help=f"exit {int(ExitCode.DRIFT)} when the drift check finds production "
                        "significantly better than the last adopted recommendation (for alerting)")
    _confirm_options(p)


def _confirm_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=_positive, default=3, help="candidates to confirm (default 3)")
    p.add_argument("--repeats", type=_positive, default=3,
                   help="confirmation rounds; each measures every candidate and the baseline "
                        "once, in a shuffled order (default 3)")
    p.add_argument("--extra", type=int, default=6, metavar="N",
                   help="adaptive confirmation: up to N more runs, spent only while the best "
                        "candidate is not separated from the runner-up or the baseline (default "
                        "6; 0 = fixed rounds only)")


def _load(path: str) -> tuple[Experiment, str]:
    from autotune.experiment import load_experiment

    return load_experiment(path)


def cmd_validate(args: argparse.Namespace) -> int:
    from autotune.advice import advise

    exp, _ = _load(args.file)
    print(f"{args.file}: valid ({exp.target.kind} target, {len(exp.parameters)} parameters, "
          f"{exp.study.trials} trials)")
    for warning in advise(exp):
        print(f"  warning: {warning}", file=sys.stderr)
    if not (args.cluster or args.live):
        return ExitCode.OK
    if exp.target.kubernetes is None and args.cluster:
        print("--cluster: this experiment has no kubernetes target", file=sys.stderr)
        return ExitCode.USAGE
    from autotune.platforms.kubernetes import stack as cluster

    warnings: list[str] = []
    problems = (cluster.validate_cluster(exp, context=args.context, warnings=warnings)
                if args.cluster else [])
    if args.live:
        problems += cluster.validate_live(exp, context=args.context)
    for warning in warnings:
        print(f"  warning: {warning}", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    checked = " and ".join(x for x, on in (("cluster", args.cluster), ("metrics", args.live)) if on)
    print(f"{checked}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
    return ExitCode.OK if not problems else ExitCode.CONFIG


def cmd_schema(args: argparse.Namespace) -> int:
    from autotune.experiment import Experiment

    print(json.dumps(Experiment.model_json_schema(), indent=2))
    return ExitCode.OK


def _runner(exp: Experiment, digest: str, plain: bool,
            context: str | None = None) -> tuple[Any, Any]:
    """The study runner with this experiment's backends, and its progress display."""
    from autotune.backends import build
    from autotune.clock import SystemClock
    from autotune.progress import PlainProgress, RichProgress
    from autotune.study import storage as st
    from autotune.study.journal import Journal
    from autotune.study.loop import StudyRunner

    results = st.results_dir(exp)
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StudyError(f"cannot create the results directory {results}: "
                         f"{e.strerror or e}") from None
    clock = SystemClock()
    progress = RichProgress() if sys.stderr.isatty() and not plain else PlainProgress()
    backends = build(exp, results, clock, context=context)
    runner = StudyRunner(exp, backends, clock=clock, progress=progress,
                         journal=Journal(results / "trials.jsonl"), experiment_hash=digest)
    return runner, progress


def _verdict_text(exp: Experiment, studies: Any) -> str:
    from autotune.report import build_report

    report = build_report(exp, studies)
    return f"verdict: {report.verdict.upper()} - {report.reason}"


def _capture(exp: Experiment, studies: Any, runner: Any) -> None:
    """``measure.capture``: a trace and a CPU profile of the baseline and the recommendation."""
    if not exp.measure.capture:
        return
    from autotune.report import build_report
    from autotune.study.profiles import capture_pair

    report = build_report(exp, studies)
    chosen = next((c for c in report.candidates if c.id == report.recommendation), None)
    done = capture_pair(exp, studies, runner.backends, runner.clock,
                        chosen.settings if chosen is not None else None)
    for c in done:
        for f in c.get("files") or ():
            print(f"captured {c['name']} {f['kind']}: {f['open_with']}")
        if c.get("failure"):
            print(f"capture of {c['name']} failed: {c['failure']}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    exp, digest = _load(args.file)
    return _run(exp, digest, args)


def _run(exp: Experiment, digest: str, args: argparse.Namespace) -> int:
    from autotune.progress import RichProgress
    from autotune.report import history
    from autotune.study import nightly
    from autotune.study import storage as st
    from autotune.study.status import run_text, status_data

    options = nightly.NightOptions(
        budget=args.trials or exp.study.trials, new_study=args.new_study,
        confirm=not args.no_confirm, top=args.top, repeats=args.repeats, extra=args.extra)
    progress = None
    try:
        runner, progress = _runner(exp, digest, args.plain, args.context)
        night = nightly.run_night(exp, st.storage_url(exp, args.storage), runner, options,
                                  history.verdict_record)
        if night.confirmed:
            _capture(exp, night.studies, runner)
    finally:
        if isinstance(progress, RichProgress):
            progress.stop()
    print(run_text(night.result, status_data(exp, night.studies), str(st.results_dir(exp))))
    if night.confirmed:
        print(f"verdict: {night.verdict['verdict'].upper()} - {night.verdict['reason']}")
    else:
        print("no confirmation runs: `autotune confirm` re-measures the top candidates")
    for line in night.lines():
        print(line)
    return (ExitCode.DRIFT if args.fail_on_drift and night.drift.status == "drifted"
            else ExitCode.OK)


def cmd_confirm(args: argparse.Namespace) -> int:
    from autotune.progress import RichProgress
    from autotune.study import storage as st
    from autotune.study.confirm import confirm

    exp, digest = _load(args.file)
    studies = st.open_existing(exp, st.storage_url(exp, args.storage))
    progress = None
    try:
        runner, progress = _runner(exp, digest, args.plain, args.context)
        done = confirm(exp, studies, runner, top=args.top, repeats=args.repeats,
                       seed=exp.study.seed, extra=args.extra)
        _capture(exp, studies, runner)
    finally:
        if isinstance(progress, RichProgress):
            progress.stop()
    print(f"{done} confirmation trials completed")
    print(_verdict_text(exp, studies))
    return ExitCode.OK


def cmd_report(args: argparse.Namespace) -> int:
    exp, _ = _load(args.file)
    written, verdict = _report(exp, args.storage, Path(args.out) if args.out else None)
    for path in written:
        print(f"wrote {path}")
    print(verdict)
    return ExitCode.OK


def _report(exp: Experiment, storage: str | None, out: Path | None) -> tuple[list[Path], str]:
    """Write the report (with the night-by-night section): the files, and the verdict line."""
    from autotune.report import build_report, history, write_report
    from autotune.study import storage as st

    url = st.storage_url(exp, storage)
    studies = st.open_existing(exp, url)
    report = build_report(exp, studies)
    out = out or st.results_dir(exp)
    written = write_report(report, out, studies)
    nights = history.load(exp, url)
    if nights:  # the report's "Night by night" section, with its plot and data next to it
        written += history.write(nights, out)
        with (out / "report.md").open("a") as f:
            f.write("\n" + history.markdown(nights))
    return written, f"verdict: {report.verdict.upper()} - {report.reason}"


def cmd_export(args: argparse.Namespace) -> int:
    from autotune.report import build_report, export
    from autotune.report.export import write_to
    from autotune.study import storage as st

    if args.write_to is not None and args.force:
        print("export: --write-to promotes adopted recommendations only; it does not take "
              "--force", file=sys.stderr)
        return ExitCode.USAGE
    exp, _ = _load(args.file)
    studies = st.open_existing(exp, st.storage_url(exp, args.storage))
    text, code = export(build_report(exp, studies), args.format, force=args.force)
    if code != 0 or args.write_to is None:
        print(text, file=sys.stdout if code == 0 else sys.stderr)
        return ExitCode(code)  # 1 (CONFIG) when nothing is exported: not ADOPT, no candidate
    path, written = write_to(Path(args.write_to), exp.name, args.format, text,
                             overwrite=args.overwrite)
    print(f"wrote {path}" if written else f"unchanged {path} (same variables)")
    return ExitCode.OK


def cmd_history(args: argparse.Namespace) -> int:
    exp, _ = _load(args.file)
    return _history(exp, args.storage, Path(args.out) if args.out else None, as_json=args.json)


def _history(exp: Experiment, storage: str | None, out: Path | None, *, as_json: bool) -> int:
    from autotune.report import history
    from autotune.study import storage as st

    nights = history.load(exp, st.storage_url(exp, storage))
    written = history.write(nights, out or st.results_dir(exp))
    print(history.to_json(nights) if as_json else history.text(nights), end="" if as_json
          else "\n")
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return ExitCode.OK


def cmd_status(args: argparse.Namespace) -> int:
    from autotune.study import storage as st
    from autotune.study.status import status_data, status_text

    exp, _ = _load(args.file)
    studies = st.open_existing(exp, st.storage_url(exp, args.storage))
    data = status_data(exp, studies)
    print(json.dumps(data, indent=2, default=str) if args.json else status_text(data))
    return ExitCode.OK


def cmd_cleanup(args: argparse.Namespace) -> int:
    from autotune.backends import build
    from autotune.clock import SystemClock
    from autotune.study import storage as st

    if args.file is None and args.namespace is None:
        print("cleanup: give an experiment file, or --namespace", file=sys.stderr)
        return ExitCode.USAGE
    done: list[str] = []
    if args.namespace is not None:
        from autotune.platforms.kubernetes import stack as cluster

        done += cluster.cleanup_namespace(args.namespace, context=args.context,
                                          kubeconfig=args.kubeconfig, force=args.force)
    if args.file is not None:
        exp, _ = _load(args.file)
        backends = build(exp, st.results_dir(exp), SystemClock(), context=args.context,
                         preflight=False)
        try:
            # The target first: on a cluster it takes the run Lease (a live run keeps its stress)
            done += backends.target.cleanup() + backends.injector.cleanup()
        finally:
            backends.target.restore()  # nothing applied: only lets go (the run Lease)
            backends.source.close()
    for line in done:
        print(f"removed: {line}")
    if not done:
        print("nothing to clean up")
    return ExitCode.OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from autotune import doctor

    exp = _load(args.file)[0] if args.file else None
    checks = doctor.run(exp, context=args.context)
    for c in checks:
        print(f"[{'ok' if c.ok else 'MISSING'}] {c.name}: {c.detail}")
        if not c.ok and c.fix:
            print(f"      fix: {c.fix}")
    return ExitCode.OK if all(c.ok for c in checks) else ExitCode.CONFIG


def cmd_nightly(args: argparse.Namespace) -> int:
    """What the CronJob's shell script did in four processes, in one: as PID 1 of the pod's
    container it is the process the kubelet's SIGTERM reaches, and its handlers cover every
    step and the moments between them."""
    promote_dir = args.promote_dir or os.environ.get(PROMOTE_DIR_VAR) or None
    fmt = args.promote_format or os.environ.get(PROMOTE_FORMAT_VAR) or "kustomize"
    if fmt not in EXPORT_FORMATS:
        print(f"nightly: ${PROMOTE_FORMAT_VAR} is {fmt!r}, not one of "
              f"{', '.join(EXPORT_FORMATS)}", file=sys.stderr)
        return ExitCode.USAGE
    exp, digest = _load(args.file)
    code = _guarded(lambda: _run(exp, digest, args))
    # Only a night that ran to its end promotes: a drifted or failed one has nothing to say.
    if code == ExitCode.OK and promote_dir is not None:
        code = _guarded(lambda: _promote(exp, args.storage, fmt, Path(promote_dir)))
    # The report and the history after every night, a failed one too: they show what happened.
    for step in (lambda: _report_line(exp, args.storage),
                 lambda: _history(exp, args.storage, None, as_json=False)):
        done = _guarded(step)
        if code == ExitCode.OK:
            code = done
    return code


def _promote(exp: Experiment, storage: str | None, fmt: str, directory: Path) -> int:
    """``export --write-to DIR`` for the nightly: a verdict other than ADOPT is no failure."""
    from autotune.report import build_report, export
    from autotune.report.export import write_to
    from autotune.study import storage as st

    studies = st.open_existing(exp, st.storage_url(exp, storage))
    text, code = export(build_report(exp, studies), fmt)
    if code != 0:
        print(f"promote: {text}")
        return ExitCode.OK
    path, written = write_to(directory, exp.name, fmt, text)
    print(f"wrote {path}" if written else f"unchanged {path} (same variables)")
    return ExitCode.OK


def _report_line(exp: Experiment, storage: str | None) -> int:
    written, _ = _report(exp, storage, None)  # the verdict was printed by the run
    if written:
        print(f"report: {written[0]} (and {len(written) - 1} more files next to it)")
    return ExitCode.OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "nightly": cmd_nightly,
    "validate": cmd_validate,
    "schema": cmd_schema,
    "status": cmd_status,
    "cleanup": cmd_cleanup,
    "doctor": cmd_doctor,
    "confirm": cmd_confirm,
    "report": cmd_report,
    "export": cmd_export,
    "history": cmd_history,
}


def main(argv: Sequence[str] | None = None) -> int:
    # The handlers first, for every command: see the module docstring (PID 1). A command that
    # changes nothing is simply stopped by them, with its own message and code.
    with signals_as_exceptions():
        command: str | None = None
        try:
            parser = build_parser()
            try:
                args = parser.parse_args(argv)
            except SystemExit as e:
                return ExitCode.OK if e.code == 0 else ExitCode.USAGE
            command = args.command
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(redaction.ScrubbingFormatter(
                "%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S"))
            logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                                handlers=[handler])
            return _guarded(lambda: COMMANDS[args.command](args))
        except (Interrupted, KeyboardInterrupt) as e:
            name = getattr(e, "signame", "SIGINT")
            if command in CHANGES_THINGS:
                print(f"interrupted ({name}); stress removed and target restored; "
                      "run the same command again to resume", file=sys.stderr)
            else:
                print(f"interrupted ({name})", file=sys.stderr)
            return ExitCode.INTERRUPTED


def _guarded(step: Callable[[], int]) -> ExitCode:
    """Run a command (or one step of ``nightly``): an exception becomes a message and its exit
    code. Interrupts are not caught here: they end the whole command."""
    try:
        return ExitCode(step())
    except ExperimentError as e:
        where = f"{e.source}: " if e.source else ""
        print(f"{where}invalid experiment:", file=sys.stderr)
        for problem in e.problems:
            print(f"  {problem}", file=sys.stderr)
        return e.exit_code
    except AutotuneError as e:
        problems = getattr(e, "problems", None) or [str(e)]
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return e.exit_code
    except Exception as e:
        failure = _storage_failure(e)
        if failure is not None:
            print(f"error: the study storage failed: {failure}; the trials completed so far are "
                  "kept: run the same command again once it is fixed", file=sys.stderr)
            return ExitCode.CONFIG
        log.exception("internal error (a bug in autotune; please report it with this trace)")
        return ExitCode.INTERNAL


def _storage_failure(e: BaseException) -> str | None:
    """The database's own words if ``e`` came from the study storage (locked, disk full):
    Optuna's RDB storage talks to every database through SQLAlchemy, which wraps the driver's
    error (sqlite3, psycopg2) in one of its own."""
    import sqlite3

    from sqlalchemy.exc import SQLAlchemyError

    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, SQLAlchemyError | sqlite3.Error):
            return redaction.scrub(
                str(getattr(seen, "orig", None) or seen).strip().splitlines()[0])
        seen = seen.__cause__ or seen.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())
