"""What the commands that run trials share: the experiment loaded, the study runner with its
backends and progress display, the captures, and the study run itself (``run`` and
``nightly``)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from autotune.backends import build
from autotune.clock import Clock, FakeClock, SystemClock
from autotune.errors import ExitCode, ExperimentError, StudyError
from autotune.evidence.members import member_baselines
from autotune.experiment import Experiment, load_experiment
from autotune.platforms.local.promtool import check_queries
from autotune.progress import PlainProgress, RichProgress
from autotune.report import build_report, history
from autotune.study import nightly
from autotune.study import storage as st
from autotune.study.interrupts import StopRequest
from autotune.study.journal import Journal
from autotune.study.loop import Progress, StudyRunner
from autotune.study.pool import Member, PoolRunner, StoppableClock, baseline_runs
from autotune.study.profiles import capture_pair
from autotune.study.samplers import resolve
from autotune.study.status import run_text, status_data


def load(path: str) -> tuple[Experiment, str]:
    """The experiment of ``path`` and its digest."""
    return load_experiment(path)


def check_promql(exp: Experiment, source: str) -> str:
    """Refuse (ExperimentError) an experiment whose PromQL Prometheus cannot parse, before
    anything starts; the note to show when the check could not be made, else ""."""
    parsed = check_queries(exp)
    if isinstance(parsed, str):
        return parsed
    if parsed:
        raise ExperimentError(parsed, source)
    return ""


def runner(exp: Experiment, digest: str, plain: bool,
           context: str | None = None) -> tuple[StudyRunner, Progress]:
    """The study runner with this experiment's backends, and its progress display."""
    results = st.results_dir(exp)
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StudyError(f"cannot create the results directory {results}: "
                         f"{e.strerror or e}") from None
    # A replayed grid waits its recorded durations on a simulated clock: the run takes seconds
    # and its clock tells how long the recording stack would have needed.
    clock: Clock = FakeClock(time.time()) if exp.target.replay is not None else SystemClock()
    progress: Progress = (RichProgress() if sys.stderr.isatty() and not plain
                          else PlainProgress())
    journal = Journal(results / "trials.jsonl")
    members = exp.pool_members()
    if len(members) > 1:  # target.kubernetes.pool: one worker per member, one study
        # The members' waits on the cluster end early when a signal asks the pool to stop.
        stop = StopRequest()
        heeding = StoppableClock(clock, stop)
        pool: list[Member] = []
        try:
            for m in members:
                pool.append(Member(m.member or m.name, m,
                                   build(m, results, heeding, context=context), heeding))
        except BaseException:
            for built in pool:  # what the members built so far holds (Prometheus sessions)
                built.backends.source.close()
            raise
        return PoolRunner(exp, pool, progress=progress, journal=journal,
                          experiment_hash=digest, stop=stop), progress
    backends = build(exp, results, clock, context=context)
    study_runner = StudyRunner(exp, backends, clock=clock, progress=progress,
                               journal=journal, experiment_hash=digest)
    return study_runner, progress


def verdict_text(exp: Experiment, studies: st.Studies) -> str:
    return verdict_line(history.verdict_record(exp, studies))


def capture(exp: Experiment, studies: st.Studies, study_runner: StudyRunner) -> None:
    """``measure.capture``: a trace and a CPU profile of the baseline and the recommendation."""
    if not exp.measure.capture:
        return
    report = build_report(exp, studies)
    chosen = next((c for c in report.candidates if c.id == report.recommendation), None)
    done = capture_pair(exp, studies, study_runner.backends, study_runner.clock,
                        chosen.settings if chosen is not None else None)
    for c in done:
        for f in c.get("files") or ():
            print(f"captured {c['name']} {f['kind']}: {f['open_with']}")
        if c.get("failure"):
            print(f"capture of {c['name']} failed: {c['failure']}", file=sys.stderr)


def study_run(exp: Experiment, digest: str, args: argparse.Namespace, *,
              unattended: bool = False) -> int:
    """Run (or resume) the study: search, confirmation, drift check; print the outcome.
    ``unattended`` (``autotune nightly``): an edited experiment starts a new study."""
    note = check_promql(exp, args.file)
    if note:
        print(f"note: {note}", file=sys.stderr)
    # sampler: gp without torch is refused here, not at the first sampler trial: by then the
    # baseline and the design had been measured for nothing.
    resolve(exp.study.sampler)
    options = nightly.NightOptions(
        budget=args.trials or exp.study.trials, new_study=args.new_study,
        confirm=not args.no_confirm, top=args.top, repeats=args.repeats, extra=args.extra,
        sequential=not args.fixed, accept_edits=unattended)
    progress: Progress | None = None
    started = time.monotonic()
    try:
        study_runner, progress = runner(exp, digest, args.plain, args.context)
        night = nightly.run_night(exp, st.storage_url(exp, args.storage), study_runner, options,
                                  history.verdict_record)
        if night.confirmed and night.cut is None:  # no capture past study.deadline
            capture(exp, night.studies, study_runner)
    finally:
        if isinstance(progress, RichProgress):
            progress.stop()
    print(run_text(night.result, status_data(exp, night.studies), str(st.results_dir(exp))))
    if night.confirmed:
        print(verdict_line(night.verdict) + ("" if night.cut is None else
                                             " (cut short at study.deadline: below)"))
    else:
        print("no confirmation runs: `autotune confirm` re-measures the top candidates")
    for line in night.lines():
        print(line)
    for line in night.result.members:
        print(f"member {line}")
    for line in night.result.not_undone:
        print(f"NOT UNDONE on member {line}: run `autotune cleanup {args.file}`",
              file=sys.stderr)
    if night.result.members:
        metric = next(iter(exp.goals[0].terms))
        for baseline in member_baselines(baseline_runs(night.studies.reference), exp.member):
            print(f"member {baseline.text(metric)}")
    if exp.target.replay is not None:
        print(f"replayed: {study_runner.clock.monotonic() / 60:.1f} min of the recording "
              f"stack's time (warm-ups, windows, recorded overheads) in "
              f"{time.monotonic() - started:.0f} s")
    if night.result.not_undone:
        return ExitCode.CONFIG  # as a run whose own cleanup failed
    return (ExitCode.DRIFT if args.fail_on_drift and night.drift.status == "drifted"
            else ExitCode.OK)


def verdict_line(record: dict[str, Any]) -> str:
    """``verdict: ADOPT GOMAXPROCS=1 GOGC=50 - <reason>``: on ADOPT the settings themselves,
    since the run's "best search trial" line above names the best single search measurement,
    which can be another configuration than the one the pooled confirmation runs chose (the
    walkthrough's stumble)."""
    verdict = str(record["verdict"]).upper()
    candidate = record.get("candidate")
    if record["verdict"] == "adopt" and candidate:
        settings = " ".join(f"{k}={'unset' if v is None else v}"
                            for k, v in (candidate.get("env") or candidate["settings"]).items())
        verdict = f"{verdict} {settings}"
    return f"verdict: {verdict} - {record['reason']}"
