"""A Prometheus histogram's distribution over time: per time step, how many observations fell
into each bucket.

The input is the result of a range query ``sum by (le) (increase(X_bucket{sel}[step]))`` as
prometheus-api-client's ``custom_query_range`` returns it: one series per ``le`` (a cumulative
bucket), each ``{"metric": {"le": "0.001"}, "values": [[unix_time, "12.5"], ...]}``. A value at
time T counts the observations in (T - step, T].

Two things make the raw result untrustworthy as is, and both are handled here rather than by the
reader:

- ``increase()`` extrapolates each series on its own, and a counter reset inside a step is
  corrected per series, so adjacent cumulative buckets can come out slightly non-monotone. The
  difference of two adjacent buckets is clamped at 0: a negative count is noise, not a
  measurement.
- A series can miss a step (no scrape in it, or a series that appeared mid-window). A step that
  some bucket misses is left out altogether: its cumulative counts cannot be split into buckets
  without inventing where the missing bucket's observations went. A step that every bucket
  misses simply does not exist in the result. Either way ``t`` has a gap there.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import MetricsError

INF_TEXT = "+Inf"
# ``increase()`` returns fractional counts; three decimals keep a stored heat compact without
# losing anything a plot or a quantile could show.
_DECIMALS = 3


@dataclass(frozen=True)
class Heat:
    """``counts[i][j]``: observations at step ``t[i]`` in bucket ``j``, i.e. in
    (``edges[j-1]``, ``edges[j]``] (from 0 for the first bucket). ``t`` is the end of each step in
    seconds from the window start; ``step`` the width of a step when known (the query's step)."""

    t: tuple[float, ...]
    edges: tuple[float, ...]
    counts: tuple[tuple[float, ...], ...]
    step: float | None = None

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.t):
            raise ValueError(f"{len(self.counts)} rows of counts for {len(self.t)} time steps")
        if any(len(row) != len(self.edges) for row in self.counts):
            raise ValueError(f"every row of counts needs {len(self.edges)} buckets")
        if any(b <= a for a, b in itertools.pairwise(self.edges)):
            raise ValueError("bucket edges must be strictly increasing")
        if any(math.isnan(e) for e in self.edges):
            raise ValueError("a bucket edge is NaN")
        if any(not math.isfinite(c) or c < 0 for row in self.counts for c in row):
            raise ValueError("counts must be finite and >= 0")
        if self.step is not None and not (math.isfinite(self.step) and self.step > 0):
            raise ValueError(f"step must be > 0, got {self.step}")

    @property
    def shares(self) -> tuple[tuple[float | None, ...], ...]:
        """Each row divided by its sum; a step without observations has no distribution, so its
        row is all ``None`` (zeros would claim every bucket was measured empty)."""
        out: list[tuple[float | None, ...]] = []
        for row in self.counts:
            total = sum(row)
            if total > 0:
                out.append(tuple(c / total for c in row))
            else:
                out.append((None,) * len(row))
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        """A compact JSON-safe form (``+Inf`` as the string ``"+Inf"``; whole counts as ints)."""
        return {
            "t": [_compact(x) for x in self.t],
            "le": [INF_TEXT if math.isinf(e) else e for e in self.edges],
            "counts": [[_compact(c) for c in row] for row in self.counts],
            "step": self.step,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Heat:
        """The inverse of ``to_json``; ``ValueError`` on anything else."""
        try:
            t = tuple(float(x) for x in data["t"])
            edges = tuple(_edge(e) for e in data["le"])
            counts = tuple(tuple(float(c) for c in row) for row in data["counts"])
            step = data.get("step")
            return cls(t, edges, counts, None if step is None else float(step))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a stored heat: {e!r}") from None


def _compact(x: float) -> float | int:
    x = round(x, _DECIMALS)
    return int(x) if x.is_integer() else x


def _edge(text: object) -> float:
    """A bucket bound: a number, or a Prometheus ``le`` label (``"0.001"``, ``"+Inf"``)."""
    if isinstance(text, bool):
        raise ValueError(f"bad bucket bound {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    elif isinstance(text, str):
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError(f"bad bucket bound {text[:40]!r}") from None
    else:
        raise ValueError(f"bad bucket bound {text!r}")
    if math.isnan(value) or value == -math.inf:
        raise ValueError(f"bad bucket bound {text!r}")
    return value


def from_range(
    result: Sequence[Mapping[str, Any]], *, start: float | None = None,
    step: float | None = None,
) -> Heat:
    """A ``Heat`` from a range query's result (see the module doc).

    ``start`` is the window start (unix seconds; default: the first step's time) and ``step`` the
    query's step. Series that name the same bound (``"1"`` and ``"1.0"``) are added. A value that
    is not a finite number (``NaN`` from ``increase()`` over a gap) counts as missing. Raises
    ``MetricsError`` when the result is not a histogram's buckets (a series without ``le``)."""
    by_edge: dict[float, dict[float, float]] = {}
    present: dict[float, set[float]] = {}
    for series in result:
        metric = series.get("metric") or {}
        if "le" not in metric:
            raise MetricsError(
                f"not a histogram's buckets: a series without an 'le' label ({dict(metric)!r}); "
                "query sum by (le) (increase(X_bucket[step]))")
        try:
            edge = _edge(metric["le"])
        except ValueError as e:
            raise MetricsError(f"not a histogram's buckets: {e}") from None
        points = by_edge.setdefault(edge, {})
        seen = present.setdefault(edge, set())
        for at, value in _points(series.get("values") or ()):
            seen.add(at)
            if math.isfinite(value):
                points[at] = points.get(at, 0.0) + value
    edges = tuple(sorted(by_edge))
    times = sorted(set().union(*present.values())) if present else []
    if start is None:
        start = times[0] if times else 0.0
    t: list[float] = []
    rows: list[tuple[float, ...]] = []
    for at in times:
        cumulative = [by_edge[e].get(at) for e in edges]
        known = [c for c in cumulative if c is not None]
        if len(known) != len(cumulative):
            continue
        rows.append(_non_cumulative(known))
        t.append(round(at - start, 6))
    return Heat(tuple(t), edges, tuple(rows), step)


def _points(values: Iterable[Any]) -> Iterable[tuple[float, float]]:
    for point in values:
        try:
            at, text = point
            at, value = float(at), float(text)
        except (TypeError, ValueError):
            raise MetricsError(f"not a range query's [time, value] point: {point!r}") from None
        if math.isfinite(at):
            yield at, value


def _non_cumulative(cumulative: Sequence[float]) -> tuple[float, ...]:
    out = []
    below = 0.0
    for c in cumulative:
        out.append(max(0.0, c - below))
        # The floor for the next bucket is the running maximum: after a bucket that came out
        # too low, the next one must not be credited with observations the lower one lost.
        below = max(below, c)
    return tuple(out)


def coarse_edges(heats: Sequence[Heat], max_buckets: int = 24) -> tuple[float, ...]:
    """At most ``max_buckets`` edges, all of them edges of the heats (which must share theirs),
    chosen so the buckets that hold observations in any of the heats keep as much resolution as
    the budget allows: the empty buckets below and above them merge into one each, and the rest
    are merged into groups as equal as whole buckets allow."""
    if max_buckets < 1:
        raise ValueError(f"max_buckets must be >= 1, got {max_buckets}")
    if not heats:
        return ()
    edges = heats[0].edges
    if any(h.edges != edges for h in heats):
        raise ValueError("the heats have different bucket edges")
    n = len(edges)
    if n <= max_buckets:
        return edges
    used = [j for j in range(n) if any(row[j] > 0 for h in heats for row in h.counts)]
    lo, hi = (used[0], used[-1]) if used else (0, n - 1)
    below, above = lo > 0, hi < n - 1
    budget = max_buckets - below - above
    if budget < 1:  # too few buckets left for the occupied range: plain equal groups
        lo, hi, below, above, budget = 0, n - 1, False, False, max_buckets
    kept: list[float] = []
    if below:
        kept.append(edges[lo - 1])
    m = hi - lo + 1
    groups = min(budget, m)
    # As even as whole buckets allow (sizes differ by at most one); the last group ends at the
    # top of the occupied range, so its highest edge is kept.
    kept.extend(edges[lo - 1 + (g * m) // groups] for g in range(1, groups + 1))
    if above:
        kept.append(edges[-1])
    return tuple(sorted(kept))


def rebucket(heat: Heat, edges: Sequence[float]) -> Heat:
    """``heat`` with its buckets merged onto ``edges``, a subset of its own edges that keeps the
    last one (so every observation still has a bucket)."""
    target = tuple(sorted(edges))
    if not heat.edges:
        return heat
    if not target or target[-1] != heat.edges[-1] or not set(target) <= set(heat.edges):
        raise ValueError("edges must be a subset of the heat's edges ending with its last one")
    groups: list[list[int]] = [[] for _ in target]
    k = 0
    for j, edge in enumerate(heat.edges):
        while edge > target[k]:
            k += 1
        groups[k].append(j)
    counts = tuple(tuple(sum(row[j] for j in g) for g in groups) for row in heat.counts)
    return Heat(heat.t, target, counts, heat.step)


def merge_coarse(heat: Heat, max_buckets: int = 24) -> Heat:
    """``heat`` with adjacent buckets merged so that at most ``max_buckets`` remain, each merged
    bucket bounded by real edges of the original (see ``coarse_edges``)."""
    return rebucket(heat, coarse_edges([heat], max_buckets))
