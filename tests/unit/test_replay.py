"""The replay platform answers only with what was recorded; the strategy benchmark counts right."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from autotune.clock import FakeClock
from autotune.errors import TargetError
from autotune.experiment import Experiment, parse_experiment
from autotune.live import Window
from autotune.metrics.base import Unavailable
from autotune.platforms.replay import Replay, ReplayGrid
from autotune.study.space import settings_key
from autotune.study.trial import TrialFailed, measure
from benchmarks import replay as bench

EXPERIMENT = """
name: replay-test
target: {local: {workload: demo}}
parameters:
  - {name: GOMAXPROCS, type: int, values: [1, 2, 4]}
  - {name: GOGC, type: int, values: [100, 400]}
baseline: {repeats: 1, params: {GOMAXPROCS: null, GOGC: null}}
chaos: {stress: {workers: 2, load: 25}}
measure: {warmup: 4s, window: 15s}
metrics: {p99_latency: p99, error_rate: errors}
objective: {minimize: p99_latency}
constraints: ['error_rate <= 0.01']
"""

HEADER = "order,config,repeat,state,failure,seconds,p99_latency,error_rate\n"


def _write(tmp: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    """rows: (config, state, p99_latency, error_rate)."""
    path = tmp / "grid.csv"
    path.write_text(HEADER + "".join(
        f"{i},{config},0,{state},{'boom' if state != 'COMPLETE' else ''},25,{p99},{err}\n"
        for i, (config, state, p99, err) in enumerate(rows)))
    return path


@pytest.fixture
def exp() -> Experiment:
    return parse_experiment(EXPERIMENT)


def _env(g: int | None, gogc: int | None) -> dict[str, str | None]:
    return {"GOMAXPROCS": None if g is None else str(g),
            "GOGC": None if gogc is None else str(gogc)}


def _read(replay: Replay, env: dict[str, str | None]) -> dict[str, float | Unavailable]:
    backends = replay.backends()
    live = backends.target.apply(env)
    replay.clock.sleep(15)
    return backends.source.read({"p99_latency": "p99", "error_rate": "errors"},
                                Window(live.since, replay.clock.now()), live)


def test_every_reading_is_one_recorded_repeat(tmp_path: Path, exp: Experiment) -> None:
    grid = ReplayGrid.load(_write(tmp_path, [
        ("GOMAXPROCS=1 GOGC=100", "COMPLETE", "0.010", "0.0"),
        ("GOMAXPROCS=1 GOGC=100", "COMPLETE", "0.030", "0.002"),
        ("GOMAXPROCS=1 GOGC=100", "FAIL", "", ""),
        ("GOMAXPROCS=2 GOGC=100", "COMPLETE", "0.020", ""),
    ]))
    assert grid.skipped == 1
    replay = Replay(exp, grid, FakeClock(), seed=7)
    drawn = [_read(replay, _env(1, 100)) for _ in range(40)]
    pairs = {(r["p99_latency"], r["error_rate"]) for r in drawn}
    # Both metrics come from the same row, and both rows get drawn.
    assert pairs == {(0.010, 0.0), (0.030, 0.002)}
    again = Replay(exp, grid, FakeClock(), seed=7)
    assert [_read(again, _env(1, 100)) for _ in range(40)] == drawn

    partial = _read(replay, _env(2, 100))
    assert partial["p99_latency"] == 0.020
    missing = partial["error_rate"]
    assert isinstance(missing, Unavailable) and "not recorded in this repeat" in missing.reason


def test_a_configuration_outside_the_grid_fails_the_trial_with_the_reason(
    tmp_path: Path, exp: Experiment
) -> None:
    grid = ReplayGrid.load(_write(tmp_path, [("GOMAXPROCS=1 GOGC=100", "COMPLETE", "0.01", "0")]))
    replay = Replay(exp, grid, FakeClock(), seed=1)
    readings = _read(replay, _env(4, 400))
    assert all(isinstance(r, Unavailable) and "GOMAXPROCS=4 GOGC=400 was not recorded" in r.reason
               for r in readings.values())
    record: dict[str, object] = {}
    with pytest.raises(TrialFailed, match="p99_latency unavailable: configuration GOMAXPROCS=4 "
                                          "GOGC=400 was not recorded"):
        measure(exp, replay.backends(), _env(4, 400), clock=replay.clock, labels={},
                record=record)
    assert record["metrics"] == {}


def test_a_grid_of_other_parameters_is_refused(tmp_path: Path, exp: Experiment) -> None:
    grid = ReplayGrid.load(_write(tmp_path, [("GOMAXPROCS=1 GOMEMLIMIT=1GiB", "COMPLETE",
                                              "0.01", "0")]))
    with pytest.raises(TargetError, match="the experiment's parameters are"):
        Replay(exp, grid, FakeClock())


# Noiseless (one value per configuration), so the recommendation is the best configuration
# measured so far and "trials to within 10%" is where the first of the two good ones appears.
TRUE = {(1, 100): 0.050, (1, 400): 0.030, (2, 100): 0.040, (2, 400): 0.005,
        (4, 100): 0.060, (4, 400): 0.0054}
GOOD = {"GOMAXPROCS=2 GOGC=400", "GOMAXPROCS=4 GOGC=400"}


def test_short_benchmark_run_counts_trials_to_within_10_percent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [(f"GOMAXPROCS={g} GOGC={gogc}", "COMPLETE", str(v), "0")
            for (g, gogc), v in TRUE.items() for _ in range(2)]
    rows.append(("GOMAXPROCS=unset GOGC=unset", "COMPLETE", "0.08", "0"))
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    out = tmp_path / "replay.json"
    assert bench.main(["--grid", str(_write(tmp_path, rows)), "--experiment",
                       str(tmp_path / "exp.yaml"), "--seeds", "2", "--trials", "3",
                       "--strategies", "random", "--jobs", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["space"]["best"] == {"label": "GOMAXPROCS=2 GOGC=400", "value": 0.005}
    assert set(result["space"]["within"]) == GOOD
    runs = result["strategies"]["random"]["runs"]
    assert [r["seed"] for r in runs] == [0, 1]
    truth = {f"GOMAXPROCS={g} GOGC={gogc}": v for (g, gogc), v in TRUE.items()}
    for r in runs:
        measured = r["configurations"]
        assert len(measured) == 3 and r["recommended"] == [
            min(truth[c] for c in measured[:k]) for k in range(1, 4)]
        first_good = next((k for k, c in enumerate(measured, 1) if c in GOOD), 4)
        assert r["trials_to_within"] == first_good
        assert r["repeats"] == len(measured) - len(set(measured))
    hits = [r["trials_to_within"] for r in runs]
    summary = result["strategies"]["random"]["summary"]
    assert summary["trials_to_within"] == {"median": statistics.median(hits), "p90": max(hits)}
    assert summary["never"] == sum(1 for h in hits if h == 4)
    assert summary["runs"] == 2 and summary["failed_trials"] == 0 and summary["errors"] == []
    assert "random" in capsys.readouterr().out


def test_the_recommendation_is_the_best_median_not_the_luckiest_draw(exp: Experiment) -> None:
    # B is the true best (6); A (true 10) is measured lucky first, so the study recommends A
    # until a second measurement of A brings its median to 10.
    a, b = {"GOMAXPROCS": 1, "GOGC": 100}, {"GOMAXPROCS": 2, "GOGC": 400}
    truth = bench.Truth(sign=1.0, values={settings_key(a): 10.0, settings_key(b): 6.0},
                        best_key=settings_key(b), best=6.0, missing=0)
    summaries = [
        {"number": n, "state": "COMPLETE", "kind": "search", "settings": s, "values": [v],
         "constraints": {}}
        for n, (s, v) in enumerate([(a, 5.0), (b, 7.0), (a, 15.0)])
    ]
    run = bench.trajectory(exp, truth, summaries, trials=3)
    assert run.recommended == [10.0, 10.0, 6.0]
    assert run.trials_to_within == 3 and run.repeats == 1
    assert bench.trajectory(exp, truth, summaries[:2], trials=2).trials_to_within == 3


def test_subset_restricts_the_space(exp: Experiment) -> None:
    sub = bench.restrict(exp, {"GOGC": ["400"], "GOMAXPROCS": ["1", "4"]})
    assert [tuple(p.values or ()) for p in sub.parameters] == [(1, 4), (400,)]
    assert len(bench.space(sub)) == 2


# --- target.replay: a whole run on a recorded grid, on a simulated clock ----------------------

REPLAY = """
name: replay-run
target: {replay: {grid: grid.csv, cpus: 1}}
parameters:
  - {name: GOMAXPROCS, type: int, values: [1, 2]}
  - {name: GOGC, type: int, values: [100, 400]}
