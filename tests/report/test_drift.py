"""A host that drifts during a run (autotune.evidence.drift): the report says so, in its evidence
note and in the verdict's reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.evidence.drift import drift
from autotune.report import build_report
from autotune.study.confirm import BASELINE, CONFIDENCE_ATTR, look_levels
from tests.report.builder import Builder, m
from tests.report.builder import experiment as builder_experiment

# The live demo of 2026-12-03 (docs/measurements/demo-2026-12-03e.txt), p99 in ms: the baseline
# before the search and interleaved at the end, and candidate #1's confirmation runs.
DEMO_BEFORE = [4.99, 4.96, 5.63]
DEMO_INTERLEAVED = [6.01, 6.10, 6.06]
DEMO_ONE = [5.34, 5.39, 4.97]
DEMO_ONE_SEARCH = 4.976
"""#1's search trial: the value that gives the 4 runs the median the demo reported (5.158)."""


def test_the_live_demos_baseline_drifted_by_a_fifth() -> None:
    found = drift(DEMO_BEFORE, DEMO_INTERLEAVED)
    assert found is not None and found.change == pytest.approx(6.06 / 4.99 - 1)
    assert "+21% in the median" in found.text("p99_latency")
    # A host getting faster is drift too.
    assert drift([6.01, 6.10, 6.06], [4.99, 4.96]) is not None


@pytest.mark.parametrize(("before", "interleaved", "why"), [
    (DEMO_BEFORE, [5.5, 6.1, 6.06], "one interleaved run inside the earlier range"),
    ([5.0, 5.02, 5.04], [5.10, 5.12, 5.14], "outside the range, but 2% apart: noise"),
    ([5.0, 5.1, 5.2], [6.0], "one interleaved run has no range"),
    ([5.0], [6.0, 6.1], "one repeat is no range"),
    ([5.0, 5.1], [6.0, 4.0], "on both sides"),
])
def test_runs_that_overlap_or_differ_by_less_than_the_margin_are_not_drift(
        before: list[float], interleaved: list[float], why: str) -> None:
    assert drift(before, interleaved) is None, why


def _one_candidate(tmp: Path, search: float, runs: list[float], before: list[float],
                   interleaved: list[float]) -> Builder:
    """One candidate (#0): its search trial, then confirmation rounds interleaved with the
    baseline's, after the baseline's repeats before the search."""
    bld = Builder(builder_experiment(), tmp)
    base, one = bld.exp.baseline_settings(), {"GOMAXPROCS": 2, "GOGC": 400}
    for v in before:
        bld.add("reference", "baseline", base, m(v))
    bld.add("search", "search", one, m(search))
    for r, v in enumerate(interleaved, start=1):
        bld.add("reference", "confirm", base, m(v), candidate=BASELINE, round=r)
    for r, v in enumerate(runs, start=1):
        bld.add("reference", "confirm", one, m(v), candidate=0, round=r)
    bld.studies.search.set_user_attr(CONFIDENCE_ATTR, look_levels(3).verdict)
    return bld


def test_the_live_demos_inconclusive_says_the_baseline_drifted(tmp_path: Path) -> None:
    # The demo's #1 (its 3 confirmation runs; its search trial is not evidence) against the
    # baseline's 6: INCONCLUSIVE, the demo's verdict, which said "about 11 repeats per
    # configuration would settle it". The baseline's runs show why, and that repeats are not
    # the cure.
    bld = _one_candidate(tmp_path, DEMO_ONE_SEARCH, DEMO_ONE, DEMO_BEFORE, DEMO_INTERLEAVED)
    report = build_report(bld.exp, bld.studies)
    assert report.verdict == "inconclusive"
    best = report.candidates[0].comparisons[0]
    assert (best.n_candidate, best.n_baseline) == (3, 6)  # the baseline stays pooled
    assert ("Caution: the baseline drifted +21% between its repeats before the search and its runs "
            "interleaved") in report.reason
    assert ("4.99, 4.96, 5.63 in its 3 repeats before the search, 6.01, 6.1, 6.06 in its 3 runs "
            "interleaved") in report.evidence_note


def test_a_host_getting_faster_is_named_next_to_the_gain_it_inflates(tmp_path: Path) -> None:
    # The host got ~20% faster after the baseline's repeats: pooled, the candidate's gain reads
    # +14%; against the baseline measured in the same rounds it is 3%.
    bld = _one_candidate(tmp_path, 7.9, [7.8, 7.7, 7.75], [10.0, 10.1, 10.2], [8.0, 8.1, 8.05])
    report = build_report(bld.exp, bld.studies)
    gain = report.candidates[0].comparisons[0].improvement
    assert gain == pytest.approx(0.144, abs=0.001)
    assert "Caution: the baseline drifted -20% between its repeats" in report.reason


def test_without_drift_nothing_is_said(tmp_path: Path) -> None:
    bld = _one_candidate(tmp_path, 7.9, [7.8, 7.7], [10.0, 10.1, 10.2], [10.05, 9.95])
    report = build_report(bld.exp, bld.studies)
    assert "drifted" not in report.evidence_note and "drifted" not in report.reason
