"""RUNNING trials of another host (issue 16, "Concurrency and files").

``datetime_start`` is only as good as whoever wrote it: Optuna >= 5 stores naive UTC and reads
it back in the reader's zone, but a worker on Optuna < 5 (a database shared across an upgrade)
wrote its own naive local time, which a reader takes for UTC - a live trial of a worker at
UTC-5 then looks 5 h old. So liveness comes from Optuna's heartbeat (the database's clock at
both ends), else from the UTC time autotune's worker recorded itself, and ``datetime_start``
alone never makes a trial an orphan because of a time zone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy
from optuna.trial import TrialState

from autotune.study import storage as st
from tests.support.simulated import experiment

MAX_AGE = 600.0


@pytest.fixture
def timezone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def set_tz(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_tz
    monkeypatch.undo()
    time.tzset()


def _studies(tmp: Path) -> st.Studies:
    return st.open_for_run(experiment(tmp), f"sqlite:///{tmp}/study.db")


def _running(studies: st.Studies, worker: dict[str, object], *, heartbeat: bool,
             written_at_utc_offset_hours: int = 0) -> int:
    """A RUNNING trial as another worker leaves it; ``written_at_utc_offset_hours``: its
    ``datetime_start`` as Optuna < 5 wrote it on a host in that zone (naive local time)."""
    trial = studies.search.ask()
    trial.suggest_int("GOMAXPROCS", 1, 16)
    trial.set_user_attr("worker", worker)
    if heartbeat:
        studies.storage.record_heartbeat(trial._trial_id)
    if written_at_utc_offset_hours:
        with studies.storage.engine.begin() as conn:
            conn.execute(sqlalchemy.text(
                "UPDATE trials SET datetime_start = datetime(datetime_start, :shift) "
                "WHERE trial_id = :id"),
                {"shift": f"{written_at_utc_offset_hours:+d} hours", "id": trial._trial_id})
    return trial._trial_id


def _state(studies: st.Studies, trial_id: int) -> TrialState:
    return studies.storage.get_trial(trial_id).state


def test_a_live_trial_of_an_old_worker_at_utc_minus_5_with_a_heartbeat_is_not_failed(
        tmp_path: Path) -> None:
    studies = _studies(tmp_path)
    trial = _running(studies, {"host": "worker-west", "pid": 1, "start": "1"}, heartbeat=True,
                     written_at_utc_offset_hours=-5)
    assert st.fail_orphans(studies, MAX_AGE) == []
    assert _state(studies, trial) == TrialState.RUNNING


def test_a_live_trial_with_the_workers_own_utc_time_is_not_failed(tmp_path: Path) -> None:
    """No heartbeat row (killed before Optuna's first one, or a storage without them): the
    time autotune's objective recorded in UTC decides."""
    studies = _studies(tmp_path)
    trial = _running(studies, {**st.worker_id(), "host": "worker-west"}, heartbeat=False,
                     written_at_utc_offset_hours=-5)
    assert st.fail_orphans(studies, MAX_AGE) == []
    assert _state(studies, trial) == TrialState.RUNNING


def test_a_trial_whose_heartbeat_stopped_long_ago_is_failed_and_queued_again(
        tmp_path: Path) -> None:
    studies = _studies(tmp_path)
    trial = _running(studies, {"host": "worker-gone", "pid": 1, "start": "1"}, heartbeat=True)
    with studies.storage.engine.begin() as conn:
        conn.execute(sqlalchemy.text(
            "UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, '-1 hour')"))
    done = st.fail_orphans(studies, MAX_AGE)
    assert _state(studies, trial) == TrialState.FAIL
    assert len(done) == 1 and "heartbeat" in done[0], done
    waiting = studies.search.get_trials(states=[TrialState.WAITING])
    assert len(waiting) == 1  # its settings, once more


def test_without_heartbeat_or_utc_time_a_time_zone_alone_makes_no_orphan(tmp_path: Path) -> None:
    studies = _studies(tmp_path)
    trial = _running(studies, {"host": "worker-far", "pid": 1, "start": "1"}, heartbeat=False,
                     written_at_utc_offset_hours=-12)
    assert st.fail_orphans(studies, MAX_AGE) == []
    assert _state(studies, trial) == TrialState.RUNNING


def test_the_issues_case_a_utc_worker_seen_from_utc_plus_2(
        tmp_path: Path, timezone: Callable[[str], None]) -> None:
    """A UTC worker's live trial, judged by a host at UTC+2 (Optuna >= 5 already reads its
    UTC start right; kept so that it stays so)."""
    timezone("UTC")
    studies = _studies(tmp_path)
    trial = _running(studies, {"host": "worker-utc", "pid": 1, "start": "1"}, heartbeat=True)
    timezone("Etc/GMT-2")  # UTC+2 (POSIX signs are inverted)
    assert st.fail_orphans(studies, MAX_AGE) == []
    assert _state(studies, trial) == TrialState.RUNNING