baseline: {repeats: 3, params: {GOMAXPROCS: null, GOGC: null}}
chaos: {stress: {workers: 1, load: 50}}
measure: {warmup: 4s, window: 15s}
metrics: {p99_latency: p99_latency, error_rate: error_rate}
objective: {minimize: p99_latency}
constraints: ['error_rate <= 0.01']
study: {trials: 4, sampler: auto, seed: 3}
"""


def _grid(tmp: Path, values: dict[str, tuple[float, ...]], overhead: str = "2.5") -> Path:
    path = tmp / "grid.csv"
    lines = ["order,config,repeat,state,failure,seconds,overhead_s,p99_latency,error_rate"]
    for config, repeats in values.items():
        for i, v in enumerate(repeats):
            lines.append(f"{len(lines)},{config},{i},COMPLETE,,21.5,{overhead},{v},0")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_replayed_trial_costs_its_recorded_overhead_warmup_and_window(
    tmp_path: Path, exp: Experiment
) -> None:
    grid = ReplayGrid.load(_grid(tmp_path, {"GOMAXPROCS=1 GOGC=100": (0.01,)}, overhead="7.25"))
    replay = Replay(exp, grid, FakeClock(), seed=1)
    before = replay.clock.monotonic()
    record: dict[str, object] = {}
    measure(exp, replay.backends(), _env(1, 100), clock=replay.clock, labels={}, record=record)
    # The recorded restart overhead, then the experiment's own warm-up and window.
    assert replay.clock.monotonic() - before >= 7.25 + 4 + 15
    assert replay.clock.monotonic() - before < 7.25 + 4 + 15 + 5


def _a_clear_winner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid where GOMAXPROCS=1 GOGC=400 is 50% better than Go's default, every repeat, and
    the replay experiment of it, in the working directory."""
    _grid(tmp_path, {"GOMAXPROCS=unset GOGC=unset": (0.010, 0.011, 0.0105),
                     "GOMAXPROCS=1 GOGC=100": (0.009, 0.0095, 0.0092),
                     "GOMAXPROCS=1 GOGC=400": (0.005, 0.0052, 0.0051),
                     "GOMAXPROCS=2 GOGC=100": (0.012, 0.013, 0.0125),
                     "GOMAXPROCS=2 GOGC=400": (0.008, 0.0082, 0.0081)})
    (tmp_path / "exp.yaml").write_text(REPLAY)
    monkeypatch.chdir(tmp_path)


