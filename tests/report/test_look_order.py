"""A look and the report read the baseline's runs in one order: the bootstrap, seeded alike,
then draws the same resamples, and an early look cannot stop on a call the report would not
make (review finding, 2026-12-06)."""

from __future__ import annotations

from pathlib import Path

from autotune.study.confirmation.candidates import BASELINE
from autotune.study.confirmation.standing import pooled_values
from tests.report.builder import Builder, experiment, m


def test_a_repeat_measured_after_the_interleaved_runs_keeps_the_reports_order(
        tmp_path: Path) -> None:
    b = Builder(experiment(), tmp_path)
    base = b.exp.baseline_settings()
    for v in (0.010, 0.014):
        b.add("reference", "baseline", base, m(v))
    for r, v in ((1, 0.011), (2, 0.016), (3, 0.009)):
        b.add("reference", "confirm", base, m(v), candidate=BASELINE, round=r)
    b.add("reference", "baseline", base, m(0.013))  # a failed repeat queued again, measured later
    # summarize's order: the repeats, then the interleaved runs
    assert pooled_values(b.studies, None) == [0.010, 0.014, 0.013, 0.011, 0.016, 0.009]
