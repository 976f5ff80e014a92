"""argv -> a command -> exit code (``autotune.errors.ExitCode``). Only the parser and the
dispatch live here; each command is a module of ``autotune.commands`` with ``main(args)``.

SIGINT, SIGTERM and SIGHUP (unless ignored) are handled for the whole command, from the first
line of ``main()``: as PID 1 of a container (the CronJob runs ``autotune nightly`` with no shell
in between) a process receives only the signals it has a handler for (pid_namespaces(7)), so a
moment without one would drop the kubelet's SIGTERM and leave it to the SIGKILL after the grace
period to end a run that changed the target. The command's module (and with it pydantic, Optuna,
the Kubernetes client) is imported only after that, by name (``COMMANDS``): at the top of this
module those imports would run before ``main()``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import sys
from collections.abc import Sequence

from autotune import __version__, redaction
from autotune.commands import EXPORT_FORMATS, PROMOTE_DIR_VAR, PROMOTE_FORMAT_VAR
from autotune.errors import ExitCode, exit_codes_text
from autotune.study.interrupts import Interrupted, signals_as_exceptions

CHANGES_THINGS = frozenset({"run", "confirm", "cleanup", "nightly"})
"""Commands that inject stress or configure a target: an interrupt of them undoes something."""

DESCRIPTION = """\
Find the Go runtime settings (GOMAXPROCS, GOGC, GOMEMLIMIT, a forced-GC interval) that keep a
service's latency low under CPU stress: each trial applies a candidate, injects stress, measures
from Prometheus and undoes both; the best candidates are re-measured against the current
settings before a verdict (adopt / keep / inconclusive). Studies persist and resume.
"""

EPILOG = """\
examples:
  autotune init --command './server -addr 127.0.0.1:{port}'   # a first experiment for yours
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


def _at_least(minimum: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}")
    return value


def _non_negative(text: str) -> int:
    return _at_least(0, text)


def _positive(text: str) -> int:
    return _at_least(1, text)


