"""benchmarks/grid_local.py --warmups: an A/B of the warm-up recorded in one shuffled order, split
into one replayable grid per arm, and compared configuration by configuration."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchmarks.grid_local import FIELDS, WARMUP_FIELD, compare_warmups, split, summarize

# Three configurations, two repeats, two arms: the 2 s arm reads 10% lower everywhere.
ROWS: list[dict[str, Any]] = [
    {"order": i, "config": config, "repeat": repeat, "state": "COMPLETE", "failure": "",
     "seconds": 18.0, "overhead_s": 1.0, "foreign_cores_max": 0.0, "attempts": 1,
     WARMUP_FIELD: warmup,
     "p99_latency": base * (0.9 if warmup == 2.0 else 1.0) * (1 + repeat / 100)}
    for i, (config, base, repeat, warmup) in enumerate(
        (c, b, r, w) for c, b in (("a", 0.005), ("b", 0.006), ("c", 0.009))
        for r in range(2) for w in (2.0, 4.0))]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*FIELDS, WARMUP_FIELD, "p99_latency"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def medians(tmp_path: Path, per_config: dict[str, tuple[float, float]]) -> Path:
    """Two equal repeats per configuration and arm, reading (2 s arm, 4 s arm) seconds."""
    return write(tmp_path / "grid.csv", [
        {**ROWS[0], "config": config, "repeat": r, WARMUP_FIELD: warmup, "p99_latency": value}
        for config, pair in per_config.items() for r in range(2)
        for warmup, value in zip((2.0, 4.0), pair, strict=True)])


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    return write(tmp_path / "grid.csv", ROWS)


def test_each_arm_becomes_a_grid_of_its_own(recorded: Path) -> None:
    part = split(recorded, 2.0)
    assert part.name == "grid-w2.csv"
    rows = list(csv.DictReader(part.open()))
    assert len(rows) == 6 and {float(r[WARMUP_FIELD]) for r in rows} == {2.0}
    assert sorted(r["config"] for r in rows) == ["a", "a", "b", "b", "c", "c"]


def test_the_comparison_names_the_ratio_and_the_ranking(
        recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compare_warmups(recorded, "p99_latency")
    out = capsys.readouterr().out
    assert "geometric mean of the per-configuration median ratios 0.900" in out
    assert "Spearman rank agreement of the medians: 1.000" in out


def test_a_configuration_with_a_median_of_zero_is_left_out_of_the_ratio_and_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A zero read at 2 s would be log(0); the other two configurations still give 0.900.
    compare_warmups(medians(tmp_path, {"a": (0.0, 0.005), "b": (0.0054, 0.006),
                                       "c": (0.0081, 0.009)}), "p99_latency")
    out = capsys.readouterr().out
    assert "2 configurations; 2s / 4s, geometric mean of the per-configuration median " \
           "ratios 0.900" in out
    assert "left out of the ratio: 1 configuration(s) with a median <= 0 at a warm-up" in out
    assert out.splitlines()[1].endswith("left out (median <= 0)")  # a's row, in place of a ratio


def test_one_repeat_leaves_the_spread_not_measured(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compare_warmups(write(tmp_path / "grid.csv", [r for r in ROWS if r["repeat"] == 0]),
                    "p99_latency")
    out = capsys.readouterr().out
    assert ("median repeat spread (max/min) per configuration: 2s not measured (needs >= 2 "
            "repeats), 4s not measured (needs >= 2 repeats)") in out
    assert "geometric mean of the per-configuration median ratios 0.900" in out


def test_spearman_gives_tied_medians_their_average_rank(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 2 s ranks 1, 2.5, 2.5, 4 (b and c tie); 4 s ranks 1, 3, 2, 4: Pearson's r of the ranks is
    # 4.5 / sqrt(4.5 * 5) = 0.949. Breaking the tie by order instead gives 1.000 or 0.800.
    compare_warmups(medians(tmp_path, {"a": (0.001, 0.001), "b": (0.002, 0.003),
                                       "c": (0.002, 0.002), "d": (0.003, 0.004)}), "p99_latency")
    assert "Spearman rank agreement of the medians: 0.949" in capsys.readouterr().out


def test_spearman_of_one_configuration_is_not_defined(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compare_warmups(medians(tmp_path, {"a": (0.0045, 0.005)}), "p99_latency")
    out = capsys.readouterr().out
    assert "Spearman rank agreement of the medians: not defined (fewer than 2 " \
           "configurations)" in out
    assert "no bootstrap interval from 1 configuration" in out


def test_spearman_is_not_defined_when_one_arm_ties_everywhere(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compare_warmups(medians(tmp_path, {"a": (0.005, 0.004), "b": (0.005, 0.006),
                                       "c": (0.005, 0.009)}), "p99_latency")
    assert "Spearman rank agreement of the medians: not defined (every configuration ties at " \
           "one warm-up)" in capsys.readouterr().out


def test_summarize_keeps_the_two_arms_apart(
        recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summarize(recorded, "p99_latency")
    out = capsys.readouterr().out
    arms = out.split("warm-up 4s only:")
    assert len(arms) == 2 and arms[0].startswith("warm-up 2s only:")
    for arm, text in zip((2.0, 4.0), arms, strict=True):
        a = [r["p99_latency"] for r in ROWS if r["config"] == "a" and r[WARMUP_FIELD] == arm]
        row = next(line for line in text.splitlines() if line.startswith("a "))
        assert row.split()[1] == f"{statistics.median(a) * 1000:.2f}"
        assert "6 trials, 0 failed" in text
    # Pooled, the 10% between the arms would read as a 1.12x spread between repeats.
    assert out.count("median 1.01x") == 2 and "1.12x" not in out
