"""Measure everything (benchmarks/exhaustive.py): how often measuring every configuration k
times picks one truly within 10% of the best, on the replay's own draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.clock import FakeClock
from autotune.experiment import load_experiment
from autotune.platforms.replay import Replay, ReplayGrid
from autotune.study.night.early_stop import baseline_noise
from autotune.study.space import to_env
from autotune.study.trial import measure
from benchmarks import exhaustive, window_switch
from benchmarks.whole_run import shorter_window
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
    # The mean of three draws is below the best's 5 ms only when all three are low (1 in 8).
    mean = exhaustive.exhaustive(experiment, 3, 2000, None, statistic="mean").within
    assert mean == pytest.approx(0.875, abs=0.03)


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
    assert "exp.yaml" in out and "100.0%" in out
    assert "scenarios.yaml               not played: chaos.scenarios" in out


# --- benchmarks/window_switch.py: the emulated "lengthen the window when the baseline is noisy"


def _early_grid(tmp: Path) -> None:
    """STEADY with the baseline recorded at 10 and 20 ms over 15 s, 10 and 30 ms over the
    first 10 s (every metric also over 10 s)."""
    values = {**STEADY, "GOMAXPROCS=unset GOGC=unset": (0.010, 0.020)}
    early = {"GOMAXPROCS=unset GOGC=unset": (0.010, 0.030)}
    lines = ["order,config,repeat,state,failure,seconds,overhead_s,p99_latency,error_rate,"
             "p99_latency_first_10s,error_rate_first_10s"]
    for config, repeats in values.items():
        for i, v in enumerate(repeats):
            e = early.get(config, repeats)[i]
            lines.append(f"{len(lines)},{config},{i},COMPLETE,,21.5,2.5,{v},0,{e},0")
    (tmp / "grid.csv").write_text("\n".join(lines) + "\n")


def _runs(path: Path, window: float | None, correct: bool, minutes: float) -> Path:
    runs = [{"grid": "exp.yaml", "seed": s, "within": correct, "correct": correct,
             "simulated_s": minutes * 60} for s in range(40)]
    path.write_text(json.dumps({"options": {} if window is None else {"window": window},
                                "runs": runs}))
    return path


def test_the_range_that_decides_is_the_one_the_run_measured(experiment: Path) -> None:
    # Measured through the trial path a run uses (apply, warm-up, a 10 s window, the read),
    # not through the benchmark's own draws.
    _early_grid(experiment.parent)
    exp, _ = load_experiment(experiment)
    exp = exp.model_copy(update=shorter_window(exp, 10.0))
    assert exp.target.replay is not None
    grid = ReplayGrid.load(exp.target.replay.grid)
    ranges = window_switch.baseline_ranges(experiment, 10.0, range(12))
    for seed in range(12):
        replay = Replay(exp, grid, FakeClock(), seed)
        env = to_env(exp, exp.baseline_settings())
        values = [measure(exp, replay.backends(), env, clock=replay.clock, labels={},
                          record={})["p99_latency"] for _ in range(3)]
        assert ranges[seed] == baseline_noise(values)
    # Over 10 s: all three draws alike (0), or 20 ms apart around a median of 30 or 10 ms.
    assert {round(r or 0, 2) for r in ranges.values()} == {0.0, 0.67, 2.0}


def test_a_switched_run_is_scored_and_costed_as_a_long_one(
    experiment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _early_grid(experiment.parent)
    ranges = window_switch.baseline_ranges(experiment, 10.0, range(40))
    noisy = sum(1 for r in ranges.values() if r is not None and r > 0.3)
    short = _runs(experiment.parent / "short.json", 10.0, False, 4.0)  # every one wrong
    long = _runs(experiment.parent / "long.json", None, True, 6.0)  # every one right
    assert window_switch.main([str(experiment), str(short), str(long), "--short", "10",
                               "--thresholds", "0.3"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("range > 30%"))
    # range > 30%: long | switched | within | correct | probe median (mean) | re-measure ...
    tokens = row.replace("(", " ").replace(")", " ").split()
    assert tokens[4] == str(noisy)
    assert tokens[5:7] == [f"{noisy / 40:.0%}"] * 2  # right exactly when switched
    # probe: a run that stays short measured its 3 baseline windows 5 s longer;
    # re-measure: a switched run measured the baseline 3 more times at 2.5 + 4 + 15 s.
    probe = (noisy * 6.0 + (40 - noisy) * (4.0 + 15 / 60)) / 40
    again = (noisy * (6.0 + 3 * 21.5 / 60) + (40 - noisy) * 4.0) / 40
    assert float(tokens[8]) == pytest.approx(probe, abs=0.051)
    assert float(tokens[10]) == pytest.approx(again, abs=0.051)


def test_runs_played_at_another_window_are_refused(experiment: Path) -> None:
    _early_grid(experiment.parent)
    short = _runs(experiment.parent / "short.json", 10.0, False, 4.0)
    long = _runs(experiment.parent / "long.json", None, True, 6.0)
    with pytest.raises(SystemExit, match="played with --window None, not 10"):
        window_switch.main([str(experiment), str(long), str(short), "--short", "10"])
