"""What a study measures before its sampler takes over: the user's candidates, a Go-aware prior,
then a space-filling design. Pure: the loop enqueues what ``initial_design`` returns.

Why: TPE and GP start with ``n_startup_trials`` independent random trials; a study of 8-14 trials
is then mostly random search, which in a small discrete space repeats configurations and misses
the good corner (DESIGN §6; benchmarks/replay.py measures it). What we know about the Go runtime
under a CPU limit is a better start than chance:

- **prior, point 1** - ``GOMAXPROCS`` = the CPU limit rounded up: one P per CPU of quota, so
  parallel GC workers and spinning Ms cannot burn the quota and get the whole container throttled;
  ``GOGC`` raised to 400 (fewer GC cycles, each costing CPU the quota does not have; only where a
  memory limit does not forbid it: with a ``GOMEMLIMIT`` parameter it takes its largest value, so
  the heap stays bounded); no forced GC (the smallest forced-GC interval value, 0 = off).
- **prior, point 2** - the same with ``GOMAXPROCS`` = what Go >= 1.25 picks by itself for that
  limit (ceil, at least 2), when that differs from point 1: the runtime default, GC relaxed.
- **prior, point 3** (since 2026-12-06) - the same with ``GOMAXPROCS`` = twice Go's own default
  (the nearest value on a log scale when the domain lacks it: doubling is a ratio), when that
  differs from both: more Ps than CPUs. Under a neighbour that takes CPU time in the same cgroup
  (what StressChaos and the local stress do), a P whose thread was descheduled holds its goroutines
  until the thread runs again; with more Ps, another thread runs them - the P-blocking this tool
  measures. On all three of the demo's cpuset grids GOMAXPROCS=4 is the best configuration, and a
  search that starts at 1 and 2 missed it in 4 of 100 replayed runs on one of them
  (docs/measurements/prior-2026-12-06.txt).
- **design** - ``points`` configurations spread over the space by farthest-point sampling: each
  one the candidate furthest (in normalised value ranks) from everything already measured or
  planned, so the sampler's model sees every region before it exploits one.

Parameters the rules do not know keep their baseline value when it is in their domain, else the
middle of the domain. Every point says where it came from (``origin``) and why.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from autotune.experiment.models import Experiment, Parameter, Scalar, Setting
from autotune.study import space

Origin = Literal["enqueued", "prior", "design"]

RAISED_GOGC = 400
MAX_CANDIDATES = 4096
"""Above this many cells, the design picks among a seeded random sample of this size."""


@dataclass(frozen=True)
class Point:
    settings: dict[str, Scalar]
    origin: Origin
    why: str


def cpu_limit(described: Mapping[str, Any]) -> float | None:
    """The target's CPU limit in cores, from ``Target.describe()`` (local ``cpus``, or a
    Kubernetes quantity such as ``500m`` in ``cpu_limit``); None when it has none."""
    for key in ("cpus", "cpu_limit"):
        value = described.get(key)
        if value is None:
            continue
        text = str(value).strip()
        try:
            return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
        except ValueError:
            return None
    return None


def points_wanted(exp: Experiment) -> int:
    points = exp.study.design.points
    return max(2, exp.study.trials // 4) if points == "auto" else points


def initial_design(
    exp: Experiment,
    *,
    cpu_limit: float | None,
    measured: Sequence[Mapping[str, Setting]] = (),
    seed: int | None = None,
) -> list[Point]:
    """The configurations to measure first, in order: ``study.enqueue``, the prior (if
    ``study.design.prior``), then ``study.design.points`` farthest-point configurations.

    ``measured`` are configurations the study already has; none is planned twice. The list is
    at most ``study.trials`` long.
    """
    planned: list[Point] = []
    keys = {space.settings_key(m) for m in measured}

    def add(settings: dict[str, Scalar], origin: Origin, why: str) -> None:
        key = space.settings_key(settings)
        if key not in keys:
            keys.add(key)
            planned.append(Point(settings, origin, why))

    for entry in exp.study.enqueue:
        add(dict(entry), "enqueued", "study.enqueue")
    if exp.study.design.prior:
        for settings, why in prior(exp, cpu_limit):
            add(settings, "prior", why)
    taken = [dict(m) for m in measured] + [p.settings for p in planned]
    for settings in farthest_points(exp, taken, points_wanted(exp), seed=seed):
        add(settings, "design", "farthest from everything measured or planned")
    return planned[: exp.study.trials]


# --- the prior ---------------------------------------------------------------------------------

def _role(p: Parameter) -> str:
    env = p.env_var.upper()
    if env in ("GOMAXPROCS", "GOGC", "GOMEMLIMIT"):
        return env
    if "FORCEGC" in env or "FORCE_GC" in env:
        return "FORCEGC"
    return ""


def _numeric_domain(p: Parameter) -> list[float] | None:
    values = space.domain(p)
    if values is None:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return None
    return [float(v) for v in values]


def _nearest(p: Parameter, target: float, *, log: bool = False) -> Scalar:
    """The value of ``p`` closest to ``target`` (on a log scale for multiplicative knobs)."""
    values = space.domain(p)
    if values is None:  # a continuous range: clamp
        assert p.low is not None and p.high is not None
        clamped = min(max(target, p.low), p.high)
        return round(clamped) if p.type == "int" else clamped

    def distance(v: Scalar) -> float:
        x = float(v)
        if log and x > 0 and target > 0:
            return abs(math.log(x) - math.log(target))
        return abs(x - target)

    return min(values, key=distance)


def _neutral(exp: Experiment, p: Parameter) -> Scalar:
    base = exp.baseline.params.get(p.name)
    if base is not None and p.contains(base):
        return base
    values = space.domain(p)
    if values is not None:
        return values[len(values) // 2]
    assert p.low is not None and p.high is not None
    middle = (p.low + p.high) / 2
    return round(middle) if p.type == "int" else middle


def go_default_gomaxprocs(limit: float) -> int:
    """Go >= 1.25 without the env var: the CPU limit rounded up, at least 2 (DESIGN §5)."""
    return max(2, math.ceil(limit))


def prior(exp: Experiment, limit: float | None) -> list[tuple[dict[str, Scalar], str]]:
    """The Go-aware points (see the module docstring), or none if no parameter is a Go knob."""
    roles = {p.name: _role(p) for p in exp.parameters}
    if not any(roles.values()):
        return []
    base: dict[str, Scalar] = {}
    reasons = []
    for p in exp.parameters:
        role = roles[p.name]
        numeric = _numeric_domain(p) is not None or p.values is None
        if role == "GOGC" and numeric:
            base[p.name] = _nearest(p, RAISED_GOGC, log=True)
            reasons.append(f"{p.name}={base[p.name]} (GC relaxed)")
        elif role == "GOMEMLIMIT" and numeric:
            values = space.domain(p)
            base[p.name] = values[-1] if values is not None else _nearest(p, p.high or 0)
            reasons.append(f"{p.name}={base[p.name]} (the largest: bounds the raised GOGC)")
        elif role == "FORCEGC" and numeric:
            base[p.name] = _nearest(p, 0)
            reasons.append(f"{p.name}={base[p.name]} (no forced GC)")
        else:
            base[p.name] = _neutral(exp, p)
    gomaxprocs = next((p for p in exp.parameters if roles[p.name] == "GOMAXPROCS"), None)
    if gomaxprocs is None or limit is None or (gomaxprocs.values is not None
                                               and _numeric_domain(gomaxprocs) is None):
        if gomaxprocs is not None:
            reasons.append("GOMAXPROCS left neutral (the target's CPU limit is unknown)")
        return [(base, "; ".join(reasons) or "Go-aware start")]
    at_limit = _nearest(gomaxprocs, math.ceil(limit))
    default = _nearest(gomaxprocs, go_default_gomaxprocs(limit))
    points = [({**base, gomaxprocs.name: at_limit},
               "; ".join([f"GOMAXPROCS={at_limit} (the {limit:g}-CPU limit rounded up)",
                          *reasons]))]
    if default != at_limit:
        points.append(({**base, gomaxprocs.name: default},
                       "; ".join([f"GOMAXPROCS={default} (Go's own default for a {limit:g}-CPU "
                                  "limit)", *reasons])))
    above = _nearest(gomaxprocs, 2 * go_default_gomaxprocs(limit), log=True)
    if above not in (at_limit, default):
        points.append(({**base, gomaxprocs.name: above},
                       "; ".join([f"GOMAXPROCS={above} (twice Go's own default: more Ps than "
                                  "CPUs, for a neighbour that deschedules them)", *reasons])))
    return points


# --- the space-filling design ------------------------------------------------------------------

def farthest_points(
    exp: Experiment, taken: Iterable[Mapping[str, Setting]], k: int, *, seed: int | None
) -> list[dict[str, Scalar]]:
    """``k`` configurations, each the candidate whose nearest neighbour among ``taken`` (and the
    ones chosen before it) is furthest away; ties go to the candidate listed first (seeded
    shuffle). Configurations with unset (None) values are not in the space and are ignored."""
    rng = random.Random(seed)
    candidates = space.candidates(exp, MAX_CANDIDATES, rng)
    rng.shuffle(candidates)
    chosen = [space.coordinates(exp, t) for t in taken
              if all(t.get(p.name) is not None for p in exp.parameters)]
    out: list[dict[str, Scalar]] = []
    seen = {space.settings_key(t) for t in taken}
    for _ in range(k):
        best: dict[str, Scalar] | None = None
        best_gap = -1.0
        for c in candidates:
            if space.settings_key(c) in seen:
                continue
            xy = space.coordinates(exp, c)
            gap = min((space.distance(xy, o) for o in chosen), default=-space.distance(
                xy, tuple(0.5 for _ in xy)))
            if gap > best_gap:
                best, best_gap = c, gap
        if best is None:
            break
        out.append(best)
        seen.add(space.settings_key(best))
        chosen.append(space.coordinates(exp, best))
    return out