def _positive_number(text: str) -> float:
    """A finite number > 0 (``--cpus``, ``--ready-timeout``): nan and inf parse as floats."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, not {text!r}")
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

    p = add("run", "run (or resume) the study of an experiment; a kubernetes target with "
                   "target.kubernetes.pool measures trials on every member side by side (one "
                   "study, the baseline on each member, the confirmation on the target); "
                   "chaos.scenarios measures every candidate under several storms (quiet, CPU, "
                   "memory, held Ps), each in its own window, and tunes for the worst or a "
                   "weighted mix (docs/scenarios.md)")
    _run_options(p)

    p = add("nightly", "one night in one process (what the CronJob runs): `run` (but an "
                       "edited experiment starts a new, warm-started study instead of being "
                       "refused: nobody is there to pass --new-study); only when it exits 0, "
                       "on ADOPT the export into the promote directory (not adopted "
                       "tonight is no error); then `report` and `history`. Exits with the run's "
                       "code (0, or 4 with --fail-on-drift), else with the first failing step's; "
                       "SIGINT/SIGTERM at any step stops the night (130), the running trial "
                       "undone first")
    _run_options(p)
    p.add_argument("--promote-dir", metavar="DIR",
                   help=f"on ADOPT write the export here, as `export --write-to DIR` (default "
                        f"${PROMOTE_DIR_VAR}; neither: promote nothing)")
    p.add_argument("--promote-format", choices=EXPORT_FORMATS,
                   help=f"the export's format (default ${PROMOTE_FORMAT_VAR}, else kustomize, "
                        "which patches a Deployment: a kubernetes target only)")

    p = add("init", "write a first experiment for your service: reads its /metrics (starting "
                    "--command once on 127.0.0.1, or from --url) and its CPU limit, picks the "
                    "latency histogram and the Go runtime series it exports, proposes a "
                    "Go-aware space; the file validates")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--command", dest="service_command", metavar="CMD",
                      help="how to start your service locally, with {port} where it takes its "
                           "port, e.g. './server -addr 127.0.0.1:{port}'")
    what.add_argument("--deployment", metavar="NAMESPACE/NAME",
                      help="a Deployment on a cluster (reads its container's CPU limit)")
    p.add_argument("--url", help="read /metrics from this running instance instead (e.g. "
                                 "http://127.0.0.1:8080, or a kubectl port-forward)")
    p.add_argument("--container", help="--deployment: the container (default: the only one)")
    p.add_argument("--prometheus", metavar="URL",
                   help="--deployment: the Prometheus that scrapes its pods (required)")
    p.add_argument("--cpus", type=_positive_number, default=1.0,
                   help="--command: the CPU limit to tune for, in CPUs (default 1)")
    p.add_argument("--path", default="/", help="--command: the path the load generator "
                                                "requests (default /)")
    p.add_argument("--health", default="/healthz",
                   help="--command: the readiness path (default /healthz; /metrics when it "
                        "does not answer 200)")
    p.add_argument("--metrics-path", default="/metrics",
                   help="where the service serves its Prometheus metrics (default /metrics)")
    p.add_argument("--forcegc-env", metavar="VAR",
                   help="the service's variable for a forced runtime.GC() interval in ms "
                        "(0 = off), if it has one: tuned too")
    p.add_argument("--cwd", help="--command: its working directory")
    p.add_argument("--ready-timeout", type=_positive_number, default=30.0,
                   help="--command: seconds to wait for its /metrics (default 30)")
    p.add_argument("--name", help="the experiment's name (default: from the command or "
                                  "Deployment)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where to write it (default <name>.yaml)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--kubeconfig", help="kubeconfig file")

    p = add("validate", "check an experiment file; start nothing (exit 0 valid, 1 invalid or a "
                        "problem --cluster / --live found, 2 an option the target has no use for)")
    p.add_argument("file", help="experiment YAML file")
    p.add_argument("--cluster", action="store_true",
                   help="also check the cluster: RBAC for every verb (pods/log with "
                        "measure.schedtrace, pods/proxy with measure.capture, create/delete "
                        "pods with target.kubernetes.load), Deployment and container, the "
                        "StressChaos CRD, server-side dry-runs of the patch and the chaos")
    p.add_argument("--live", action="store_true",
                   help="also run every metric query against Prometheus over a recent window")
    p.add_argument("--context", help="kubeconfig context")

    p = add("schema", "print the JSON Schema of experiment files, or a Markdown reference of "
                      "every field")
    p.add_argument("--format", choices=("json", "markdown"), default="json",
                   help="json: the JSON Schema (default); markdown: the field reference "
                        "(docs/reference.md)")

    p = add("status", "show the trials so far and the best feasible one")
    p.add_argument("file", help="experiment YAML file")
    p.add_argument("--storage")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("confirm", "re-measure the top candidates and the baseline, interleaved and shuffled, "
                       "in rounds until the verdict is decisive (--repeats at most), and give "
                       "the verdict (adopt / keep current / inconclusive)")
    p.add_argument("file", help="experiment YAML file")
    p.add_argument("--storage")
    p.add_argument("--plain", action="store_true", help="log lines instead of a live display")
    p.add_argument("--context", help="kubeconfig context (kubernetes targets)")
    _confirm_options(p)

    p = add("report", "write results/<name>/report.{md,html,json} and the plots")
    p.add_argument("file", help="experiment YAML file")
    p.add_argument("--storage")
    p.add_argument("--out", help="directory (default results/<name>/); refused if it holds "
                                 "files of the report's names that no report wrote")

    p = add("export", "print the recommendation ready to apply")
    p.add_argument("file", help="experiment YAML file")
    p.add_argument("--storage")
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS,
                   help="kustomize: a strategic-merge patch of the Deployment's container "
                        "env (kubernetes targets); env: NAME=value lines; json: the settings "
                        "and their evidence; helm-values: env entries to copy into a "
                        "chart's values (Helm replaces lists: layered with -f, it would "
                        "replace the chart's whole env)")
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
    p.add_argument("file", help="experiment YAML file")
    p.add_argument("--storage")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--out", help="directory for nights.{md,json,png} (default results/<name>/); "
                                 "refused if it holds files of those names autotune did not write")

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
    # Together the drift check would never run, so the exit code it gates could never fire: a
    # CronJob with both would stay green through any drift.
    skip_or_alert = p.add_mutually_exclusive_group()
    skip_or_alert.add_argument(
        "--no-confirm", action="store_true",
        help="skip the re-measurements: the confirmation of the top candidates at the end and "
             "the drift check")
    skip_or_alert.add_argument(
        "--fail-on-drift", action="store_true",
        help=f"exit {int(ExitCode.DRIFT)} when the drift check finds production significantly "
             "better than the last adopted recommendation (for alerting)")
    _confirm_options(p)


def _confirm_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=_positive, default=3,
                   help="candidates to confirm (default 3; each is judged at 1 - 5%%/k, so from "
                        "5 on, 3 runs against 6 cannot pass the exact rank test and only the "
                        "extension round (see --repeats; when no early look can decide) can "
                        "adopt; from 65 on not even that, and a warning says the confirmation "
                        "cannot adopt)")
    p.add_argument("--repeats", type=_positive, default=3,
                   help="confirmation rounds, at most (and perhaps one extension round, below): "
                        "the first measures every candidate and "
                        "the baseline in a shuffled order, each later one the best and what is "
                        "not yet decided (the baseline, the runner-up). A candidate is judged "
                        "on its confirmation runs alone (the search run that chose it flatters "
                        "it) and ADOPT needs 3 of them, so fewer rounds can only KEEP or say "
                        "INCONCLUSIVE (a warning says so); with 5 or more a look may stop early "
                        "(an early look needs 4 runs of the leader; the early looks that can "
                        "decide share 1%% of the 5%% error rate, the verdict gets 4%%; with the "
                        "default 3 none can when tonight's candidates have no earlier "
                        "confirmation runs, and the verdict gets all 5%%). The report adopts "
                        "if any candidate is better, so each of the k candidates with "
                        "confirmation runs (every night's) is judged at 1 - 5%%/k (98.33%% each "
                        "for 3; 1 - 4%%/k after early looks; Bonferroni), and 'better' needs an "
                        "exact rank test at that level: at 3 runs against 6, every candidate "
                        "run better than every baseline run. Once the best (by the mean of its "
                        "runs) is better than the baseline, the runner-up is not measured again. "
                        "When no early look could decide and the best is left undecided but "
                        "one or two more runs could still make it better, one more round "
                        "measures it and the baseline that often, and it is "
                        "judged at a stricter level so that both looks together keep its share "
                        "(3 against 6 at 1.67%%: one crossing short, a candidate run slower "
                        "than one baseline run, one run each and that crossing allowed at 4 "
                        "against 7, p <= 0.61%%; two or three short, two runs each and 3 "
                        "crossings allowed at 5 against 8, p <= 0.54%%). When the report would "
                        "adopt and another candidate may be better (also called better, runs "
                        "overlapping and means within 10%%; or dropped by the looks after a "
                        "slow run, with a better mean counting its search run, and more runs "
                        "could still make it better), the two are measured once more, at most "
                        "twice, before the choice (default 3; "
                        "with --fixed exactly that many rounds of every candidate)")
    p.add_argument("--fixed", action="store_true",
                   help="fixed confirmation: --repeats full rounds, each of k candidates "
                        "judged at 1 - 5%%/k, then --extra adaptive runs (the procedure before "
                        "sequential confirmation)")
    p.add_argument("--extra", type=_non_negative, default=6, metavar="N",
                   help="up to N more runs while a comparison is not separated: the drift "
                        "check's, and with --fixed the confirmation's adaptive rounds (default "
                        "6; 0 = none)")


COMMANDS: dict[str, str] = {
    name: f"autotune.commands.{name}"
    for name in ("init", "run", "nightly", "validate", "schema", "status", "cleanup", "doctor",
                 "confirm", "report", "export", "history")
}
"""Each command's module (its ``main(args) -> int``), imported when the command is run."""


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
            outcome = importlib.import_module("autotune.commands.outcome")
            return ExitCode(outcome.guarded(
                lambda: importlib.import_module(COMMANDS[args.command]).main(args)))
        except (Interrupted, KeyboardInterrupt) as e:
            name = getattr(e, "signame", "SIGINT")
            if command in CHANGES_THINGS:
                print(f"interrupted ({name}); stress removed and target restored; "
                      "run the same command again to resume", file=sys.stderr)
            else:
                print(f"interrupted ({name})", file=sys.stderr)
            return ExitCode.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
