"""Persisted studies: where they live, how a run finds its own, and what a dead run left RUNNING.

A run uses two Optuna studies in one storage:

- ``<name>``: the search. Only sampler-chosen trials (and their retries) are here, so the
  sampler never sees a baseline whose settings ("variable unset") are outside the space.
- ``<name>:reference``: fixed configurations measured for comparison: the baseline repeats
  (and, later, confirmation re-runs). Each carries its settings in user attrs.

``--new-study`` starts ``<name>@<UTC time>``; a run whose environment differs from the current
study's (``open_for_run``'s ``diverged``, see ``autotune.study.night.opening``) starts
``<name>@<environment id>``. The study of a name created last is the current one; older ones are
kept.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import socket
import sqlite3
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.exc import SQLAlchemyError

from autotune import __version__, pids, redaction
from autotune.errors import StorageError, StudyError
from autotune.experiment.models import Experiment
from autotune.study.kinds import TrialKind
from autotune.study.objective import directions
from autotune.study.optuna_private import RDB_PRIVATE_ENTRY_POINTS, study_id, trial_id
from autotune.study.space import describe_space, settings_key

if TYPE_CHECKING:
    # What BaseStorage.get_all_studies returns; Optuna does not export the name.
    from optuna.study._frozen import FrozenStudy

log = logging.getLogger(__name__)

REFERENCE_SUFFIX = ":reference"


def results_dir(exp: Experiment) -> Path:
    return Path("results") / exp.name


def storage_url(exp: Experiment, override: str | None = None) -> str:
    """--storage, else $AUTOTUNE_STORAGE (how a CronJob passes a PostgreSQL URL from a Secret),
    else the experiment's study.storage, else SQLite under results/."""
    return (override or os.environ.get("AUTOTUNE_STORAGE") or exp.study.storage
            or f"sqlite:///{results_dir(exp)}/study.db")


SQLITE_BUSY_TIMEOUT = 60.0
"""Seconds a process waits for another's lock on a SQLite study before it fails with "database
is locked" (``?timeout=SECONDS`` on the URL changes it)."""


def open_storage(url: str, heartbeat: float) -> RDBStorage:
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:///"):
        parsed = sa.engine.make_url(url)
        path = Path(parsed.database or "")
        path.parent.mkdir(parents=True, exist_ok=True)
        # A second reader (status while running) must wait for the writer, not fail; a
        # ``?timeout=SECONDS`` on the URL is SQLite's own setting and wins (SQLAlchemy passes it
        # to sqlite3.connect; connect_args would override it).
        if "timeout" not in parsed.query:
            kwargs["engine_kwargs"] = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT}}
    interval = max(1, round(heartbeat))
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                # Heartbeats are "experimental" since Optuna 2.8; we depend on them knowingly.
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return _Storage(
                    url,
                    heartbeat_interval=interval,
                    grace_period=interval * 6,
                    heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=1),
                    **kwargs,
                )
        except Exception as e:  # SQLAlchemy raises many types for a bad URL or a dead server
            # Workers starting together race to create the schema; the loser retries.
            if attempt == 2 or "already exists" not in str(e):
                cause = getattr(e, "orig", None) or e  # the database's words, not the SQL
                # Which may quote the URL, or a piece of it (a malformed host, a bad port).
                why = redaction.scrub(str(cause), redaction.secrets_of(url))
                if isinstance(cause, ModuleNotFoundError) or "import DB access module" in why:
                    # A PostgreSQL URL without its driver (Optuna says only "Failed to
                    # import DB access module").
                    why += (" (the driver is not installed: pip install 'autotune[postgres]' "
                            "for postgresql://)")
                raise StudyError([f"cannot open the study storage {redact(url)}: {why}"]) \
                    from None
            time.sleep(0.5)
    raise AssertionError("unreachable")


_DRIVER_ERRORS = (SQLAlchemyError, sqlite3.Error, optuna.exceptions.StorageInternalError)
"""What a database under Optuna raises: SQLAlchemy wraps the driver's error (sqlite3,
psycopg2) in one of its own, and Optuna wraps a failed commit in StorageInternalError."""


def _database_words(e: BaseException) -> str:
    """The first line the database itself said (``database is locked``, ``disk I/O error``),
    not the SQL statement SQLAlchemy appends, with any secret scrubbed."""
    seen: BaseException | None = e
    while isinstance(seen, _DRIVER_ERRORS):
        inner = getattr(seen, "orig", None) or seen.__cause__
        if not isinstance(inner, BaseException):
            break
        seen = inner
    words = str(seen or e).strip().splitlines()
    return redaction.scrub(words[0] if words else type(e).__name__)


