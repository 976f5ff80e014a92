"""Several chaos scenarios (``chaos.scenarios``): every trial measures each in its own window,
in an order that rotates, records each scenario's values and combines them; a candidate that
wins one storm can lose the study (autotune.study.scenarios)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.clock import FakeClock
from autotune.errors import ExperimentError
from autotune.experiment import Experiment, load_experiment, parse_experiment
from autotune.platforms import simulated
from autotune.progress import SilentProgress
from autotune.report import build_report, document, markdown, robustness
from autotune.study import scenarios
from autotune.study.journal import Journal
from autotune.study.kinds import TrialKind
from autotune.study.loop import StudyRunner
from autotune.study.night.fingerprint import environment, environment_id
from autotune.study.record import TrialRecord
from autotune.study.storage import open_existing, open_for_run
from autotune.study.trial import Backends, TrialFailed

ROOT = Path(__file__).parents[2]

DOC: dict[str, Any] = {
    "name": "storms",
    # Quiet, the surface is lowest at GOMAXPROCS 12; under stress at 2; with held Ps at 6.
    "target": {"simulated": {"optimum": {"GOMAXPROCS": 12}, "unset": {"GOMAXPROCS": 8},
                             "noise": 0.0, "stress_factor": 1.5,
                             "scenarios": {"noisy": {"GOMAXPROCS": 2},
                                           "held": {"GOMAXPROCS": 6}}}},
    "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 16}],
    "baseline": {"repeats": 1},
    "chaos": {"scenarios": [
        {"name": "quiet"},
        {"name": "noisy", "stress": {"workers": 2, "load": 80}},
        {"name": "held", "blocked_p": {"goroutines": 1, "hold": "50ms", "gap": "50ms"}},
    ]},
    "measure": {"warmup": "1s", "window": "5s"},
    "metrics": {"p99": "surface"},
    "objective": {"minimize": "p99"},
    # every value measured once: the winners under each storm are known exactly
    "study": {"trials": 7, "sampler": "random", "seed": 1, "early_stop": None,
              "design": {"prior": False, "points": 1},
              "enqueue": [{"GOMAXPROCS": g} for g in (1, 2, 4, 6, 8, 12, 16)]},
}


def exp_of(**chaos: Any) -> Experiment:
    doc = {**DOC, "chaos": {**DOC["chaos"], **chaos}}
    return parse_experiment(yaml.safe_dump(doc))


def run_study(tmp: Path, exp: Experiment) -> tuple[list[dict[str, Any]], simulated.World]:
    clock = FakeClock()
    world = simulated.World(tmp / "world.json")
    backends = Backends(target=simulated.SimulatedService(exp, world, clock),
                        injector=simulated.SimulatedInjector(world, clock),
                        source=simulated.SimulatedMetrics(exp, world, seed=1),
                        blocker=simulated.SimulatedBlocker(world, clock))
    journal = Journal(tmp / "trials.jsonl")
    runner = StudyRunner(exp, backends, clock=clock, progress=SilentProgress(), journal=journal,
                         experiment_hash="t")
    runner.run(open_for_run(exp, f"sqlite:///{tmp}/study.db"), exp.study.trials)
    return list(journal.entries()), world


def test_every_trial_measures_each_scenario_in_a_rotating_order(tmp_path: Path) -> None:
    records, world = run_study(tmp_path, exp_of())
    search = [r for r in records if r["kind"] == "search"]
    assert len(search) == 7 and all(r["state"] == "COMPLETE" for r in search)
    firsts = set()
    for r in search:
        windows = r["scenarios"]
        assert sorted(w["name"] for w in windows) == ["held", "noisy", "quiet"]
        assert [w["position"] for w in windows] == [0, 1, 2]
        firsts.add(windows[0]["name"])
        # one window each, one after the other, none overlapping
        spans = [(w["window"]["start"], w["window"]["end"]) for w in windows]
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        # the stress and the held Ps lie inside their own scenario's window only
        by_name = {w["name"]: w["window"] for w in windows}
        for inj in r["injections"]:
            w = by_name[inj["scenario"]]
            assert w["start"] - 1 <= inj["started"] and inj["recovered"] <= w["end"] + 1
        assert {i["scenario"] for i in r["injections"]} == {"noisy", "held"}
        assert {"p99@quiet", "p99@noisy", "p99@held", "p99"} <= r["metrics"].keys()
        assert r["metrics"]["p99"] == max(r["metrics"][f"p99@{s}"]
                                          for s in ("quiet", "noisy", "held"))
    assert firsts == {"quiet", "noisy", "held"}  # the order rotates
    state = world.load()
    assert state["active"] == {} and state["applied"] is None  # nothing left behind


def test_the_robust_winner_differs_from_each_storms_own(tmp_path: Path) -> None:
    records, _ = run_study(tmp_path, exp_of())
    search = {r["settings"]["GOMAXPROCS"]: r["metrics"] for r in records
              if r["kind"] == "search"}
    best = {key: min(search, key=lambda g: search[g][key])
            for key in ("p99", "p99@quiet", "p99@noisy", "p99@held")}
    assert (best["p99@quiet"], best["p99@noisy"], best["p99@held"]) == (12, 2, 6)
    robust = best["p99"]
    assert robust not in (2, 12)  # neither storm's own winner survives the others
    # and the winner of one storm is measurably worse under another
    assert search[2]["p99@quiet"] > 1.2 * search[robust]["p99@quiet"]


def test_weighted_combines_by_how_often_production_sees_each() -> None:
    exp = exp_of(combine="weighted", scenarios=[
        {"name": "quiet", "weight": 3}, {"name": "noisy", "stress": {"workers": 1}},
        {"name": "held", "weight": 0.000001, "blocked_p": {"goroutines": 1, "hold": "1s"}}])
    combined = scenarios.combine(exp, {"quiet": {"p99": 1.0}, "noisy": {"p99": 5.0},
                                       "held": {"p99": 2.0}})
    assert combined["p99@noisy"] == 5.0 and combined["p99"] == pytest.approx(2.0)


def test_worst_follows_each_metrics_direction_and_a_missing_one_is_left_out() -> None:
    doc = {**DOC, "metrics": {"p99": "surface", "rps": "stress", "gc": "stress"},
           "objective": {"minimize": "p99"}, "constraints": ["rps >= 10"]}
    exp = parse_experiment(yaml.safe_dump(doc))
    per = {"quiet": {"p99": 1.0, "rps": 50.0, "gc": 1.0},
           "noisy": {"p99": 4.0, "rps": 30.0, "gc": 3.0},
           "held": {"p99": 2.0, "rps": 40.0}}
    combined = scenarios.combine(exp, per)
    assert combined["p99"] == 4.0 and combined["rps"] == 30.0  # the worse of each direction
    assert "gc" not in combined and combined["gc@noisy"] == 3.0


def test_the_order_puts_each_scenario_in_each_place_once_every_k_trials() -> None:
    exp = exp_of()
    orders = [[s.name for s in scenarios.order(exp, n)] for n in range(3, 6)]
    for position in range(3):
        assert sorted(o[position] for o in orders) == ["held", "noisy", "quiet"]


@pytest.mark.parametrize(("change", "field"), [
    ({"stress": {"workers": 1}}, "chaos: give exactly one of stress"),
    ({"scenarios": [{"name": "a"}, {"name": "a"}]}, "scenario names must differ: a twice"),
    ({"scenarios": [{"name": "A b"}]}, "chaos.scenarios[0].name"),
    ({"scenarios": [{"name": "a", "pattern": {"every": "10s", "burst": "2s"}}]},
     "chaos.scenarios[0].pattern: bursts of what?"),
    ({"scenarios": [{"name": "a", "stress": {"workers": 0,
                                              "memory": {"workers": 1, "size": "lots"}}}]},
     "chaos.scenarios[0].stress.memory.size"),
])
def test_invalid_scenarios_name_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ExperimentError) as e:
        doc = {**DOC, "chaos": {**DOC["chaos"], **change}}
        doc["target"] = {"simulated": {"optimum": {"GOMAXPROCS": 2}}}
        parse_experiment(yaml.safe_dump(doc))
    assert field in str(e.value)


def test_a_constraint_names_a_scenario_that_exists() -> None:
    exp = parse_experiment(yaml.safe_dump({**DOC, "constraints": ["p99@quiet <= 0.01"]}))
    assert exp.required_metrics == {"p99", "p99@quiet"}
    with pytest.raises(ExperimentError) as e:
        parse_experiment(yaml.safe_dump({**DOC, "constraints": ["p99@stormy <= 0.01"]}))
    assert "constraints[0]: unknown scenario 'stormy' in 'p99@stormy'" in str(e.value)


def test_held_ps_need_a_local_target() -> None:
    doc = {**DOC, "target": {"kubernetes": {"namespace": "a", "deployment": "api",
                                            "container": "api"}},
           "prometheus": {"url": "http://127.0.0.1:9090"},
           "metrics": {"p99": "histogram_quantile(0.99, rate(x_bucket{ {{selector}} }[1m]))"},
           "measure": {"warmup": "1s", "window": "2m"}}
    with pytest.raises(ExperimentError) as e:
        parse_experiment(yaml.safe_dump(doc))
    assert "chaos.scenarios[2].blocked_p: needs a local target" in str(e.value)


def test_the_report_shows_each_candidate_under_each_storm_and_names_the_fragile(
        tmp_path: Path) -> None:
    exp = exp_of()
    exp = exp.model_copy(update={"baseline": exp.baseline.model_copy(update={"repeats": 2})})
    run_study(tmp_path, exp)
    report = build_report(exp, open_existing(exp, f"sqlite:///{tmp_path}/study.db"))
    robust = report.robustness
    assert robust is not None and robust.scenarios == ("quiet", "noisy", "held")
    assert robust.rows[0].config == "baseline"
    assert robust.winners["quiet"] != robust.winners["noisy"]  # each storm has its own winner
    # GOMAXPROCS=12 wins the quiet node and is far worse than the robust choice under stress
    quiet_winner = robust.winners["quiet"]
    assert any(f.startswith(f"{quiet_winner} (GOMAXPROCS=12) is best under quiet but fragile "
                            "under noisy") for f in robust.fragile), robust.fragile
    chosen = next(r for r in robust.rows if r.config == report.best_candidate)
    assert all(c.comparison is not None for c in chosen.cells)
    assert robust.weakest is not None and robust.weakest.startswith(report.best_candidate or "")
    text = markdown.render(document.build(report, {}))
    assert "## Robustness: each storm" in text and "| configuration | settings | quiet |" in text
    assert "Under each storm: " in text


def test_one_stress_has_no_robustness_section(tmp_path: Path) -> None:
    doc = {**DOC, "chaos": {"stress": {"workers": 1}},
           "target": {"simulated": {"optimum": {"GOMAXPROCS": 2}, "unset": {"GOMAXPROCS": 8}}}}
    exp = parse_experiment(yaml.safe_dump(doc))
    records, _ = run_study(tmp_path, exp)
    assert all("scenarios" not in r and not any("@" in k for k in r.get("metrics", {}))
               for r in records)  # records exactly as before scenarios existed
    report = build_report(exp, open_existing(exp, f"sqlite:///{tmp_path}/study.db"))
    assert report.robustness is None
    assert "Robustness" not in markdown.render(document.build(report, {}))


def test_a_trial_of_k_scenarios_is_planned_as_k_windows() -> None:
    exp = exp_of()  # three scenarios, warmup 1s, window 5s
    assert exp.measured_seconds == 3 * (1 + 5)
    one = parse_experiment(yaml.safe_dump({
        **DOC, "chaos": {"stress": {"workers": 1}},
        "target": {"simulated": {"optimum": {"GOMAXPROCS": 2}}}}))
    tries = 1 + exp.measure.noise_guard.retries  # each attempt of a trial re-measures
    assert one.measured_seconds == 6
    assert exp.max_trial_seconds - one.max_trial_seconds == (12 + 2 * 120) * tries


def test_one_stress_keeps_the_nightly_environment_it_had_before_scenarios() -> None:
    """The ids of the shipped experiments computed at 56783b9, before chaos.scenarios: a
    nightly study of one stress must not start a new environment with the upgrade."""
    ids = {f: environment_id(environment(load_experiment(ROOT / f)[0], {}).fields)
           for f in ("experiments/local.yaml", "experiments/api.yaml")}
    assert ids == {"experiments/local.yaml": "49846b63", "experiments/api.yaml": "8bc16dd3"}


def test_an_objective_of_one_scenario_reports_without_a_robustness_table(
        tmp_path: Path) -> None:
    exp = parse_experiment(yaml.safe_dump({**DOC, "objective": {"minimize": "p99@held"}}))
    run_study(tmp_path, exp)
    report = build_report(exp, open_existing(exp, f"sqlite:///{tmp_path}/study.db"))
    assert report.objectives[0].metric == "p99@held" and report.robustness is None


def test_a_storm_that_stalled_the_load_is_not_averaged_away(tmp_path: Path) -> None:
    doc = {**DOC, "metrics": {"p99": "surface", "rate": "stress"},
           "measure": {**DOC["measure"], "load": {"metric": "rate", "tolerance": 0.1}}}
    exp = parse_experiment(yaml.safe_dump(doc))
    reference = optuna.create_study()
    reference.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={
        "kind": "baseline", "record": {"metrics": {
            "rate": 100.0, "rate@quiet": 100.0, "rate@noisy": 100.0, "rate@held": 100.0}}}))
    runner = StudyRunner(exp, None, clock=FakeClock(), progress=SilentProgress(),  # type: ignore[arg-type]
                         journal=Journal(tmp_path / "j.jsonl"), experiment_hash="t")
    runner._reference = reference
    record = TrialRecord(study="s", number=1, kind=TrialKind.SEARCH, settings={}, env={},
                         started=0.0, sampler="tpe", autotune_version="t", host="h",
                         experiment_hash="t", target="simulated")
    fine = {"rate": 100.0, "rate@quiet": 101.0, "rate@noisy": 99.0, "rate@held": 100.0}
    runner._check_load(record, fine)
    # the mean (94) is within 10% of the baseline's; the noisy window served 82% of it
    stalled = {"rate": 94.0, "rate@quiet": 100.0, "rate@noisy": 82.0, "rate@held": 100.0}
    with pytest.raises(TrialFailed, match=r"load not comparable under noisy: rate was 82/s"):
        runner._check_load(record, stalled)


REPLAYED = """order,config,repeat,state,failure,seconds,overhead_s,p99,p99@quiet,p99@noisy,p99@held
0,GOMAXPROCS=2,0,COMPLETE,,40,1,0.030,0.005,0.010,0.030
1,GOMAXPROCS=6,0,COMPLETE,,40,1,0.012,0.008,0.012,0.009
2,GOMAXPROCS=8,0,COMPLETE,,40,1,0.020,0.006,0.020,0.015
"""


def replay_exp(tmp: Path, **change: Any) -> Experiment:
    grid = tmp / "storms.csv"
    grid.write_text(REPLAYED)
    return parse_experiment(yaml.safe_dump({
        **DOC, "target": {"replay": {"grid": str(grid)}},
        "parameters": [{"name": "GOMAXPROCS", "type": "int", "values": [2, 6, 8]}],
        "metrics": {"p99": "p99"},
        "study": {"trials": 2, "sampler": "random", "seed": 1, "early_stop": None,
                  "design": {"prior": False, "points": 0},
                  "enqueue": [{"GOMAXPROCS": 2}, {"GOMAXPROCS": 6}]}, **change}))


def test_a_replay_answers_each_window_from_its_own_scenarios_columns(tmp_path: Path) -> None:
    from autotune.platforms.replay import Replay, ReplayGrid

    exp = replay_exp(tmp_path)
    assert exp.target.replay is not None
    clock = FakeClock()
    replay = Replay(exp, ReplayGrid.load(exp.target.replay.grid), clock, seed=1)
    journal = Journal(tmp_path / "trials.jsonl")
    runner = StudyRunner(exp, replay.backends(), clock=clock, progress=SilentProgress(),
                         journal=journal, experiment_hash="t")
    runner.run(open_for_run(exp, f"sqlite:///{tmp_path}/study.db"), exp.study.trials)
    rows = {r["settings"]["GOMAXPROCS"]: r for r in journal.entries() if r["kind"] == "search"}
    assert rows[2]["metrics"]["p99@held"] == 0.030 and rows[2]["metrics"]["p99@quiet"] == 0.005
    for g, recorded in ((2, (0.005, 0.010, 0.030)), (6, (0.008, 0.012, 0.009))):
        windows = {w["name"]: w["metrics"]["p99"] for w in rows[g]["scenarios"]}
        # each window in its own place in the order, answered from its own column
        assert (windows["quiet"], windows["noisy"], windows["held"]) == recorded
        assert rows[g]["metrics"]["p99"] == max(recorded)  # worst
    assert replay.active == {}  # every booked stress and held P ended


def test_a_replay_cannot_tell_two_quiet_scenarios_apart() -> None:
    doc = {**DOC, "target": {"replay": {"grid": "x.csv"}}, "metrics": {"p99": "p99"},
           "chaos": {"scenarios": [{"name": "a"}, {"name": "b"},
                                   {"name": "c", "stress": {"workers": 1}}]}}
    with pytest.raises(ExperimentError, match="tells quiet scenarios apart by nothing"):
        parse_experiment(yaml.safe_dump(doc))


def test_a_replay_grid_without_a_scenarios_column_is_refused(tmp_path: Path) -> None:
    from autotune.errors import TargetError
    from autotune.platforms.replay import Replay, ReplayGrid

    exp = replay_exp(tmp_path)
    grid = tmp_path / "storms.csv"
    grid.write_text(REPLAYED.replace("p99@held", "p99@other"))
    with pytest.raises(TargetError, match="p99@held"):
        Replay(exp, ReplayGrid.load(grid), FakeClock())


def test_fragile_when_maximizing_is_measured_against_the_chosen() -> None:
    # Review finding: maximizing, the loss was chosen / winner - 1 (1000 against 800 req/s:
    # "25% worse"), and a winner at 0 was never fragile.
    winners = {"quiet": "#2", "held": "#3"}
    medians: dict[str, dict[str, float | None]] = {
        "#1": {"quiet": 1100.0, "noisy": 1000.0, "held": 1000.0},
        "#2": {"quiet": 1200.0, "noisy": 800.0, "held": 990.0},
        "#3": {"quiet": 0.0, "noisy": 950.0, "held": 1100.0}}
    fragile = robustness._fragile(winners, {"quiet": 3, "held": 3}, medians, "#1", False, [])
    assert fragile[0].startswith("#2 is best under quiet but fragile under noisy: 20% worse")
    assert fragile[1].startswith("#3 is best under held but fragile under quiet: 100% worse")
