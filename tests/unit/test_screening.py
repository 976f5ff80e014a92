"""Screening (``study.screening``): a search trial whose first seconds are many times worse than
the best so far ends there, its stress removed; nothing else is ever screened
(autotune.study.screening)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from autotune.clock import FakeClock
from autotune.errors import ExperimentError
from autotune.experiment import Experiment, parse_experiment
from autotune.live import Window
from autotune.platforms import simulated
from autotune.platforms.replay import Replay, ReplayGrid
from autotune.progress import SilentProgress
from autotune.study import screening
from autotune.study.journal import Journal
from autotune.study.loop import StudyRunner
from autotune.study.storage import open_for_run
from autotune.study.trial import Backends

DOC: dict[str, Any] = {
    "name": "screen",
    # The surface's best is GOMAXPROCS=8 (the baseline's default); 1 and 16 are over 3x worse.
    "target": {"simulated": {"optimum": {"GOMAXPROCS": 8}, "unset": {"GOMAXPROCS": 8},
                             "noise": 0.0, "stress_factor": 1.0, "sensitivity": 20}},
    "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 16}],
    "baseline": {"repeats": 2},
    "chaos": {"stress": {"workers": 1, "load": 50}},
    "measure": {"warmup": "1s", "window": "10s"},
    "metrics": {"p99": "surface"},
    "objective": {"minimize": "p99"},
    "study": {"trials": 4, "sampler": "random", "seed": 1, "early_stop": None,
              "design": {"prior": False, "points": 0},
              "enqueue": [{"GOMAXPROCS": g} for g in (7, 1, 16, 9)],
              "screening": {"after": "3s", "factor": 3}},
}


def exp_of(**study: Any) -> Experiment:
    return parse_experiment(yaml.safe_dump({**DOC, "study": {**DOC["study"], **study}}))


def run(tmp: Path, exp: Experiment) -> tuple[list[dict[str, Any]], simulated.World,
                                             optuna.Study]:
    clock = FakeClock()
    world = simulated.World(tmp / "world.json")
    backends = Backends(target=simulated.SimulatedService(exp, world, clock),
                        injector=simulated.SimulatedInjector(world, clock),
                        source=simulated.SimulatedMetrics(exp, world, seed=1))
    journal = Journal(tmp / "trials.jsonl")
    runner = StudyRunner(exp, backends, clock=clock, progress=SilentProgress(), journal=journal,
                         experiment_hash="t")
    studies = open_for_run(exp, f"sqlite:///{tmp}/study.db")
    runner.run(studies, exp.study.trials)
    return list(journal.entries()), world, studies.search


def value(exp: Experiment, gomaxprocs: int) -> float:
    assert exp.target.simulated is not None
    return simulated.surface(exp, exp.target.simulated, {"GOMAXPROCS": str(gomaxprocs)})


def test_a_hopeless_candidate_ends_at_the_checkpoint_with_its_stress_removed(
        tmp_path: Path) -> None:
    exp = exp_of()
    assert value(exp, 1) > 3 * value(exp, 8) and value(exp, 16) > 3 * value(exp, 8)
    assert value(exp, 7) < 3 * value(exp, 8) and value(exp, 9) < 3 * value(exp, 8)
    records, world, search = run(tmp_path, exp)
    by = {r["settings"]["GOMAXPROCS"]: r for r in records if r["kind"] == "search"}
    assert {g: r["state"] for g, r in by.items()} == {
        7: "COMPLETE", 1: "SCREENED", 16: "SCREENED", 9: "COMPLETE"}
    for g in (1, 16):
        r = by[g]
        assert "screened after 3s" in r["screened"]
        assert r["values"] == [pytest.approx(value(exp, g))]
        [early] = r["early"]
        assert early["after"] == 3 and early["verdict"] == r["screened"]
        # the stress was on for the checkpoint and removed right after it, not at 10 s
        [inj] = r["injections"]
        assert 3 <= inj["recovered"] - inj["started"] < 4
        assert "window" not in r and r["phases"]["measure"] < 4
    for g in (7, 9):  # judged, not screened: measured in full
        [early] = by[g]["early"]
        assert early["metrics"] and "verdict" not in early and "unavailable" not in early
        assert by[g]["window"]["seconds"] == 10
    states = {t.params["GOMAXPROCS"]: t.state for t in search.get_trials()}
    assert states[1] == states[16] == TrialState.PRUNED
    assert search.best_trial.params["GOMAXPROCS"] in (7, 9)  # never a screened one
    assert all("early" not in r for r in records if r["kind"] == "baseline")
    state = world.load()
    assert state["active"] == {} and state["applied"] is None


def test_screened_trials_count_against_the_budget(tmp_path: Path) -> None:
    records, _, _ = run(tmp_path, exp_of(trials=3))
    assert [r["settings"]["GOMAXPROCS"] for r in records if r["kind"] == "search"] == [7, 1, 16]


def test_without_screening_every_trial_is_measured_in_full(tmp_path: Path) -> None:
    records, _, _ = run(tmp_path, exp_of(screening=None))
    search = [r for r in records if r["kind"] == "search"]
    assert len(search) == 4 and all(r["state"] == "COMPLETE" and "early" not in r
                                     for r in search)


def _study_with(values: list[tuple[str, float]]) -> optuna.Study:
    study = optuna.create_study()
    for kind, v in values:
        study.add_trial(optuna.trial.create_trial(
            params={"GOMAXPROCS": 4}, distributions={"GOMAXPROCS": IntDistribution(1, 16)},
            value=v, user_attrs={"kind": kind}))
    return study


def test_the_factor_is_never_below_the_noise_the_baseline_showed() -> None:
    exp = exp_of()
    quiet = screening.rule(exp, _study_with([("search", 2.0)]),
                           _study_with([("baseline", 4.0), ("baseline", 4.4)]))
    assert quiet is not None and quiet.incumbent == 2.0 and quiet.factor == 3
    assert quiet.judge(3, {"p99": 6.1}) is not None and quiet.judge(3, {"p99": 5.9}) is None
    # baseline repeats 1 .. 5 (relative range 4/3): F = 1 + 2 x 4/3
    noisy = screening.rule(exp, _study_with([]),
                           _study_with([("baseline", 1.0), ("baseline", 3.0),
                                        ("baseline", 5.0)]))
    assert noisy is not None and noisy.incumbent == 1.0
    assert noisy.factor == pytest.approx(1 + 2 * 4 / 3)
    assert noisy.judge(3, {"p99": 3.5}) is None  # 3.5x, but within the baseline's own noise
    assert screening.rule(exp, _study_with([]), _study_with([])) is None  # nothing to judge by


@pytest.mark.parametrize(("study", "chaos", "field"), [
    ({"screening": {"after": "10s"}}, None, "study.screening.after"),
    ({"screening": {"after": "3s", "factor": 1.2}}, None, "study.screening.factor"),
    ({}, {"scenarios": [{"name": "quiet"}, {"name": "noisy", "stress": {"workers": 1}}]},
     "study.screening: not with chaos.scenarios"),
])
def test_what_cannot_be_screened_is_refused_naming_the_field(
        study: dict[str, Any], chaos: dict[str, Any] | None, field: str) -> None:
    doc = {**DOC, "study": {**DOC["study"], **study}}
    if chaos is not None:
        doc["chaos"] = chaos
    with pytest.raises(ExperimentError, match=field.replace(".", r"\.")):
        parse_experiment(yaml.safe_dump(doc))


def test_two_objectives_cannot_be_screened() -> None:
    doc = {**DOC, "metrics": {"p99": "surface", "cpu": "stress"},
           "objective": [{"minimize": "p99"}, {"minimize": "cpu"}]}
    with pytest.raises(ExperimentError, match=r"study\.screening: needs one objective"):
        parse_experiment(yaml.safe_dump(doc))


GRID = """order,config,repeat,state,failure,seconds,overhead_s,p99,p99_first_3s
0,GOMAXPROCS=8,0,COMPLETE,,12,1,0.002,0.0021
1,GOMAXPROCS=1,0,COMPLETE,,12,1,0.040,0.050
"""


def test_a_replay_answers_the_short_read_from_the_grids_early_column(tmp_path: Path) -> None:
    path = tmp_path / "grid.csv"
    path.write_text(GRID)
    exp = parse_experiment(yaml.safe_dump({
        **DOC, "target": {"replay": {"grid": str(path)}},
        "parameters": [{"name": "GOMAXPROCS", "type": "int", "values": [1, 8]}],
        "metrics": {"p99": "p99"}, "study": {**DOC["study"], "enqueue": []},
    }))
    clock = FakeClock()
    backends = Replay(exp, ReplayGrid.load(path), clock, seed=1).backends()
    live = backends.target.apply({"GOMAXPROCS": "1"})
    now = clock.now()
    assert backends.source.read({"p99": "p99"}, Window(now, now + 3), live) == {"p99": 0.050}
    assert backends.source.read({"p99": "p99"}, Window(now, now + 10), live) == {"p99": 0.040}
    five = backends.source.read({"p99": "p99"}, Window(now, now + 5), live)["p99"]
    assert "p99_first_5s" in str(five)  # not recorded: unavailable, never the full window's


def test_the_report_counts_the_screened_and_never_recommends_one(tmp_path: Path) -> None:
    from autotune.report import build_report, document, markdown
    from autotune.study.storage import open_existing

    exp = exp_of()
    run(tmp_path, exp)
    report = build_report(exp, open_existing(exp, f"sqlite:///{tmp_path}/study.db"))
    assert report.counts.search_screened == 2 and report.counts.search_complete == 4
    assert all(c.settings["GOMAXPROCS"] not in (1, 16) for c in report.candidates)
    text = markdown.render(document.build(report, {}))
    assert "4 of 4 search trials complete (2 screened out early: study.screening)" in text
