"""benchmarks/grid_local.py --warmups: an A/B of the warm-up recorded in one shuffled order, split
into one replayable grid per arm, and compared configuration by configuration."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks.grid_local import FIELDS, WARMUP_FIELD, compare_warmups, split

# Three configurations, two repeats, two arms: the 2 s arm reads 10% lower everywhere.
ROWS = [{"order": i, "config": config, "repeat": repeat, "state": "COMPLETE", "failure": "",
         "seconds": 18.0, "overhead_s": 1.0, "foreign_cores_max": 0.0, "attempts": 1,
         WARMUP_FIELD: warmup,
         "p99_latency": base * (0.9 if warmup == 2.0 else 1.0) * (1 + repeat / 100)}
        for i, (config, base, repeat, warmup) in enumerate(
            (c, b, r, w) for c, b in (("a", 0.005), ("b", 0.006), ("c", 0.009))
            for r in range(2) for w in (2.0, 4.0))]


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    path = tmp_path / "grid.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*FIELDS, WARMUP_FIELD, "p99_latency"])
        writer.writeheader()
        writer.writerows(ROWS)
    return path


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
