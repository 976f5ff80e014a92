"""Where and how the numbers were measured, from what the run recorded. Pure.

Never invented: what the study does not hold is "not recorded".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.experiment.models import Burst, Experiment
from autotune.report.model import Environment

NOT_RECORDED = "not recorded"


def environment(
    exp: Experiment,
    *,
    status: Mapping[str, Any],
    attrs: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    started: Sequence[str],
    generated: str,
    version: str,
) -> Environment:
    """``status``: status_data(); ``attrs``: the search study's user attrs; ``records``: every
    trial's record; ``started``: ISO start times of the trials."""
    target = dict(attrs.get("target") or {})
    first_last = sorted(started)
    return Environment(
        target_kind=exp.target.kind,
        target=target,
        cpu_limit=_cpu_limit(exp, target),
        go_version=_go_version(target, records),
        gomaxprocs_default=_gomaxprocs_default(target, records),
        autotune_version=version,
        measured_with=tuple(sorted({str(r["autotune_version"]) for r in records
                                    if r.get("autotune_version")})),
        sampler=str(status.get("sampler") or attrs.get("sampler") or NOT_RECORDED),
        stress=_stress(attrs.get("chaos") or exp.chaos.model_dump(mode="json")),
        measure=_measure(attrs.get("measure") or exp.measure.model_dump(mode="json")),
        study=str(status["study"]),
        storage=str(status.get("storage", NOT_RECORDED)),
        hosts=tuple(sorted({str(r["host"]) for r in records if r.get("host")})),
        first_trial=first_last[0] if first_last else None,
        last_trial=first_last[-1] if first_last else None,
        generated=generated,
    )


# What the targets record (targets/kubernetes.py and targets/local.py describe(); the local
# target's live details): kubernetes "cpu_limit" and "gomaxprocs_default"; local "cpus",
# "isolation", and per trial "go_version" and "gomaxprocs_effective".


def _cpu_limit(exp: Experiment, target: Mapping[str, Any]) -> str:
    if target.get("cpu_limit") not in (None, ""):
        return f"{target['cpu_limit']} (limits.cpu of the container)"
    if exp.target.replay is not None:
        cpus = exp.target.replay.cpus
        return ("not recorded (target.replay.cpus)" if cpus is None
                else f"{cpus} CPU (when the grid was recorded: target.replay.cpus)")
    if target.get("cpus") is not None or exp.target.local is not None:
        cpus = target.get("cpus", exp.target.local.cpus if exp.target.local else None)
        how = target.get("isolation")
        return f"{cpus} CPU" + (f" ({how})" if how else " (target.local.cpus)")
    if exp.target.simulated is not None:
        return "none (simulated target)"
    if exp.target.kubernetes is not None and target:
        return "none (the container has no CPU limit)"
    return NOT_RECORDED


def _live(records: Sequence[Mapping[str, Any]], key: str, kind: str | None = None) -> list[str]:
    return sorted({str(live[key]) for r in records
                   if (kind is None or r.get("kind") == kind)
                   and isinstance(live := r.get("live"), dict) and live.get(key) is not None})


def _go_version(target: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    if target.get("go_version"):
        return str(target["go_version"])
    seen = _live(records, "go_version")
    return ", ".join(seen) if seen else NOT_RECORDED


def _gomaxprocs_default(target: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """What GOMAXPROCS the service ran with when the variable was unset (the baseline)."""
    if target.get("gomaxprocs_default"):
        return str(target["gomaxprocs_default"])
    seen = _live(records, "gomaxprocs_effective", "baseline")
    return f"{', '.join(seen)} (read from the service in the baseline runs)" if seen \
        else NOT_RECORDED


def _stress(chaos: Mapping[str, Any]) -> str:
    scenarios = chaos.get("scenarios") or []
    if scenarios:
        how = chaos.get("combine", "worst")
        return f"{len(scenarios)} scenarios, combined by {how}: " + "; ".join(
            f"{s.get('name')}: {_storm(s)}" for s in scenarios)
    return _storm(chaos)


def _storm(spec: Mapping[str, Any]) -> str:
    """One scenario (or the one stress) in words."""
    parts = []
    stress = spec.get("stress")
    if stress:
        if stress.get("workers"):
            parts.append(f"{stress.get('workers')} CPU worker(s) at {stress.get('load')}% load")
        memory = stress.get("memory")
        if memory:
            parts.append(f"{memory.get('size')} of memory held by {memory.get('workers')} "
                         "worker(s)")
    held = spec.get("blocked_p")
    if held:
        parts.append(f"{held.get('goroutines')} goroutine(s) holding their P for "
                     f"{held.get('hold'):g}s every {held.get('hold') + held.get('gap'):g}s")
    if not parts:
        return "no stress"
    text = ", ".join(parts)
    pattern = spec.get("pattern", "continuous")
    if isinstance(pattern, Mapping):
        burst = Burst.model_validate(pattern)
        return f"{text}, bursts of {burst.burst:g}s every {burst.every:g}s"
    return f"{text}, {pattern}"


def _measure(measure: Mapping[str, Any]) -> str:
    return f"warmup {measure.get('warmup')}s, window {measure.get('window')}s"

