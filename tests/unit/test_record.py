"""The trial record's stored form: reports, history and ``status`` read these dicts back from the
journal and the Optuna user attrs (also ones written before ``TrialRecord`` existed), so its keys
and value shapes must not move."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna

from autotune.study.journal import Journal
from autotune.study.kinds import TrialKind
from autotune.study.loop import trial_summary
from autotune.study.record import (
    Attempt,
    InjectionRecord,
    LoadCheck,
    MeasuredWindow,
    Measurement,
    TrialRecord,
)

BASE: dict[str, Any] = {
    "study": "demo@local", "number": 3, "kind": "search",
    "settings": {"GOMAXPROCS": 4, "GOGC": None}, "env": {"GOMAXPROCS": "4", "GOGC": None},
    "started": 1000.0, "sampler": "tpe", "autotune_version": "1.2.3", "host": "box",
    "experiment_hash": "abc", "target": "local",
}


def _started() -> TrialRecord:
    return TrialRecord(
        study="demo@local", number=3, kind=TrialKind.SEARCH,
        settings={"GOMAXPROCS": 4, "GOGC": None}, env={"GOMAXPROCS": "4", "GOGC": None},
        started=1000.0, sampler="tpe", autotune_version="1.2.3", host="box",
        experiment_hash="abc", target="local",
    )


def _complete() -> TrialRecord:
    r = _started()
    r.retry_of, r.origin, r.why = 1, "design", "a corner of the space"
    r.repaired_from = {"GOMAXPROCS": 2}
    r.measurement = Measurement(
        phases={"apply": 1.5, "warmup": 3.0},
        timeline=[("apply", 0.0, 1.5), ("warmup", 1.5, 2.0), ("warmup", 9.0, 1.0)],
        live={"pid": 42},
        attempts=[Attempt(1010.0, 1040.0, 2.512), Attempt(1050.0, 1080.0, None)],
        injections=[InjectionRecord("s-1", 1010.0, {"pods": ["a"]}, recovered=1041.0),
                    InjectionRecord("s-2", 1050.0, {})],
        changes=[{"pods": "replaced"}],
        queries={"p99": "histogram_quantile(0.99, ...)"},
        window=MeasuredWindow(1050.0, 1080.0, 30.0),
        schedtrace={"summary": {"runqueue": 1.0}},
        insight={"heat": {}, "cpu": {}, "unavailable": {}},
        metrics={"p99": 0.25}, unavailable={"rps": "no data"},
    )
    r.load = LoadCheck("rps", 99.0, 100.0, deviation=-0.01)
    r.state, r.values, r.constraints, r.feasible = "COMPLETE", [0.25], {"p99 <= 1": -0.75}, True
    r.finished, r.seconds = 1090.0, 90.0
    return r


def test_a_complete_record_keeps_the_stored_shape() -> None:
    assert _complete().as_attrs() == {
        **BASE,
        "retry_of": 1, "origin": "design", "why": "a corner of the space",
        "repaired_from": {"GOMAXPROCS": 2},
        "phases": {"apply": 1.5, "warmup": 3.0},
        "timeline": [["apply", 0.0, 1.5], ["warmup", 1.5, 2.0], ["warmup", 9.0, 1.0]],
        "live": {"pid": 42},
        "attempts": [{"window": [1010.0, 1040.0], "foreign_cores": 2.512},
                     {"window": [1050.0, 1080.0], "foreign_cores": None}],
        "injections": [{"id": "s-1", "started": 1010.0, "pods": ["a"], "recovered": 1041.0},
                       {"id": "s-2", "started": 1050.0}],
        "changes": [{"pods": "replaced"}],
        "queries": {"p99": "histogram_quantile(0.99, ...)"},
        "window": {"start": 1050.0, "end": 1080.0, "seconds": 30.0},
        "schedtrace": {"summary": {"runqueue": 1.0}},
        "insight": {"heat": {}, "cpu": {}, "unavailable": {}},
        "metrics": {"p99": 0.25}, "unavailable": {"rps": "no data"},
        "load": {"metric": "rps", "rate": 99.0, "baseline": 100.0, "deviation": -0.01},
        "state": "COMPLETE", "values": [0.25], "constraints": {"p99 <= 1": -0.75},
        "feasible": True, "finished": 1090.0, "seconds": 90.0,
    }


def test_a_field_appears_once_its_step_ran() -> None:
    """A trial that failed applying its settings has phases but no live details, attempts or
    metrics; one whose first stressed window failed has an empty ``attempts`` list; a load
    check without a baseline has no deviation; falsy outcomes are still stored."""
    r = _started()
    m = r.measurement
    m.phases, m.timeline = {"apply": 0.5}, [("apply", 0.0, 0.5)]
    r.state, r.failure, r.finished, r.seconds = "FAIL", "apply: no", 1001.0, 1.0
    assert r.as_attrs() == {**BASE, "phases": {"apply": 0.5}, "timeline": [["apply", 0.0, 0.5]],
                            "state": "FAIL", "failure": "apply: no", "finished": 1001.0,
                            "seconds": 1.0}
    m.live, m.attempts, m.injections, m.metrics, m.unavailable = {}, [], [], {}, {}
    r.load = LoadCheck("rps", 0.0, None)
    r.constraints, r.feasible = {}, False
    out = r.as_attrs()
    assert out["live"] == {} and out["attempts"] == [] and out["injections"] == []
    assert out["load"] == {"metric": "rps", "rate": 0.0, "baseline": None}
    assert out["metrics"] == {} and out["constraints"] == {} and out["feasible"] is False
    assert "changes" not in out and "window" not in out and "values" not in out


def test_the_kind_is_stored_as_its_plain_string() -> None:
    assert TrialKind.BASELINE == "baseline" and TrialKind.CONFIRM == "confirm"
    stored = _started().as_attrs()["kind"]
    assert type(stored) is str and stored == "search"
    assert json.dumps(TrialKind.DRIFT) == '"drift"'


def test_a_record_round_trips_through_the_journal_and_the_user_attrs(tmp_path: Path) -> None:
    stored = _complete().as_attrs()
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append(stored)
    assert list(journal.entries()) == [stored]

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'db.sqlite'}")
    trial = study.ask()
    trial.set_user_attr("kind", TrialKind.SEARCH.value)
    trial.set_user_attr("record", stored)
    study.tell(trial, 0.25)
    [frozen] = study.get_trials()
    assert frozen.user_attrs["record"] == stored
    # What status and the reports read of it.
    assert trial_summary(frozen)["metrics"] == {"p99": 0.25}
    assert trial_summary(frozen)["kind"] == "search"