def _translated(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: RDBStorage, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except _DRIVER_ERRORS as e:
            raise StorageError(_database_words(e)) from e
    return call


class _Storage(RDBStorage):
    """Optuna's RDB storage whose every entry point raises ``StorageError`` in place of the
    database driver's exception.

    Wrapped here, where the database is, so that no caller has to know SQLAlchemy: the storage
    is called from everywhere in a run (Optuna's loop, every user attr, heartbeats, status,
    report) and each of those now fails with one of our errors, whose message the CLI prints as
    it is. Internal helpers are left alone: Optuna catches some of their errors itself (a
    duplicated study, a retried deadlock)."""


for _name in [n for n, v in vars(RDBStorage).items()
              if callable(v) and not n.startswith("_")] + list(RDB_PRIVATE_ENTRY_POINTS):
    setattr(_Storage, _name, _translated(getattr(RDBStorage, _name)))


def redact(url: str) -> str:
    """A storage URL without its password (``user:***@``, ``?password=***``,
    ``sslpassword=***``), for messages and records; a malformed one too (``postgresql//...``,
    no scheme at all), which SQLAlchemy refuses right next to it."""
    return redaction.url(url)


@dataclass
class Studies:
    search: optuna.Study
    reference: optuna.Study
    storage: RDBStorage
    url: str
    previous: optuna.Study | None = None
    """The study this run's new one replaced because its environment differed (else None)."""
    created: bool = False
    """This call created the search study (rather than resuming or joining it)."""

    @property
    def name(self) -> str:
        return self.search.study_name


def experiment_studies(storage: optuna.storages.BaseStorage, base: str) -> list[FrozenStudy]:
    """The search studies of an experiment (``<base>`` and ``<base>@...``), oldest first. Their
    user attrs come along; their trials do not (cheap on a storage with many studies)."""
    return [s for s in storage.get_all_studies()
            if (s.study_name == base or s.study_name.startswith(base + "@"))
            and not s.study_name.endswith(REFERENCE_SUFFIX)]


def _current(storage: RDBStorage, base: str) -> FrozenStudy | None:
    # Creation order, not the first trial's start: a study created a moment ago has no trial
    # yet (or only queued ones) and is still the newest.
    return max(experiment_studies(storage, base), key=study_id, default=None)


def _current_name(storage: RDBStorage, base: str) -> str | None:
    current = _current(storage, base)
    return None if current is None else current.study_name


def _replacement_name(storage: RDBStorage, base: str, suffix: str, after: int) -> str:
    """``<base>@<suffix>``, or ``.2``, ``.3``... when an older study (an environment the target
    had before, and left) holds that name. One created after ``after`` (the study being
    replaced) is another worker's replacement for the same environment: join it."""
    taken = {s.study_name: study_id(s) for s in experiment_studies(storage, base)}
    n = 1
    while True:
        name = f"{base}@{suffix}" + (f".{n}" if n > 1 else "")
        if name not in taken or taken[name] > after:
            return name
        n += 1


def fingerprint(exp: Experiment) -> dict[str, Any]:
    return {
        "space": describe_space(exp),
        "directions": directions(exp),
        "objective": [g.label for g in exp.goals],
        "constraints": list(exp.constraints),
        # With several storms the plain metric is their combination: a study measured under
        # other storms, or combined otherwise, measured something else.
        **({"scenarios": [sc.name for sc in exp.chaos.scenarios],
            "combine": exp.chaos.combine} if exp.chaos.scenarios else {}),
        "measurement": measurement(exp),
    }


def measurement(exp: Experiment) -> dict[str, Any]:
    """How a trial is measured, beyond the space and the goals: the same metric name read by
    another query, over another window or under another load measures something else, and
    pooled with the study's runs it would be judged as if it did not (review finding: such
    edits continued the study silently)."""
    k8s, local = exp.target.kubernetes, exp.target.local
    load = (k8s.load if k8s is not None else local.load if local is not None else None)
    shown: dict[str, Any] | None = None
    if load is not None:
        # What was set, not every default (a field a later version adds must not fork every
        # study), and never a secret: header names, the body's size, URLs without passwords or
        # secret query values (the study database and the night's record keep this).
        shown = redaction.load_spec(load.model_dump(mode="json", exclude_defaults=True))
    return {"warmup": exp.measure.warmup, "window": exp.measure.window,
            "queries": {name: exp.metric(name).query for name in sorted(exp.required_metrics)
                        if name in exp.metrics},
            "load": shown}


def baseline_moved(exp: Experiment, reference: Sequence[FrozenTrial]) -> str | None:
    """How the study's baseline differs from the experiment's ``baseline.params`` (after an
    ADOPT, docs/nightly.md has the user put the adopted settings there), or None. Not in the
    fingerprint, yet the study's baseline repeats were measured with the old settings: pooled
    with the new baseline's runs they would mix two production settings into one "baseline"
    (a candidate as good as the new one called better, the gain overstated)."""
    now = settings_key(exp.baseline_settings())
    before = sorted({settings_key(t.user_attrs.get("settings") or {})
                     for t in reference
                     if t.user_attrs.get("kind") == TrialKind.BASELINE} - {now})
    if not before:
        return None
    return (f"baseline changed from {', '.join(before)} to {now} (baseline.params): the "
            "study's baseline runs measured the old one")


def _differences(old: dict[str, Any], new: dict[str, Any], *,
                 measured: bool = True) -> list[str]:
    """How fingerprint ``new`` differs from ``old``; without ``measured``, only in what maps a
    study's settings to the environment and ranks them (space, objective, constraints). A
    fingerprint recorded before ``measurement`` existed is not compared on it."""
    changes = []
    if old.get("directions") != new["directions"] or old.get("objective") != new["objective"]:
        changes.append(f"objective changed from {old.get('directions')} {old.get('objective')} "
                       f"to {new['directions']} {new['objective']}")
    old_space, new_space = old.get("space", {}), new["space"]
    for name in sorted(old_space.keys() | new_space.keys()):
        if name not in new_space:
            changes.append(f"parameter {name} was removed")
        elif name not in old_space:
            changes.append(f"parameter {name} was added")
        elif old_space[name] != new_space[name]:
            changes.append(f"parameter {name} changed from {old_space[name]} to {new_space[name]}")
    if old.get("constraints", []) != new["constraints"]:
        changes.append(f"constraints changed from {old.get('constraints')} to "
                       f"{new['constraints']}")
    was, now = old.get("measurement"), new.get("measurement")
    if measured and isinstance(was, dict) and isinstance(now, dict):
        # Only what the old record holds (a study's first record after an upgrade has only the
        # warm-up and window its runs recorded: open_for_run).
        for key in ("warmup", "window"):
            if key in was and was.get(key) != now.get(key):
                changes.append(f"measure.{key} changed from {was.get(key)} s to {now.get(key)} s")
        queries_was, queries_now = was.get("queries") or {}, now.get("queries") or {}
        for name in sorted(queries_was.keys() & queries_now.keys()):
            if queries_was[name] != queries_now[name]:
                changes.append(f"metrics.{name}: its query changed")
        if "load" in was and was.get("load") != now.get("load"):
            changes.append(f"the load changed from {was.get('load')} to {now.get('load')}")
    return changes


def open_for_run(
    exp: Experiment, url: str, *, new_study: bool = False,
    diverged: Callable[[optuna.Study, list[str]], str | None] | None = None,
    accept_edits: bool = False,
) -> Studies:
    """The studies this run continues, or new ones.

    ``diverged(current, changes)`` decides whether the current study is continued: None
    continues it; a suffix starts ``<name>@<suffix>`` instead (the current one is kept and
    returned as ``previous``). ``changes``: how its baseline differs from the experiment's
    (``baseline_moved``; without ``diverged`` such a study is refused) and, with
    ``accept_edits``, how the experiment differs from the one the study was measured with
    (``fingerprint``). Without ``accept_edits`` (``autotune run``: someone is there to choose)
    an edited experiment is refused, naming each change and ``--new-study``; ``autotune
    nightly`` accepts them: nobody is there, and refusing failed every night until someone
    started a new study (review finding).
    """
    storage = open_storage(url, exp.study.heartbeat)
    current = _current(storage, exp.name)
    fp = fingerprint(exp)
    search: optuna.Study | None = None
    previous = None
    name = exp.name
    if current is not None and not new_study:
        loaded = optuna.load_study(study_name=current.study_name, storage=storage)
        recorded = loaded.user_attrs.get("fingerprint")
        if (recorded is None and not loaded.get_trials(deepcopy=False)
                and [d.name.lower() for d in loaded.directions] == directions(exp)):
            # A run killed between creating the study and recording what it is for.
            loaded.set_user_attr("fingerprint", fp)
            loaded.set_user_attr("experiment", exp.name)
            loaded.set_user_attr("autotune_version", __version__)
            recorded = fp
        if (isinstance(recorded, dict) and "measurement" not in recorded
                and isinstance(loaded.user_attrs.get("measure"), dict)):
            # Recorded before the measurement was: its runs recorded their warm-up and window.
            runs = loaded.user_attrs["measure"]
            recorded = {**recorded, "measurement": {
                k: runs[k] for k in ("warmup", "window") if k in runs}}
        edits = _differences(recorded or {}, fp)
        moved = baseline_moved(exp, _reference_trials(storage, loaded))
        changes = [*edits, *([moved] if moved is not None else [])]
        # ``diverged`` decides on a moved baseline always, on edits only if they are accepted.
        refused = [*([] if diverged is not None and accept_edits else edits),
                   *([moved] if moved is not None and diverged is None else [])]
        if refused:
            raise StudyError(
                [f"the study {current.study_name!r} in {redact(url)} was started with a "
                 f"different experiment: {c}" for c in refused]
                + ["run with --new-study to start a new study (the old one is kept), or use "
                   "--storage to put it elsewhere"]
            )
        suffix = diverged(loaded, changes) if diverged is not None else None
        if suffix is None:
            search = loaded
            if recorded != fp:  # an older version's record: compared on what it lacked from now
                loaded.set_user_attr("fingerprint", fp)
        else:
            previous = loaded
            name = _replacement_name(storage, exp.name, suffix, study_id(current))
    elif current is not None:
        name = f"{exp.name}@{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%SZ')}"
    created = False
    if search is None:
        try:
            search = optuna.create_study(study_name=name, storage=storage,
                                         directions=directions(exp))
            created = True
        except optuna.exceptions.DuplicatedStudyError:
            # Another worker created it a moment ago: join it (it has the same fingerprint
            # unless the experiment files differ, which the next run will report).
            search = optuna.load_study(study_name=name, storage=storage)
        search.set_user_attr("fingerprint", fp)
        search.set_user_attr("experiment", exp.name)
        search.set_user_attr("autotune_version", __version__)
    reference = optuna.create_study(
        study_name=search.study_name + REFERENCE_SUFFIX, storage=storage,
        directions=directions(exp), load_if_exists=True,
    )
    return Studies(search=search, reference=reference, storage=storage, url=url,
                   previous=previous, created=created)


def _reference_trials(storage: optuna.storages.BaseStorage,
                      search: optuna.Study) -> list[FrozenTrial]:
    reference = _load_reference(storage, search.study_name)
    return [] if reference is None else reference.get_trials(deepcopy=False)


def _load_reference(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study | None:
    """The reference study of the search study ``name``; None for a run killed before it was
    made (no baseline measured)."""
    try:
        return optuna.load_study(study_name=name + REFERENCE_SUFFIX, storage=storage)
    except KeyError:
        return None


def missing_database(url: str) -> str | None:
    """Why a SQLite URL names no database yet, or None. Opening it would create an empty file
    (the read-only commands must not: a mistyped path would leave one behind and send the reader
    looking for a study that was never there)."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        return None  # not a URL at all: opening it says so (``open_storage``)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = Path(parsed.database)
    if path.exists():
        return None
    first = "run `autotune run` with this experiment first, or point --storage at the database"
    if path.is_absolute():
        return f"no study database at {path}: {first}"
    return (f"no study database at {path} (relative to {os.getcwd()}): {first} (an absolute "
            "path needs four slashes: sqlite:////var/lib/autotune/study.db)")


def open_existing(exp: Experiment, url: str, *, as_measured: bool = False,
                  measuring: bool = False) -> Studies:
    """The experiment's current studies. ``as_measured``: refuse them when the file's space,
    objective or constraints are no longer what the study was measured with (``fingerprint``),
    for the commands that act through the file's parameters (export, confirm): a parameter
    added since would be exported as unset (its env entry deleted in production), a renamed
    ``env`` would carry the measured value to another variable. A study that recorded no
    fingerprint (none before its first trial) is not refused. ``measuring`` (confirm, which
    adds runs): also how trials are measured (``measurement``)."""
    missing = missing_database(url)
    if missing is not None:
        raise StudyError([missing])
    storage = open_storage(url, exp.study.heartbeat)
    current = _current_name(storage, exp.name)
    if current is None:
        raise StudyError([f"no study named {exp.name!r} in {redact(url)}: "
                          "run `autotune run` with this experiment first"])
    search = optuna.load_study(study_name=current, storage=storage)
    recorded = search.user_attrs.get("fingerprint")
    changes = (_differences(recorded, fingerprint(exp), measured=measuring)
               if as_measured and recorded else [])
    if changes:
        raise StudyError(
            [f"the study {current!r} in {redact(url)} was measured with a different "
             f"experiment: {c}" for c in changes]
            + ["its settings are applied through this file's parameters: put the file back as "
               "the study was measured, or `autotune run` the changed one (a new study)"])
    reference = _load_reference(storage, current) or optuna.create_study(
        study_name=current + REFERENCE_SUFFIX, storage=storage, directions=directions(exp),
        load_if_exists=True)
    return Studies(search=search, reference=reference, storage=storage, url=url)


# --- trials left RUNNING by a dead process -------------------------------------------------

def worker_id() -> dict[str, Any]:
    """Who runs a trial, recorded in its user attrs when it starts: host, PID and process start
    (a dead worker on this host), and the start in UTC seconds (``fail_orphans``)."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": pids.start_time(pid),
            "started_utc": round(time.time(), 3)}


def _alive(worker: dict[str, Any]) -> bool:
    return pids.alive(int(worker.get("pid", -1)), worker.get("start") or "?")


def retry(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue the trial's settings once more (Optuna's callback keeps the retry history)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(max_retry=1)(study, trial)


ZONES_APART = 26 * 3600.0
"""The most two hosts' local times differ (UTC-12 to UTC+14)."""


def _heartbeat_ages(storage: RDBStorage, trial_ids: list[int]) -> dict[int, float]:
    """Seconds since each trial's last Optuna heartbeat (trials without one are left out).
    Both ends are the database's clock (``now()``, as Optuna's own stale-trial check), so
    neither the workers' time zones nor their clocks matter."""
    if not trial_ids:
        return {}
    beats = sa.table("trial_heartbeats", sa.column("trial_id", sa.Integer),
                     sa.column("heartbeat", sa.DateTime))
    try:
        with storage.engine.connect() as conn:
            now = conn.execute(sa.select(sa.func.now())).scalar()
            rows = conn.execute(sa.select(beats.c.trial_id, beats.c.heartbeat)
                                .where(beats.c.trial_id.in_(trial_ids))).all()
    except _DRIVER_ERRORS as e:
        raise StorageError(_database_words(e)) from e
    if not isinstance(now, dt.datetime):
        return {}
    now = now.replace(tzinfo=None)  # PostgreSQL's is aware, the column is not (as in Optuna)
    return {int(tid): (now - beat).total_seconds() for tid, beat in rows
            if isinstance(beat, dt.datetime)}


def _orphaned(t: FrozenTrial, heartbeat_age: float | None, grace: float,
              max_age_seconds: float) -> str | None:
    """Why a RUNNING trial of a worker that is not on this host (or whose process lives) is an
    orphan, or None. The evidence, best first: Optuna's heartbeat; the UTC time autotune's
    worker recorded (``worker_id``); ``datetime_start``, which Optuna >= 5 stores in UTC but
    Optuna < 5 stored in its host's local time (read back as UTC): a worker at UTC-5 would look
    5 h older than it is, so there a trial must be older by more than any two zones differ."""
    if heartbeat_age is not None:
        if heartbeat_age > grace:
            return f"no heartbeat from its worker for {heartbeat_age:.0f}s"
        return None
    started = (t.user_attrs.get("worker") or {}).get("started_utc")
    if isinstance(started, int | float):
        age = time.time() - started
        limit = max_age_seconds
    elif t.datetime_start is not None:
        age = (dt.datetime.now() - t.datetime_start).total_seconds()
        limit = max_age_seconds + ZONES_APART
    else:
        return None
    if age > limit:
        return f"still RUNNING after {age:.0f}s, longer than any trial can take"
    return None


def fail_orphans(studies: Studies, max_age_seconds: float) -> list[str]:
    """Fail RUNNING trials whose process is gone (same host), whose heartbeat stopped, or that
    are older than any trial can be (another host; see ``_orphaned``), and queue their
    settings once more."""
    done = []
    host = socket.gethostname()
    running = [(study, t) for study in (studies.search, studies.reference)
               for t in study.get_trials(deepcopy=False, states=[TrialState.RUNNING])]
    ages = _heartbeat_ages(studies.storage, [trial_id(t) for _, t in running])
    interval = studies.storage.heartbeat_interval
    grace = float(studies.storage.grace_period or 2 * interval) if interval else max_age_seconds
    for study, t in running:
        worker = t.user_attrs.get("worker") or {}
        if worker.get("host") == host and not _alive(worker):
            reason: str | None = f"the process running it (pid {worker.get('pid')}) died"
        else:
            reason = _orphaned(t, ages.get(trial_id(t)), grace, max_age_seconds)
        if reason is not None:
            studies.storage.set_trial_user_attr(trial_id(t), "failure", reason)
            if studies.storage.set_trial_state_values(trial_id(t), state=TrialState.FAIL):
                retry(study, studies.storage.get_trial(trial_id(t)))
                done.append(f"trial {t.number} of {study.study_name}: {reason}; queued again")
    return done
