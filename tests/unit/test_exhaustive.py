"""Measure everything (benchmarks/exhaustive.py): how often measuring every configuration k
times picks one truly within 10% of the best, on the replay's own draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import exhaustive, window_switch
from tests.unit.test_replay import REPLAY, _grid

STEADY = {"GOMAXPROCS=unset GOGC=unset": (0.010, 0.010),
          "GOMAXPROCS=1 GOGC=400": (0.005, 0.005),
          "GOMAXPROCS=1 GOGC=100": (0.015, 0.015),
          "GOMAXPROCS=2 GOGC=100": (0.015, 0.015),
          "GOMAXPROCS=2 GOGC=400": (0.015, 0.015)}


@pytest.fixture
def experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the experiment names its grid relative to the directory
    (tmp_path / "exp.yaml").write_text(REPLAY)
    return tmp_path / "exp.yaml"


def test_a_grid_without_noise_is_always_picked_right(experiment: Path) -> None:
    _grid(experiment.parent, STEADY)
    assert exhaustive.exhaustive(experiment, 1, 200, None).within == 1.0


def test_a_configuration_recorded_low_and_high_is_picked_as_often_as_its_draws_say(
    experiment: Path,
) -> None:
    # Recorded at 2 and 20 ms: true value 11 ms (the median of two is their mean), more than
    # 10% worse than the best (5 ms). One draw is its low value half the time, and then it is
    # picked; the median of two draws is low only when both are (1 in 4); of three, when two of
    # three are (1 in 2). The share within 10% is the complement.
    _grid(experiment.parent, {**STEADY, "GOMAXPROCS=1 GOGC=100": (0.002, 0.020)})
    shares = {k: exhaustive.exhaustive(experiment, k, 2000, None).within for k in (1, 2, 3)}
    assert shares[1] == pytest.approx(0.50, abs=0.04)
    assert shares[2] == pytest.approx(0.75, abs=0.04)
    assert shares[3] == pytest.approx(0.50, abs=0.04)


def test_the_cost_of_measuring_everything_is_stated(experiment: Path) -> None:
    _grid(experiment.parent, STEADY, overhead="2.5")
    row = exhaustive.exhaustive(experiment, 3, 10, None)
    # 4 configurations + the baseline, 3 times each, at 2.5 + 4 + 15 s.
    assert row.trials == 15
    assert row.minutes == pytest.approx(15 * 21.5 / 60, abs=0.05)


def test_a_grid_with_scenarios_is_listed_as_not_played(
    experiment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _grid(experiment.parent, STEADY)
    scenarios = experiment.parent / "scenarios.yaml"
    scenarios.write_text(REPLAY.replace(
        "chaos: {stress: {workers: 1, load: 50}}",
        "chaos: {scenarios: [{name: a, stress: {workers: 1, load: 50}}, "
        "{name: b, stress: {workers: 2, load: 50}}]}"))
    assert exhaustive.main([str(experiment), str(scenarios), "--seeds", "5", "--draws", "1"]) == 0
    out = capsys.readouterr().out
    assert "exp.yaml" in out and "100%" in out
    assert "scenarios.yaml               not played: chaos.scenarios" in out


# --- benchmarks/window_switch.py: the emulated "lengthen the window when the baseline is noisy"


def _runs(path: Path, grid: str, correct: bool, minutes: float) -> Path:
    runs = [{"grid": grid, "seed": s, "within": correct, "correct": correct,
             "simulated_s": minutes * 60} for s in range(40)]
    path.write_text(json.dumps({"runs": runs}))
    return path


def test_a_run_switches_to_the_long_window_exactly_when_its_baseline_draws_disagree(
    experiment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The baseline recorded at 10 and 20 ms: three draws agree (range 0) a quarter of the time,
    # otherwise their range is 10 / median, 50% or 100%. Short runs are all wrong, long all right.
    _grid(experiment.parent, {**STEADY, "GOMAXPROCS=unset GOGC=unset": (0.010, 0.020)})
    ranges = window_switch.baseline_ranges(experiment, 15.0, list(range(40)))
    assert {round(r or 0, 2) for r in ranges.values()} <= {0.0, 0.5, 1.0}
    noisy = sum(1 for r in ranges.values() if r and r > 0.3)
    assert 20 <= noisy <= 40
    short = _runs(experiment.parent / "short.json", "exp.yaml", False, 4.0)
    long = _runs(experiment.parent / "long.json", "exp.yaml", True, 6.0)
    assert window_switch.main([str(experiment), str(short), str(long), "--short", "15",
                               "--thresholds", "0.3"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("range > 30%"))
    tokens = row.split()  # range > 30%: long | runs switched | min | within | correct
    assert tokens[4] == str(noisy)
    assert tokens[6:] == [f"{noisy / 40:.0%}"] * 2  # right exactly when switched
