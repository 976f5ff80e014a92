"""The report against the runner-up, and the candidates' table: a wide interval is never called
equivalence, and the mean the candidates are ordered by is shown next to their median."""

from __future__ import annotations

from pathlib import Path

from autotune.report import build_report, document, markdown
from autotune.study.confirmation.attrs import CONFIDENCE_ATTR
from autotune.study.confirmation.candidates import BASELINE
from autotune.study.confirmation.looks import look_levels
from tests.report.builder import Builder, m
from tests.report.builder import experiment as builder_experiment

BASE = [10.0, 10.2, 9.9]


def _two_candidates(tmp: Path, one: list[float], two: list[float]) -> Builder:
    """Two candidates (#0 and #1), each its search trial (the first value) then confirmation
    runs, against a baseline clearly slower than both."""
    bld = Builder(builder_experiment(), tmp)
    base = bld.exp.baseline_settings()
    settings = [{"GOMAXPROCS": 2, "GOGC": 400}, {"GOMAXPROCS": 4, "GOGC": 400}]
    for v in BASE:
        bld.add("reference", "baseline", base, m(v))
    for s, values in zip(settings, (one, two), strict=True):
        bld.add("search", "search", s, m(values[0]))
    for r, v in enumerate(BASE, start=1):
        bld.add("reference", "confirm", base, m(v + 0.05), candidate=BASELINE, round=r)
    for number, (s, values) in enumerate(zip(settings, (one, two), strict=True)):
        for r, v in enumerate(values[1:], start=1):
            bld.add("reference", "confirm", s, m(v), candidate=number, round=r)
    bld.studies.search.set_user_attr(CONFIDENCE_ATTR, look_levels(3).verdict)
    return bld


def test_an_interval_wider_than_the_margin_is_not_called_equivalence(tmp_path: Path) -> None:
    # Both far better than the baseline; between them the interval spans about -10% .. +20%.
    # The report used to say "equivalent within 20%; either is a sound choice".
    bld = _two_candidates(tmp_path, [6.0, 5.0, 7.0, 5.5], [6.5, 7.2, 5.4, 6.8])
    report = build_report(bld.exp, bld.studies)
    assert report.verdict == "adopt" and report.recommendation == "#0"
    assert report.separation is not None
    assert report.separation.startswith(
        "#0 and the runner-up #1 are not told apart by these runs: #0 is between ")
    assert "worse and " in report.separation and "better (" in report.separation
    assert "equivalent" not in report.separation and "sound choice" not in report.separation


def test_an_interval_inside_the_margin_is_equivalence(tmp_path: Path) -> None:
    bld = _two_candidates(tmp_path, [6.0, 6.01, 6.02, 6.0], [6.02, 6.03, 6.01, 6.04])
    report = build_report(bld.exp, bld.studies)
    assert report.separation is not None and report.separation.startswith(
        "#0 and the runner-up #1 are equivalent within 5% (")
    assert report.separation.endswith("either is a sound choice")
    # The rank test's p is of "#0 is better": no question an equivalence asks.
    assert "rank test" not in report.separation


def test_the_table_shows_the_mean_the_candidates_are_ordered_by(tmp_path: Path) -> None:
    # #1 has the lower median (5.0 against 5.1) and the higher mean (one slow run): after a
    # confirmation the report orders and chooses by the mean, so #0 comes first, and the table
    # shows both numbers rather than a median order that looks wrong.
    bld = _two_candidates(tmp_path, [5.1, 5.1, 5.1, 5.1, 5.1], [5.0, 5.0, 5.0, 5.0, 7.0])
    report = build_report(bld.exp, bld.studies)
    assert [c.id for c in report.candidates] == ["#0", "#1"]
    one, two = (c.objectives[0] for c in report.candidates)
    assert (one.median, one.mean) == (5.1, 5.1)
    assert (two.median, two.mean) == (5.0, 5.5)
    blocks = document.build(report, {})
    table = next(b for b in blocks if isinstance(b, document.Table)
                 and "mean p99_latency" in b.header)
    columns = (table.header.index("search"), table.header.index("median p99_latency"),
               table.header.index("mean p99_latency"))
    # "search": the search run that chose each candidate, shown but not its evidence.
    assert [(row[0], *(row[i] for i in columns)) for row in table.rows] == [
        ("baseline", "", "10.03 s", "10.06 s"), ("#0", "5.1 s", "5.1 s", "5.1 s"),
        ("#1", "5 s", "5 s", "5.5 s")]
    assert "the rows are ordered by the mean" in markdown.render(blocks)


def test_a_runner_up_with_the_better_median_beyond_the_noise_is_named(tmp_path: Path) -> None:
    # #0 is chosen by the mean (5.45 against 5.51: one slow run of #1), yet #1 is lower in
    # every other run: the report must not call the two "not told apart".
    bld = _two_candidates(tmp_path, [5.4, 5.45, 5.5, 5.45, 5.4, 5.5, 5.45, 5.45],
                          [5.0, 5.02, 5.01, 5.0, 5.01, 5.02, 5.0, 9.0])
    report = build_report(bld.exp, bld.studies)
    assert report.recommendation == "#0"
    assert report.separation is not None and report.separation.startswith(
        "the runner-up #1 has the better median beyond the noise: #0 is between ")
    assert report.separation.endswith("#0 was chosen by the mean of its runs")
    # Its p (of "#0 is better", near 1 here) would read as evidence against the sentence.
    assert "rank test" not in report.separation
