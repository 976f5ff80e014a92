"""The initial design and the no-repeat rule: what a study measures, and that it never measures a
configuration twice by accident."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from autotune.experiment import Experiment, parse_experiment
from autotune.study import design
from autotune.study.space import settings_key, size
from tests.support.simulated import rig

GO_SPACE = [
    {"name": "GOMAXPROCS", "type": "int", "values": [1, 2, 4, 8]},
    {"name": "GOGC", "type": "int", "values": [25, 100, 400]},
]


def _exp(parameters: list[dict[str, Any]], **study: Any) -> Experiment:
    doc = {
        "name": "d",
        "target": {"local": {"cpus": 1.0}},
        "parameters": parameters,
        "chaos": {"stress": {"workers": 1}},
        "metrics": {"p99": "x"},
        "objective": {"minimize": "p99"},
        "study": {"trials": 8, **study},
    }
    return parse_experiment(yaml.safe_dump(doc))


def test_prior_puts_gomaxprocs_at_the_limit_and_relaxes_gc() -> None:
    exp = _exp(GO_SPACE)
    points = design.initial_design(exp, cpu_limit=1.0, seed=1)
    prior = [p for p in points if p.origin == "prior"]
    assert [p.settings for p in prior] == [{"GOMAXPROCS": 1, "GOGC": 400},
                                           {"GOMAXPROCS": 2, "GOGC": 400},
                                           {"GOMAXPROCS": 4, "GOGC": 400}]
    assert "1-CPU limit rounded up" in prior[0].why and "default" in prior[1].why
    assert "more Ps than CPUs" in prior[2].why


def test_prior_oversubscribes_on_the_domain_and_never_repeats_a_point() -> None:
    # Twice Go's default for 1 CPU is 4; the nearest value on a log scale when 4 is not offered.
    exp = _exp([{"name": "GOMAXPROCS", "type": "int", "values": [1, 2, 3, 6]},
                {"name": "GOGC", "type": "int", "values": [100, 400]}])
    assert [s["GOMAXPROCS"] for s, _ in design.prior(exp, 1.0)] == [1, 2, 3]
    # Doubling is a ratio, so "nearest" is on a log scale: from 4, 7 is nearer than 2 (7/4 <
    # 4/2); on a linear scale 2 would be, a point already measured, and the third point lost.
    exp = _exp([{"name": "GOMAXPROCS", "type": "int", "values": [1, 2, 7]},
                {"name": "GOGC", "type": "int", "values": [100, 400]}])
    assert [s["GOMAXPROCS"] for s, _ in design.prior(exp, 1.0)] == [1, 2, 7]
    # A domain that tops out at Go's default has no room above it: two points, not three.
    exp = _exp([{"name": "GOMAXPROCS", "type": "int", "values": [1, 2]},
                {"name": "GOGC", "type": "int", "values": [100, 400]}])
    assert [s["GOMAXPROCS"] for s, _ in design.prior(exp, 1.0)] == [1, 2]


def test_prior_with_a_two_cpu_limit_has_two_points_and_no_forced_gc() -> None:
    exp = _exp([*GO_SPACE, {"name": "gc", "env": "FORCEGC_INTERVAL_MS", "type": "int",
                            "values": [0, 100, 500]}])
    prior = design.prior(exp, 2.0)
    # ceil(2) == Go's own default (ceil, at least 2): one point for both, then twice it.
    assert [s for s, _ in prior] == [{"GOMAXPROCS": 2, "GOGC": 400, "gc": 0},
                                     {"GOMAXPROCS": 4, "GOGC": 400, "gc": 0}]


def test_prior_without_a_known_limit_leaves_gomaxprocs_neutral() -> None:
    exp = _exp(GO_SPACE)
    (settings, why), = design.prior(exp, None)
    assert settings["GOGC"] == 400 and "unknown" in why


def test_cpu_limit_reads_local_cpus_and_kubernetes_quantities() -> None:
    assert design.cpu_limit({"cpus": 1.5}) == 1.5
    assert design.cpu_limit({"cpu_limit": "500m"}) == 0.5
    assert design.cpu_limit({"cpu_limit": "2"}) == 2.0
    assert design.cpu_limit({"cpu_limit": None}) is None
    assert design.cpu_limit({}) is None


def test_design_is_distinct_spread_and_starts_with_the_users_candidates() -> None:
    exp = _exp(GO_SPACE, enqueue=[{"GOMAXPROCS": 8, "GOGC": 25}], design={"points": 3})
    points = design.initial_design(exp, cpu_limit=1.0, seed=7)
    assert [p.origin for p in points] == ["enqueued", "prior", "prior", "prior", "design",
                                          "design", "design"]
    keys = [settings_key(p.settings) for p in points]
    assert len(set(keys)) == len(keys)
    # Farthest-point: with (8,25), (1,400), (2,400), (4,400) taken, the far corner (1,25) first.
    assert points[4].settings == {"GOMAXPROCS": 1, "GOGC": 25}


def test_design_skips_what_was_measured_and_fits_the_budget() -> None:
    exp = _exp(GO_SPACE, trials=3, design={"points": 5})
    measured = [{"GOMAXPROCS": 1, "GOGC": 400}]
    points = design.initial_design(exp, cpu_limit=1.0, measured=measured, seed=1)
    assert len(points) == 3
    assert {"GOMAXPROCS": 1, "GOGC": 400} not in [p.settings for p in points]


def test_design_can_be_switched_off() -> None:
    exp = _exp(GO_SPACE, design={"prior": False, "points": 0})
    assert design.initial_design(exp, cpu_limit=1.0) == []


def test_farthest_points_in_a_continuous_space_stay_in_range() -> None:
    # (not GOGC: Go reads it as an integer, so a float GOGC is refused at validation)
    exp = _exp([{"name": "ratio", "env": "RATIO", "type": "float", "low": 10, "high": 1000,
                 "log": True}])
    assert size(exp) is None
    picks = design.farthest_points(exp, [], 4, seed=3)
    assert len(picks) == 4 and all(10 <= float(p["ratio"]) <= 1000 for p in picks)


# --- in a study ------------------------------------------------------------------------------

SMALL = [
    {"name": "GOMAXPROCS", "type": "int", "values": [1, 2, 4]},
    {"name": "gc", "env": "FORCEGC_INTERVAL_MS", "type": "int", "values": [0, 2000]},
]


def _journal(tmp: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp / "trials.jsonl").read_text().splitlines()]


def test_a_small_space_is_measured_once_each_then_the_search_stops(tmp_path: Path) -> None:
    r = rig(tmp_path, **{"parameters": SMALL, "study.trials": 10, "study.sampler": "random",
                         "baseline.repeats": 1})
    result = r.run()
    assert result.stop_reason == "every configuration measured"
    search = [t for t in r.studies().search.get_trials() if t.params]
    keys = [settings_key(t.params) for t in search]
    assert len(keys) == 6 and len(set(keys)) == 6


def test_trials_record_their_origin(tmp_path: Path) -> None:
    r = rig(tmp_path, **{"study.trials": 6, "baseline.repeats": 1,
                         "study.design": {"points": 2},
                         "study.enqueue": [{"GOMAXPROCS": 3, "gc": 500}]})
    r.run()
    origins = [rec.get("origin") for rec in _journal(tmp_path) if rec["kind"] == "search"]
    assert origins[:4] == ["enqueued", "prior", "design", "design"]
    assert origins[4:] == ["sampler", "sampler"]
    attrs = r.studies().search.user_attrs["design"]
    assert [a["origin"] for a in attrs] == ["enqueued", "prior", "design", "design"]
    # A resumed study keeps its design; it does not queue a new one.
    r.run(budget=7)
    assert r.studies().search.user_attrs["design"] == attrs


def test_sampler_repeats_are_moved_to_the_nearest_unmeasured_configuration(
        tmp_path: Path) -> None:
    # Random sampling 6 times in 6 cells repeats itself with probability 1 - 6!/6^6 (98%).
    r = rig(tmp_path, **{"parameters": SMALL, "study.trials": 6, "study.sampler": "random",
                         "study.design": {"prior": False, "points": 0}, "baseline.repeats": 1})
    r.run()
    records = [rec for rec in _journal(tmp_path) if rec["kind"] == "search"]
    assert len({settings_key(rec["settings"]) for rec in records}) == 6
    repaired = [rec for rec in records if "repaired_from" in rec]
    assert repaired, "seeded random sampling repeated nothing: pick another seed"
    for rec in repaired:
        earlier = {settings_key(x["settings"]) for x in records if x["number"] < rec["number"]}
        assert settings_key(rec["repaired_from"]) in earlier


def test_gp_after_the_design_models_from_the_first_sampler_trial(tmp_path: Path) -> None:
    import pytest

    from autotune.study.samplers import gp_available
    if not gp_available():
        pytest.skip("torch/scipy not installed (pip install 'autotune[gp]'); CI installs them")
    r = rig(tmp_path, **{"parameters": SMALL, "study.trials": 5, "study.sampler": "gp",
                         "baseline.repeats": 1, "study.design": {"points": 2}})
    result = r.run()
    assert result.completed == 5
    records = [rec for rec in _journal(tmp_path) if rec["kind"] == "search"]
    assert [rec["origin"] for rec in records] == ["prior", "design", "design", "sampler",
                                                  "sampler"]
    assert {rec["sampler"] for rec in records} == {"gp"}
    assert len({settings_key(rec["settings"]) for rec in records}) == 5


def test_auto_searches_with_tpe_even_where_gp_is_installed(tmp_path: Path) -> None:
    # auto was GP wherever torch was installed: the replayed figures (measured without it)
    # then described another sampler than the one a laptop with the gp extra ran. CI installs
    # torch, so this run would be GP's there before the change.
    r = rig(tmp_path, **{"parameters": SMALL, "study.trials": 5, "study.sampler": "auto",
                         "baseline.repeats": 1, "study.design": {"points": 2}})
    assert r.run().completed == 5
    records = [rec for rec in _journal(tmp_path) if rec["kind"] == "search"]
    assert [rec["origin"] for rec in records][-2:] == ["sampler", "sampler"]
    assert {rec["sampler"] for rec in records} == {"tpe"}
