"""Night records: what each run did, kept in the search study's user attrs so that the study
carries its own history (``autotune.report.history`` reads them) and the next night can find the
last adopted recommendation (for its warm start and its drift check).

**Night records.** Every run writes the search study's user attr ``night:<id>`` when it starts,
and again when it ends: environment, how the study was chosen, the budget plan, search trials
run, why the search stopped, the verdict with the objective's medians and interval, the drift
check, and the status (running, finished, interrupted, failed). ``autotune.report.history``
reads them.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from autotune.study import storage as st

NIGHT_PREFIX = "night:"


def nights(storage: optuna.storages.BaseStorage, base: str) -> list[dict[str, Any]]:
    """Every night recorded in the experiment's studies, oldest first."""
    out = []
    for s in st.experiment_studies(storage, base):
        for key, value in s.user_attrs.items():
            if key.startswith(NIGHT_PREFIX) and isinstance(value, Mapping):
                out.append({**value, "study": s.study_name})
    return sorted(out, key=lambda n: str(n.get("started", "")))


def save(studies: st.Studies, record: Mapping[str, Any]) -> None:
    """Write the night's record over its earlier state (a run saves it when it starts, so a
    night killed mid-search still shows as "running", and again when it ends)."""
    studies.search.set_user_attr(NIGHT_PREFIX + str(record["night"]), dict(record))


def last_recommendation(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The most recent finished night whose verdict was "adopt": night, study, settings."""
    for n in sorted(records, key=lambda n: str(n.get("started", "")), reverse=True):
        verdict = n.get("verdict") or {}
        candidate = verdict.get("candidate") or {}
        if (n.get("status") == "finished" and verdict.get("verdict") == "adopt"
                and isinstance(candidate.get("settings"), Mapping)):
            return {"night": n.get("night"), "study": n.get("study"),
                    "settings": dict(candidate["settings"])}
    return None


def night_id(now: dt.datetime | None = None) -> str:
    """The start time, and a random tail: several workers (or runs) may start together."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}.{secrets.token_hex(3)}"


def timestamp() -> str:
    # Microseconds: nights are ordered by their start.
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")