def test_autotune_run_plays_a_recorded_grid_to_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.cli import main

    _a_clear_winner(tmp_path, monkeypatch)
    assert main(["run", "exp.yaml", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "verdict: ADOPT GOMAXPROCS=1 GOGC=400 - " in out
    minutes = float(out.split("replayed: ")[1].split(" min")[0])
    # 3 baseline repeats + 4 search trials + at least one confirmation round of 4, each
    # 2.5 + 4 + 15 s on the simulated clock (printed to 0.1 min); far less real time.
    assert minutes >= (3 + 4 + 4) * 21.5 / 60 - 0.05
    assert (tmp_path / "results" / "replay-run" / "study.db").exists()
    # The report says where its CPU limit comes from: the recording, not a local target.
    assert main(["report", "exp.yaml"]) == 0
    report = (tmp_path / "results" / "replay-run" / "report.md").read_text()
    assert "1.0 CPU (when the grid was recorded: target.replay.cpus)" in report


def test_export_refuses_a_study_measured_with_another_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Review finding: export read the settings through the file as it is now; a parameter
    # added since was exported as unset, i.e. a delete of production's entry never measured.
    from autotune.cli import main

    _a_clear_winner(tmp_path, monkeypatch)
    assert main(["run", "exp.yaml", "--plain"]) == 0
    capsys.readouterr()
    assert main(["export", "exp.yaml", "--format", "env"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line and not line.startswith("#")]
    assert lines == ["GOMAXPROCS=1", "GOGC=400"]
    added = "  - {name: GOMEMLIMIT, type: categorical, values: [512MiB, 1GiB]}\n"
    (tmp_path / "exp.yaml").write_text(REPLAY.replace("parameters:\n", "parameters:\n" + added))
    assert main(["export", "exp.yaml", "--format", "env"]) == 1
    err = capsys.readouterr().err
    assert "was measured with a different experiment: parameter GOMEMLIMIT was added" in err


def test_a_grid_that_cannot_be_read_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.cli import main

    (tmp_path / "exp.yaml").write_text(REPLAY.replace("grid.csv", "missing.csv"))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "exp.yaml", "--plain"]) != 0
    assert "cannot read the grid missing.csv" in capsys.readouterr().err
    assert not (tmp_path / "results" / "replay-run" / "study.db").exists()


def test_the_whole_run_benchmark_judges_verdicts_against_the_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import whole_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(REPLAY)
    # Go's default is best: every candidate is recorded 20%+ worse. The right verdict is KEEP.
    _grid(tmp_path, {"GOMAXPROCS=unset GOGC=unset": (0.010, 0.0101, 0.0099),
                     "GOMAXPROCS=1 GOGC=100": (0.012, 0.0121, 0.0122),
                     "GOMAXPROCS=1 GOGC=400": (0.013, 0.0131, 0.0132),
                     "GOMAXPROCS=2 GOGC=100": (0.014, 0.0141, 0.0142),
                     "GOMAXPROCS=2 GOGC=400": (0.015, 0.0151, 0.0152)})
    keep = whole_run.run_one(tmp_path / "exp.yaml", 0, {})
    assert (keep.verdict, keep.chosen, keep.correct, keep.within) == (
        "keep current", None, True, True)
    assert keep.true_value == 0.010 and keep.baseline == 3 and keep.search == 4
    # 2.5 s overhead + 4 s warm-up + 15 s window per trial, every trial on the simulated clock.
    trials = keep.search + keep.confirm + keep.baseline
    assert trials * 21.5 <= keep.simulated_s < trials * 21.5 + 30

    # One configuration 50% better: ADOPT it.
    _grid(tmp_path, {"GOMAXPROCS=unset GOGC=unset": (0.010, 0.0101, 0.0099),
                     "GOMAXPROCS=1 GOGC=100": (0.012, 0.0121, 0.0122),
                     "GOMAXPROCS=1 GOGC=400": (0.005, 0.0051, 0.0052),
                     "GOMAXPROCS=2 GOGC=100": (0.014, 0.0141, 0.0142),
                     "GOMAXPROCS=2 GOGC=400": (0.015, 0.0151, 0.0152)})
    adopt = whole_run.run_one(tmp_path / "exp.yaml", 0, {})
    assert (adopt.verdict, adopt.chosen, adopt.correct, adopt.within) == (
        "adopt", "GOMAXPROCS=1 GOGC=400", True, True)
    summary = whole_run.summary(tmp_path / "exp.yaml", [adopt])
    assert summary["truth"]["verdict"] == "adopt" and summary["correct_share"] == 1.0


def test_the_null_replay_makes_every_configuration_read_like_the_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import whole_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(REPLAY)
    # One configuration recorded 50% better: under --null it is the baseline's equal, so the
    # only right verdict is KEEP and every run is within 10%.
    _grid(tmp_path, {"GOMAXPROCS=unset GOGC=unset": (0.010, 0.0102, 0.0098),
                     "GOMAXPROCS=1 GOGC=100": (0.012, 0.0121, 0.0122),
                     "GOMAXPROCS=1 GOGC=400": (0.005, 0.0051, 0.0052),
                     "GOMAXPROCS=2 GOGC=100": (0.014, 0.0141, 0.0142),
                     "GOMAXPROCS=2 GOGC=400": (0.015, 0.0151, 0.0152)})
    run = whole_run.run_one(tmp_path / "exp.yaml", 3, {"null": 0.1})
    assert run.within and run.correct == (run.verdict == "keep current")
    summary = whole_run.summary(tmp_path / "exp.yaml", [run], null=True)
    assert summary["truth"] == {"verdict": "keep current", "best": "baseline", "gain": 0.0,
                                "baseline": 0.010}
    # Every read: the baseline's recorded median of each metric times one lognormal factor,
    # continuous (two reads never tie) and the same factor for every metric of a read.
    exp = parse_experiment(REPLAY)
    grid = ReplayGrid.load(tmp_path / "grid.csv")
    medians = whole_run.baseline_medians(exp, grid)
    assert medians["p99_latency"] == 0.010

    class Fixed:
        def observe(self, live: object) -> None: ...
        def read(self, queries: object, window: object, live: object) -> dict[str, object]:
            return {"p99_latency": 0.005, "error_rate": 0.0}
        def close(self) -> None: ...

    null = whole_run.Null(Fixed(), {"p99_latency": 0.010, "error_rate": 0.002}, 0.1, 3)  # type: ignore[arg-type]
    reads = [null.read({}, None, None) for _ in range(50)]  # type: ignore[arg-type]
    factors = [r["p99_latency"] / 0.010 for r in reads]  # type: ignore[operator]
    assert len(set(factors)) == 50
    assert all(r["error_rate"] == pytest.approx(0.002 * f) for r, f in zip(reads, factors,
                                                                            strict=True))
    assert 0.9 < statistics.median(factors) < 1.1


def test_a_miss_is_put_at_the_stage_that_lost_every_good_configuration() -> None:
    from benchmarks.whole_run import Ground, missed_at

    # a and b are within 10% of the best (a); c is 50% worse; the baseline 100% worse.
    g = Ground(sign=1.0, values={"a": 1.0, "b": 1.05, "c": 1.5}, baseline=2.0, best=1.0,
               best_label="a", adopt=True)
    assert missed_at(g, {"a", "c"}, {"a"}, within=True) is None
    assert missed_at(g, {"c"}, {"c"}, within=False) == "search"
    assert missed_at(g, {"b", "c"}, {"c"}, within=False) == "top"
    assert missed_at(g, {"b", "c"}, {"b", "c"}, within=False) == "verdict"
    # A baseline within 10% is always measured: a miss is then the verdict's.
    keep = Ground(sign=1.0, values={"a": 1.0, "c": 1.5}, baseline=1.02, best=1.0,
                  best_label="a", adopt=False)
    assert missed_at(keep, set(), set(), within=False) == "verdict"
    # Maximised objectives: within 10% below the best.
    up = Ground(sign=-1.0, values={"a": 100.0, "b": 95.0, "c": 50.0}, baseline=40.0,
                best=100.0, best_label="a", adopt=True)
    assert missed_at(up, {"b"}, set(), within=False) == "top"
    assert missed_at(up, {"c"}, {"c"}, within=False) == "search"


def test_a_file_that_is_no_grid_is_refused_without_echoing_its_content(
    tmp_path: Path, exp: Experiment
) -> None:
    secret = tmp_path / ".env"
    secret.write_text("DB_PASSWORD=hunter2\n")
    with pytest.raises(TargetError, match="no columns named config and state") as e:
        ReplayGrid.load(secret)
    assert "hunter2" not in str(e.value)
    binary = tmp_path / "grid.bin"
    binary.write_bytes(b"\xff\xfe\x00config,state\n")
    with pytest.raises(TargetError, match="not a UTF-8 CSV file"):
        ReplayGrid.load(binary)


def test_a_grid_without_a_metric_the_objective_needs_is_refused(
    tmp_path: Path, exp: Experiment
) -> None:
    path = tmp_path / "grid.csv"
    path.write_text("order,config,repeat,state,p99_latency\n0,GOMAXPROCS=1 GOGC=100,0,COMPLETE,1\n")
    with pytest.raises(TargetError, match=r"no column for the metric\(s\) error_rate"):
        Replay(exp, ReplayGrid.load(path), FakeClock())


SHORT = ("order,config,repeat,state,failure,seconds,overhead_s,p99_latency,error_rate,"
         "p99_latency_first_5s,error_rate_first_5s\n"
         "0,GOMAXPROCS=1 GOGC=100,0,COMPLETE,,21,2,0.010,0.0,0.030,0.02\n")


def _shorter(exp: Experiment, window: str) -> Experiment:
    doc = exp.model_dump(mode="json", exclude_none=True)
    return parse_experiment(json.dumps({
        **doc, "measure": {**doc["measure"], "window": window},
        "target": {"replay": {"grid": "unused.csv", "window": "15s"}}}))


def test_a_shorter_window_is_answered_from_the_first_seconds_of_the_recorded_ones(
    tmp_path: Path, exp: Experiment
) -> None:
    path = tmp_path / "grid.csv"
    path.write_text(SHORT)
    short = _shorter(exp, "5s")
    replay = Replay(short, ReplayGrid.load(path), FakeClock(), seed=1)
    before = replay.clock.monotonic()
    metrics = measure(short, replay.backends(), _env(1, 100), clock=replay.clock, labels={},
                      record={})
    # The first 5 s of the recorded 15 s window, constraint included (0.02 > 0.01 would fail a
    # constraint the full window met), never the full window's values.
    assert (metrics["p99_latency"], metrics["error_rate"]) == (0.030, 0.02)
    # It costs the recorded overhead, the warm-up and the shorter window only.
    assert 2 + 4 + 5 <= replay.clock.monotonic() - before < 2 + 4 + 5 + 5


def test_a_window_the_grid_cannot_answer_is_refused_before_anything_starts(
    tmp_path: Path, exp: Experiment
) -> None:
    path = tmp_path / "grid.csv"
    path.write_text(SHORT)
    with pytest.raises(TargetError, match=r"no column for the metric\(s\) error_rate_first_8s"):
        Replay(_shorter(exp, "8s"), ReplayGrid.load(path), FakeClock())
    longer = _shorter(exp, "20s")
    with pytest.raises(TargetError, match="cannot lengthen a measurement"):
        Replay(longer, ReplayGrid.load(path), FakeClock())


def test_the_whole_run_at_a_shorter_window_is_judged_against_the_full_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import whole_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(REPLAY)
    # (full 15 s window, first 5 s): the first seconds mislead, GOMAXPROCS=2 GOGC=400 looks
    # best in them and is the worst in full; GOMAXPROCS=1 GOGC=400 is the true best.
    rows = {"GOMAXPROCS=unset GOGC=unset": (0.010, 0.010), "GOMAXPROCS=1 GOGC=100": (0.012, 0.012),
            "GOMAXPROCS=1 GOGC=400": (0.005, 0.012), "GOMAXPROCS=2 GOGC=100": (0.014, 0.014),
            "GOMAXPROCS=2 GOGC=400": (0.015, 0.0049)}
    lines = ["order,config,repeat,state,failure,seconds,overhead_s,p99_latency,error_rate,"
             "p99_latency_first_5s,error_rate_first_5s"]
    for config, (full, first) in rows.items():
        for i, jitter in enumerate((1.0, 1.01, 0.99)):
            lines.append(f"{len(lines)},{config},{i},COMPLETE,,21.5,2.5,{full * jitter},0,"
                         f"{first * jitter},0")
    (tmp_path / "grid.csv").write_text("\n".join(lines) + "\n")

    full = whole_run.run_one(tmp_path / "exp.yaml", 0, {})
    short = whole_run.run_one(tmp_path / "exp.yaml", 0, {"window": 5.0})
    assert (full.chosen, full.correct) == ("GOMAXPROCS=1 GOGC=400", True)
    # The 5 s window believes its first seconds; the verdict is scored by the full windows.
    assert (short.verdict, short.chosen, short.correct, short.within) == (
        "adopt", "GOMAXPROCS=2 GOGC=400", False, False)
    assert short.true_value == pytest.approx(0.015)
    # 2.5 s overhead + 4 s warm-up + 5 s window per trial.
    trials = short.search + short.confirm + short.baseline
    assert trials * 11.5 <= short.simulated_s < trials * 11.5 + 30
    # A grid without the columns is not played, and says why.
    assert "error_rate_first_8s" in str(whole_run.unrecorded(tmp_path / "exp.yaml", None, 8.0))


def test_a_grid_file_that_already_replays_a_shorter_window_keeps_its_recorded_one(
    exp: Experiment
) -> None:
    from benchmarks import whole_run

    ten = _shorter(exp, "10s")  # recorded at 15 s, replayed at 10 s
    update = whole_run.shorter_window(ten, 8.0)
    assert (update["measure"].window, update["target"].replay.window) == (8.0, 15.0)
