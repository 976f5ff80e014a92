"""Which evidence decides, and the rules when there are no confirmation runs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from autotune.evidence import significance as sig
from autotune.experiment.models import Setting
from autotune.report import build_report, export
from autotune.report.environment import environment
from tests.report.builder import EXPERIMENT, Builder, experiment, m

BASE: dict[str, Setting] = {"GOMAXPROCS": None, "GOGC": None}
GOOD: dict[str, Setting] = {"GOMAXPROCS": 2, "GOGC": 400}
OTHER: dict[str, Setting] = {"GOMAXPROCS": 8, "GOGC": 100}
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _study(tmp: Path, baseline: list[float], search: list[tuple[dict[str, Setting], float]],
           text: str = EXPERIMENT) -> Builder:
    b = Builder(experiment(text), tmp)
    for i, v in enumerate(baseline, start=1):
        b.add("reference", "baseline", BASE, m(v), repeat=i)
    for settings, v in search:
        b.add("search", "search", settings, m(v))
    return b


def test_search_only_modest_gain_is_inconclusive(tmp_path: Path) -> None:
    b = _study(tmp_path, [0.0200, 0.0210, 0.0190], [(GOOD, 0.0170), (OTHER, 0.0300)])
    r = build_report(b.exp, b.studies, now=NOW)
    assert r.evidence == "search"
    assert r.verdict == "inconclusive" and r.best_candidate == "#0"
    assert r.recommendation is None
    cmp = r.candidates[0].comparisons[0]
    assert cmp.borrowed_noise and cmp.n_candidate == 1
    assert cmp.low is not None and cmp.low > 0  # significant by the confirmed rule only
    assert "autotune confirm" in r.reason
    assert r.repeats_needed is not None
    assert "no confirmation runs" in r.evidence_note
    assert export(r, "env")[1] == 1


def test_search_only_overwhelming_gain_is_adopted(tmp_path: Path) -> None:
    b = _study(tmp_path, [0.0200, 0.0210, 0.0190], [(GOOD, 0.0040), (OTHER, 0.0300)])
    r = build_report(b.exp, b.studies, now=NOW)
    assert (r.evidence, r.verdict, r.recommendation) == ("search", "adopt", "#0")
    assert f"above {sig.FALLBACK_MARGIN:.0%}" in r.reason and "Not confirmed" in r.reason


def test_search_repeats_of_the_same_settings_are_one_candidate(tmp_path: Path) -> None:
    b = _study(tmp_path, [0.0200, 0.0210, 0.0190],
               [(GOOD, 0.0040), (GOOD, 0.0042), (GOOD, 0.0041)])
    r = build_report(b.exp, b.studies, now=NOW)
    assert [c.id for c in r.candidates] == ["#0"]
    assert len(r.candidates[0].runs) == 3
    assert not r.candidates[0].comparisons[0].borrowed_noise


def test_without_a_baseline_nothing_is_compared(tmp_path: Path) -> None:
    b = _study(tmp_path, [], [(GOOD, 0.004), (OTHER, 0.03)])
    r = build_report(b.exp, b.studies, now=NOW)
    assert (r.evidence, r.verdict, r.best_candidate) == ("none", "inconclusive", "#0")
    assert "baseline was never measured" in r.reason
    assert r.candidates[0].comparisons == ()


def test_with_nothing_measured_the_verdict_is_inconclusive(tmp_path: Path) -> None:
    # Review finding: a night whose every trial failed (Prometheus unreachable) reported KEEP
    # CURRENT, which the report's method defines as an interval that excludes an improvement.
    b = _study(tmp_path, [], [])
    b.add("reference", "baseline", BASE, None, failure="metrics unavailable", repeat=1)
    r = build_report(b.exp, b.studies, now=NOW)
    assert (r.evidence, r.verdict, r.best_candidate) == ("none", "inconclusive", None)
    assert "baseline was never measured" in r.reason


def test_with_every_search_trial_failed_the_verdict_is_inconclusive(tmp_path: Path) -> None:
    # Review finding: a measured baseline and no candidate measured at all said keep current,
    # as if candidates had been measured and found wanting.
    b = _study(tmp_path, [0.02, 0.021, 0.019], [])
    b.add("search", "search", GOOD, None, failure="metrics unavailable")
    r = build_report(b.exp, b.studies, now=NOW)
    assert (r.evidence, r.verdict, r.best_candidate) == ("none", "inconclusive", None)


def test_without_a_feasible_trial_keep_current(tmp_path: Path) -> None:
    b = _study(tmp_path, [0.02, 0.021, 0.019], [])
    b.add("search", "search", GOOD, m(0.004, gc=0.009))  # violates gc_pause_p99 <= 0.005
    r = build_report(b.exp, b.studies, now=NOW)
    assert (r.evidence, r.verdict, r.best_candidate) == ("none", "keep current", None)
    assert r.history[0].feasible is False and r.history[0].best is None
    assert export(r, "env", force=True)[1] == 1


def test_a_constraint_violated_in_one_confirmation_run_blocks_adoption(tmp_path: Path) -> None:
    b = _study(tmp_path, [0.02, 0.021, 0.019], [(GOOD, 0.004)])
    for r_, (base, good, gc) in enumerate([(0.02, 0.004, 0.001), (0.021, 0.0041, 0.009),
                                           (0.019, 0.0039, 0.001)], start=1):
        b.add("reference", "confirm", BASE, m(base), candidate="baseline", round=r_)
        b.add("reference", "confirm", GOOD, m(good, gc=gc), candidate=0, round=r_)
    r = build_report(b.exp, b.studies, now=NOW)
    assert r.evidence == "confirmation"
    assert r.candidates[0].feasible is False
    assert r.verdict == "keep current" and "violated a constraint" in r.reason


def test_confirmation_without_interleaved_baseline_uses_the_repeats(tmp_path: Path) -> None:
    b = _study(tmp_path, [0.02, 0.021, 0.019], [(GOOD, 0.004)])
    # Three rounds: 2 runs against the 3 repeats can never be "better" at 95% (the exact rank
    # test's smallest p-value there is 1 / C(5, 2) = 10%); 3 against 3 can (5%).
    for r_ in (1, 2, 3):
        b.add("reference", "confirm", GOOD, m(0.004 + r_ / 10000), candidate=0, round=r_)
        b.add("reference", "confirm", BASE, None, failure="apply: rollout timed out",
              candidate="baseline", round=r_)
    r = build_report(b.exp, b.studies, now=NOW)
    assert r.evidence == "confirmation"
    assert "3 repeats before the search and 0 runs interleaved" in r.evidence_note
    assert r.baseline is not None and all(run.round is None for run in r.baseline.runs)
    assert r.verdict == "adopt"
    assert [f.reason for f in r.failures] == ["apply: rollout timed out"] * 3


def test_maximize(tmp_path: Path) -> None:
    text = EXPERIMENT.replace("objective: {minimize: p99_latency}",
                              "objective: {maximize: p_idle_fraction}")
    b = Builder(experiment(text), tmp_path)
    for i, v in enumerate((0.30, 0.31, 0.29), start=1):
        b.add("reference", "baseline", BASE, m(0.01, idle=v), repeat=i)
    b.add("search", "search", OTHER, m(0.01, idle=0.2))
    b.add("search", "search", GOOD, m(0.01, idle=0.6))
    for r_, (base, good) in enumerate([(0.30, 0.61), (0.31, 0.60), (0.29, 0.62)], start=1):
        b.add("reference", "confirm", BASE, m(0.01, idle=base), candidate="baseline", round=r_)
        b.add("reference", "confirm", GOOD, m(0.01, idle=good), candidate=1, round=r_)
    r = build_report(b.exp, b.studies, now=NOW)
    assert [(p.number, p.best) for p in r.history] == [(0, 0.2), (1, 0.6)]
    assert (r.verdict, r.recommendation) == ("adopt", "#1")
    assert r.candidates[0].comparisons[0].improvement is not None
    assert r.candidates[0].comparisons[0].improvement > 0.9
    assert r.diagnostics == ("p99_latency", "gc_pause_p99", "request_rate")


def test_a_retried_trial_that_completed_has_no_failure(tmp_path: Path) -> None:
    b = _study(tmp_path, [0.02, 0.021, 0.019], [])
    # Optuna's retry copies the failed attempt's user attrs, "failure" included.
    b.add("search", "search", GOOD, m(0.004), failure="the process running it (pid 7) died")
    r = build_report(b.exp, b.studies, now=NOW)
    assert r.failures == () and r.trials[-1].failure is None


def test_summarize_is_pure(tmp_path: Path) -> None:
    b = _study(tmp_path, [0.02, 0.021, 0.019], [(GOOD, 0.017), (OTHER, 0.03)])
    assert build_report(b.exp, b.studies, now=NOW) == build_report(b.exp, b.studies, now=NOW)


def test_several_objectives(tmp_path: Path) -> None:
    """The Pareto front is the candidate set; the verdict is about the first objective, and a
    candidate significantly worse on another objective is not adopted."""
    text = EXPERIMENT.replace("objective: {minimize: p99_latency}",
                              "objective: [{minimize: p99_latency}, {maximize: p_idle_fraction}]")
    b = Builder(experiment(text), tmp_path)
    for i, v in enumerate((0.020, 0.021, 0.019), start=1):
        b.add("reference", "baseline", BASE, m(v, idle=0.30), repeat=i)
    third: dict[str, Setting] = {"GOMAXPROCS": 4, "GOGC": 50}
    for settings, p99, idle in [(GOOD, 0.004, 0.10), (OTHER, 0.006, 0.45), (third, 0.03, 0.20)]:
        b.add("search", "search", settings, m(p99, idle=idle))
    r = build_report(b.exp, b.studies, now=NOW)
    assert [c.id for c in r.candidates] == ["#0", "#1"]  # #2 is dominated
    assert len(r.candidates[0].comparisons) == 2
    assert (r.verdict, r.recommendation) == ("adopt", "#1")  # #0 loses 2/3 of the idle time


def test_environment_from_a_local_target_record() -> None:
    """The local target records its CPU quota and isolation in describe(), the Go version and
    the effective GOMAXPROCS per trial in the live details."""
    live = {"go_version": "go1.27.3", "gomaxprocs_effective": 2}
    env = environment(
        experiment(), status={"study": "s", "sampler": "gp"},
        attrs={"target": {"kind": "local", "cpus": 1.0, "isolation": "cgroup v2 cpu.max"}},
        records=[{"kind": "baseline", "live": live, "host": "h"},
                 {"kind": "search", "live": {**live, "gomaxprocs_effective": 8}}],
        started=["2027-01-02T00:00:00+00:00", "2027-01-01T00:00:00+00:00"],
        generated="now", version="9.9")
    assert env.cpu_limit == "1.0 CPU (cgroup v2 cpu.max)"
    assert env.go_version == "go1.27.3"
    assert env.gomaxprocs_default == "2 (read from the service in the baseline runs)"
    assert (env.first_trial, env.sampler, env.hosts) == ("2027-01-01T00:00:00+00:00", "gp",
                                                         ("h",))
    bare = environment(experiment(), status={"study": "s"}, attrs={}, records=[], started=[],
                       generated="now", version="9.9")
    assert (bare.go_version, bare.gomaxprocs_default, bare.sampler) == (
        "not recorded", "not recorded", "not recorded")
    assert bare.cpu_limit == "not recorded"
