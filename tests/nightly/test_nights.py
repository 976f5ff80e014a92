"""Nights of the study engine on the simulated world (a fake clock, SQLite): which study a night
opens, the warm start, the drift check, the early stop, the night's budget and its record."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune.errors import StudyError
from autotune.experiment import Experiment, parse_experiment
from autotune.platforms.simulated import World
from autotune.report import history
from autotune.study import nightly
from autotune.study import storage as st
from autotune.study.loop import DESIGN_ATTR, completed_search
from autotune.study.night import early_stop, fingerprint, opening, records
from autotune.study.space import settings_key
from tests.nightly.conftest import simulated_doc
from tests.support.simulated import Rig, rig


def _doc(tmp: Path, *, noise: float = 0.02, **study: Any) -> dict[str, Any]:
    """The file of ``_exp``, to edit."""
    doc = simulated_doc(**study)
    doc["name"] = "sim"
    doc["target"]["simulated"].update(noise=noise, state_file=str(tmp / "world.json"))
    doc["measure"] = {"warmup": "2s", "window": "10s"}
    return doc


def _exp(tmp: Path, *, noise: float = 0.02, optimum: dict[str, Any] | None = None,
         **study: Any) -> Experiment:
    doc = _doc(tmp, noise=noise, **study)
    if optimum is not None:
        doc["target"]["simulated"]["optimum"] = optimum
    return parse_experiment(yaml.safe_dump(doc))


def _night(r: Rig, **options: Any) -> nightly.Night:
    opts = nightly.NightOptions(**{"budget": r.exp.study.trials, "top": 2, "repeats": 3,
                                   "extra": 2, **options})
    return nightly.run_night(r.exp, r.url, r.runner(), opts, history.verdict_record)


def _record(night: nightly.Night) -> dict[str, Any]:
    rec: dict[str, Any] = night.studies.search.user_attrs[records.NIGHT_PREFIX + night.id]
    return rec


def test_first_night_starts_the_study_and_the_next_one_continues_it(tmp_path: Path) -> None:
    r = rig(tmp_path, _exp(tmp_path))
    first = _night(r)
    assert first.opening.opened == "new" and first.studies.name == "sim"
    recorded = first.studies.search.user_attrs[opening.ENVIRONMENT_ATTR]
    assert recorded == first.opening.environment.record()
    assert recorded["fields"]["noise"] == 0.02
    rec = _record(first)
    assert rec["status"] == "finished" and rec["search_trials"] == 6
    assert rec["verdict"]["verdict"] == first.verdict["verdict"]
    assert first.drift.status == "skipped"

    second = _night(r)
    assert second.opening.opened == "continued" and second.studies.name == "sim"
    assert _record(second)["search_trials"] == 0
    assert second.budget.text() == "the study's search budget is spent: no search tonight"
    assert len(records.nights(second.studies.storage, "sim")) == 2


def test_the_adopted_settings_made_the_baseline_start_a_new_study(tmp_path: Path) -> None:
    # Review finding: after an ADOPT, docs/nightly.md has the user put the adopted settings in
    # baseline.params. The baseline was not in the study's fingerprint: the next night
    # continued the study, measured no baseline repeats (3 were there, of the old production)
    # and pooled them with the new baseline's runs: a candidate exactly as good as the new
    # production was called better on ~25% of nights, the gain stated against the old one.
    r1 = rig(tmp_path, _exp(tmp_path))
    first = _night(r1)
    assert first.verdict["verdict"] == "adopt", first.verdict["reason"]
    adopted = first.verdict["candidate"]["settings"]
    doc = _doc(tmp_path)
    doc["baseline"] = {**doc.get("baseline", {}), "params": adopted}
    second = _night(rig(tmp_path, parse_experiment(yaml.safe_dump(doc))))
    o = second.opening
    assert o.opened == "new environment" and o.previous == "sim", o
    [change] = o.changes
    assert change.startswith("baseline changed from ") and "(baseline.params)" in change
    baselines = [t.user_attrs["settings"] for t in second.studies.reference.get_trials()
                 if t.user_attrs.get("kind") == "baseline"]
    assert baselines and all(b == adopted for b in baselines), "the new baseline is measured"


def test_a_changed_environment_starts_a_new_study_warm_started_from_the_old(
        tmp_path: Path) -> None:
    r1 = rig(tmp_path, _exp(tmp_path))
    first = _night(r1)
    assert first.verdict["verdict"] == "adopt", first.verdict["reason"]
    adopted = first.verdict["candidate"]["settings"]
    old_trials = len(first.studies.search.get_trials())

    r2 = rig(tmp_path, _exp(tmp_path, noise=0.03))
    second = _night(r2)
    o = second.opening
    assert o.opened == "new environment" and o.previous == "sim"
    assert second.studies.name == f"sim@{o.environment.id}"
    assert o.changes == ("noise: 0.02 -> 0.03",)
    # The adopted recommendation first, then the old study's best, then the design around them.
    warm = [w["settings"] for w in o.warm_start]
    assert warm[0] == adopted and len(warm) == opening.WARM_START
    search = sorted(second.studies.search.get_trials(), key=lambda t: t.number)
    assert [t.user_attrs["origin"] for t in search[:3]] == ["warm-start"] * 3
    assert [t.params for t in search[:3]] == warm
    planned = second.studies.search.user_attrs[DESIGN_ATTR]
    assert [p["origin"] for p in planned[:3]] == ["warm-start"] * 3
    assert all(p["origin"] in ("prior", "design") for p in planned[3:])
    assert len({settings_key(p["settings"]) for p in planned}) == len(planned)
    attr = second.studies.search.user_attrs[opening.WARM_START_ATTR]
    assert attr["from"] == "sim" and attr["changes"] == ["noise: 0.02 -> 0.03"]
    # The old study is kept as it was, and is no longer the current one.
    old = optuna.load_study(study_name="sim", storage=r1.url)
    assert len(old.get_trials()) == old_trials
    assert st.open_existing(r2.exp, r2.url).name == second.studies.name
    # Tonight's drift check measured the adopted settings against production, interleaved.
    assert second.drift.status == "still best", second.drift.text
    drift = [t for t in second.studies.reference.get_trials()
             if t.user_attrs.get("kind") == "drift"]
    by_round: dict[int, set[str]] = {}
    for t in drift:
        by_round.setdefault(t.user_attrs["round"], set()).add(t.user_attrs["candidate"])
    assert by_round == {r: {"production", "recommendation"} for r in (1, 2, 3)}  # --repeats 3
    assert {settings_key(t.user_attrs["settings"]) for t in drift
            if t.user_attrs["candidate"] == "recommendation"} == {settings_key(adopted)}


def _values_cut(doc: dict[str, Any]) -> None:
    doc["parameters"][0]["values"] = [1, 2, 4]  # GOMAXPROCS 8 and 16 dropped


def _window(doc: dict[str, Any]) -> None:
    doc["measure"]["window"] = "15s"


def _query(doc: dict[str, Any]) -> None:
    doc["metrics"]["p99"] = "stress"  # what the simulated world answers besides surface


@pytest.mark.parametrize(("edit", "change"), [
    (_values_cut, "parameter GOMAXPROCS changed from"),
    # Review finding: these continued the study silently, their runs judged with the old ones.
    (_window, "measure.window changed from 10.0 s to 15.0 s"),
    (_query, "metrics.p99: its query changed"),
], ids=["values", "window", "query"])
def test_an_edited_experiment_starts_a_new_study_instead_of_failing_every_night(
        tmp_path: Path, edit: Any, change: str) -> None:
    # Review finding: a parameter's range edited in the CronJob's experiment made every night
    # fail ("started with a different experiment ... run with --new-study"), which the CronJob
    # cannot pass: no night ran, and none was recorded, until someone noticed.
    r1 = rig(tmp_path, _exp(tmp_path))
    first = _night(r1)
    assert first.verdict["verdict"] == "adopt", first.verdict["reason"]
    doc = _doc(tmp_path)
    edit(doc)
    edited = parse_experiment(yaml.safe_dump(doc))
    with pytest.raises(StudyError, match=re.escape(change) + ".*--new-study"):
        _night(rig(tmp_path, edited))  # `autotune run`: refused, as before
    second = _night(rig(tmp_path, edited), accept_edits=True)  # `autotune nightly`
    o = second.opening
    assert o.opened == "new environment" and o.previous == "sim", o
    assert [c for c in o.changes if c.startswith(change)], o.changes
    assert _record(second)["status"] == "finished"
    assert all(opening.in_space(edited, w["settings"]) for w in o.warm_start), o.warm_start


def test_a_new_objective_is_warm_started_only_from_the_adopted_recommendation(
        tmp_path: Path) -> None:
    # Review finding: the old study's values rank another objective; ranked by the new one
    # they queued its worst configurations first (or failed on a second objective).
    first = _night(rig(tmp_path, _exp(tmp_path)))
    assert first.verdict["verdict"] == "adopt", first.verdict["reason"]
    adopted = first.verdict["candidate"]["settings"]
    doc = _doc(tmp_path)
    doc["objective"] = {"maximize": "p99"}
    second = _night(rig(tmp_path, parse_experiment(yaml.safe_dump(doc))), accept_edits=True,
                    confirm=False)
    assert second.opening.opened == "new environment", second.opening
    assert [w["settings"] for w in second.opening.warm_start] == [adopted]
    assert second.opening.warm_start[0]["why"].startswith("the recommendation adopted on night")


def test_drift_is_reported_when_production_became_better(tmp_path: Path) -> None:
    r1 = rig(tmp_path, _exp(tmp_path))
    first = _night(r1)
    assert first.verdict["verdict"] == "adopt", first.verdict["reason"]
    # The service changed under the same environment (not something the target reports):
    # production's settings (GOMAXPROCS unset = 8, no forced GC) are now the best.
    r2 = rig(tmp_path, _exp(tmp_path, optimum={"GOMAXPROCS": 8, "gc": 0}))
    second = _night(r2)
    assert second.opening.opened == "continued"
    assert second.drift.status == "drifted", second.drift.text
    assert second.drift.text.startswith("drifted: production (GOMAXPROCS=unset gc=0) is now "
                                        "significantly better than the last recommendation")
    assert _record(second)["drift"]["status"] == "drifted"


def test_an_environment_seen_before_gets_a_new_study_of_its_own(tmp_path: Path) -> None:
    names = []
    for noise in (0.02, 0.03, 0.02, 0.03):
        r = rig(tmp_path, _exp(tmp_path, noise=noise, trials=2))
        names.append(_night(r, confirm=False).studies.name)
    a = fingerprint.environment(_exp(tmp_path), {"kind": "simulated", "noise": 0.02}).id
    b = fingerprint.environment(_exp(tmp_path), {"kind": "simulated", "noise": 0.03}).id
    assert names == ["sim", f"sim@{b}", f"sim@{a}", f"sim@{b}.2"]


def test_a_study_from_before_night_records_is_continued_and_gets_its_environment(
        tmp_path: Path) -> None:
    r = rig(tmp_path, _exp(tmp_path, trials=2))
    r.run()  # the engine alone, as before: no environment recorded
    assert opening.ENVIRONMENT_ATTR not in r.studies().search.user_attrs
    night = _night(r, confirm=False)
    assert night.opening.opened == "continued" and night.studies.name == "sim"
    assert opening.ENVIRONMENT_ATTR in night.studies.search.user_attrs


def test_the_early_stop_ends_the_search_and_a_resumed_study_stays_stopped(
        tmp_path: Path) -> None:
    exp = _exp(tmp_path, noise=0.0, trials=40, early_stop=3)
    r = rig(tmp_path, exp)
    night = _night(r, confirm=False)
    reason = night.result.stop_reason
    assert reason.startswith("converged: the best"), reason
    done = completed_search(night.studies.search)
    assert done < 40
    # The rule holds on what was recorded: the last 3 search trials were the sampler's and
    # none beat the best before them (noise 0: by anything at all).
    points = early_stop.search_points(exp, night.studies.search)
    assert [p.origin for p in points[-3:]] == ["sampler"] * 3
    before = min(p.value for p in points[:-3] if p.value is not None)
    assert all(p.value is None or p.value >= before for p in points[-3:])

    again = _night(r, confirm=False)
    assert again.result.stop_reason == reason
    assert completed_search(again.studies.search) == done


def test_the_night_fits_its_deadline_confirmation_and_drift_check_included(
        tmp_path: Path) -> None:
    r1 = rig(tmp_path, _exp(tmp_path, trials=6))
    assert _night(r1).verdict["verdict"] == "adopt"
    exp = _exp(tmp_path, noise=0.03, trials=200, deadline="6m")
    r2 = rig(tmp_path, exp)
    start = r2.clock.monotonic()
    night = _night(r2)
    elapsed = r2.clock.monotonic() - start
    assert night.result.stop_reason.startswith("night budget"), night.result.stop_reason
    assert night.drift.status != "skipped" and night.confirmed
    confirms = [t for t in night.studies.reference.get_trials()
                if t.user_attrs.get("kind") == "confirm" and t.state == TrialState.COMPLETE]
    assert len(confirms) >= 3  # round 1 of the sequential confirmation ran after the search
    assert elapsed <= 6 * 60, f"the night took {elapsed:.0f}s of its 360s"
    assert night.cut is None and _record(night)["cut"] is None  # the plan held
    b = night.budget
    # Sequential confirmation: round 1 (2 candidates + the baseline), rounds 2 and 3 of at most
    # the best, the runner-up and the baseline; perhaps one extension round of up to 2 runs of
    # the best and of the baseline; then the drift check's 2 extra runs. Queued: the 3 baseline
    # repeats and the drift check's 3 rounds of 2.
    assert b.reserved == (2 + 1) + 3 * 2 + 4 + 2 and b.queued == 3 + 3 * 2
    assert b.measured.startswith("the longest of the last") and "in sim" in b.measured
    # Trials take what the last night measured, so the plan made at the start is the night.
    assert b.search_trials == completed_search(night.studies.search) > 0


def test_a_confirmation_the_night_has_no_time_for_is_cut_and_its_drift_runs_still_judged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r1 = rig(tmp_path, _exp(tmp_path, trials=6))
    first = _night(r1)
    assert first.verdict["verdict"] == "adopt"  # night 2 checks this for drift
    exp = _exp(tmp_path, noise=0.03, trials=200, deadline="6m")
    r = rig(tmp_path, exp)
    real = nightly.confirm

    # As if the time kept back for the confirmation went elsewhere (a rollout that took
    # minutes, say): it starts a second before the deadline.
    def late(exp: Experiment, studies: st.Studies, runner: Any, **options: Any) -> int:
        assert runner.deadline is not None
        r.clock.sleep(runner.deadline - r.clock.monotonic() - 1)
        return real(exp, studies, runner, **options)

    monkeypatch.setattr(nightly, "confirm", late)
    start = r.clock.monotonic()
    night = _night(r)
    assert r.clock.monotonic() - start <= 6 * 60
    assert night.cut is not None and night.cut.startswith("study.deadline: another run would")
    assert _record(night)["cut"] == night.cut and _record(night)["status"] == "finished"
    assert any(line.startswith("cut short: study.deadline") for line in night.lines())
    def confirms(n: nightly.Night) -> int:
        return sum(t.user_attrs.get("kind") == "confirm" for t in n.studies.reference.trials)

    # Nothing queued past the deadline: only the first night's confirmation runs (if the
    # second night continued its study).
    same = night.studies.name == first.studies.name
    assert confirms(night) == (confirms(first) if same else 0) and (not same or confirms(first))
    # The drift runs measured before the search are judged all the same (one look).
    assert night.drift.status in ("still best", "drifted", "inconclusive"), night.drift.text
    assert night.drift.runs and all(night.drift.runs.values())
    [row] = [h for h in history.rows(records.nights(night.studies.storage, "sim"))
             if h.night == night.id]
    assert row.cut == night.cut
    assert r.world.load()["applied"] is None  # restored


def test_a_night_that_fails_is_recorded_as_failed(tmp_path: Path) -> None:
    exp = _exp(tmp_path)
    r = rig(tmp_path, exp)
    World(tmp_path / "world.json").update(refuse_injection="chaos daemon unreachable")
    with pytest.raises(StudyError, match="in a row failed"):
        _night(r)
    [record] = records.nights(st.open_storage(r.url, 10), "sim")
    assert record["status"] == "failed" and "in a row failed" in record["error"]
    assert "finished" in record and "verdict" not in record


def test_a_window_edited_on_the_upgrade_night_is_seen_through_the_runs_record(
        tmp_path: Path) -> None:
    # Review: a study recorded before the fingerprint had its measurement would have been
    # continued with a new window and the new fingerprint recorded over the old: the change
    # lost. Its runs recorded their warm-up and window (the study's "measure" attr).
    r = rig(tmp_path, _exp(tmp_path))
    first = _night(r)
    recorded = dict(first.studies.search.user_attrs["fingerprint"])
    del recorded["measurement"]  # as an earlier version recorded it
    first.studies.search.set_user_attr("fingerprint", recorded)
    doc = _doc(tmp_path)
    doc["measure"]["window"] = "15s"
    with pytest.raises(StudyError, match=r"measure\.window changed from 10\.0 s to 15\.0 s"):
        st.open_for_run(parse_experiment(yaml.safe_dump(doc)), r.url)
    st.open_for_run(r.exp, r.url)  # the same experiment: continued, and recorded in full
    assert "measurement" in optuna.load_study(study_name="sim", storage=r.url).user_attrs[
        "fingerprint"]
