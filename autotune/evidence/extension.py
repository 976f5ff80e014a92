"""One more round for a leader the planned confirmation left undecided, held to its level. Pure.

At the default confirmation (3 runs of a candidate against the baseline's 6, each of 3
candidates at 1.67%) the exact rank test calls "better" only when every candidate run beats
every baseline run (``significance.separation_p``: 1 / C(9, 3) = 1.19%). A candidate truly a
third better, but with one run among the baseline's slowest, stays INCONCLUSIVE: on the noisiest
recorded grid (12-03d) a third of the replayed runs ended INCONCLUSIVE, about one run in ten
with a single such crossing (docs/measurements/extension-2026-12-05.txt).

The extension gives such a leader ``added`` more runs, and the baseline as many, and judges the
leader again at a stricter level chosen so that the chance of a wrong "better" at *either* look,
the planned one or the extension, stays within the candidate's share of alpha. That is a
two-look group-sequential rank test, counted exactly: every order of the planned and the new
runs of both groups is equally likely when nothing differs and the runs are exchangeable, and
``_joint`` counts how many orders give each pair (crossings at the planned look, crossings at the
extension), a crossing being a pair of a baseline run ranked better than a candidate run.

How many runs: the fewest that could still pass. Crossings only grow with more runs, so a
planned look short by U crossings can pass the extension only if its threshold is at least U.
The levels are chosen greedily, the one-run level first (the largest whose union with the
planned look stays within alpha), then the two-run level for the looks the one-run extension
cannot save (the largest the share left over allows). At 3 against 6 and 1.67%:

- planned, U = 0: 1.190% by chance;
- one crossing (U = 1): one more run a side, U <= 1 at 4 against 7 (p <= 2/330 = 0.606%),
  the union 1.385%;
- two or three crossings: two more a side, U <= 3 at 5 against 8 (p <= 7/1287 = 0.544%), the
  union 1.540% <= 1.67%. Four crossings allowed there would make it 1.78%.

Values are taken as distinct (ties have probability 0 for measured latencies; with ties the
p-value ``separation_p`` gives them mid-ranks and the level is approximate). Only small samples
are counted (``UP_TO``): a larger one (earlier nights' runs pooled in) gets no extension.
"""

from __future__ import annotations

import functools
import math

UP_TO = 16
"""Planned runs (both groups) up to which the two-look count is made (0.2 s for 8 against 8,
cached); beyond, no extension."""

MOST_ADDED = 2
"""The most runs a side an extension adds. Three would give a leader short by 4-6 crossings at
3 against 6 (of 18 pairs) a round (U <= 6 at 6 against 9, p <= 0.60%), a configuration slower
than a baseline run in a third of the pairs: replayed, it changed no verdict on the eight
recorded grids and spent the round in 22 of 100 runs of the near-tie grid, p90 +1.7 minutes
(docs/measurements/extension3-2026-12-05.txt)."""

_ROUNDING = 1e-9
"""As ``significance._ROUNDING``: a level met exactly passes."""


def _u_distribution(n: int, m: int) -> list[int]:
    """ways[u]: how many of the C(n + m, n) splits have u crossings. Counted by the classic
    recursion on the worst value."""
    @functools.cache
    def ways(a: int, b: int) -> tuple[int, ...]:
        if a == 0 or b == 0:
            return (1,)
        # The worst value is a candidate run (it crosses all b baseline runs) or a baseline
        # run (it crosses nothing).
        worst_c, worst_b = ways(a - 1, b), ways(a, b - 1)
        out = [0] * (a * b + 1)
        for u, w in enumerate(worst_c):
            out[u + b] += w
        for u, w in enumerate(worst_b):
            out[u] += w
        return tuple(out)

    return list(ways(n, m))


def _threshold(dist: list[int], alpha: float) -> int:
    """The largest u with P(U <= u) <= alpha (-1: none)."""
    total, below, best = sum(dist), 0, -1
    for u, w in enumerate(dist):
        below += w
        if below / total > alpha + _ROUNDING:
            break
        best = u
    return best


def _joint(n: int, m: int, k: int, cap: int) -> dict[tuple[int, int], int]:
    """ways[(u0, u)]: how many orders of n planned candidate runs, m planned baseline runs and
    k new runs of each have u0 crossings among the planned runs and u among all of them, both
    counted only up to ``cap`` (larger ones lumped at cap + 1: no threshold reaches them). The
    same recursion on the worst value as ``_u_distribution``, over four kinds of run."""
    def add(into: dict[tuple[int, int], int], part: dict[tuple[int, int], int],
            du0: int, du: int) -> None:
        for (u0, u), w in part.items():
            key = (min(u0 + du0, cap + 1), min(u + du, cap + 1))
            into[key] = into.get(key, 0) + w

    @functools.cache
    def ways(pc: int, pb: int, nc: int, nb: int) -> dict[tuple[int, int], int]:
        if pc + nc == 0 or pb + nb == 0:  # one group left: no more crossings, in any order
            return {(0, 0): math.comb(pc + nc, pc) * math.comb(pb + nb, pb)}
        out: dict[tuple[int, int], int] = {}
        if pc:  # the worst is a planned candidate run: every baseline run is better
            add(out, ways(pc - 1, pb, nc, nb), pb, pb + nb)
        if nc:  # a new candidate run: it crosses at the extension only
            add(out, ways(pc, pb, nc - 1, nb), 0, pb + nb)
        if pb:
            add(out, ways(pc, pb - 1, nc, nb), 0, 0)
        if nb:
            add(out, ways(pc, pb, nc, nb - 1), 0, 0)
        return out

    return ways(n, m, k, k)


@functools.cache
def _plan(n: int, m: int, alpha: float) -> tuple[tuple[float | None, ...], float | None]:
    """``extension_levels``' levels and the union they give (``union_bound``), counted once;
    beyond ``UP_TO`` nothing is counted (the union None)."""
    if n < 1 or m < 1 or not 0 < alpha < 1:
        raise ValueError("n, m >= 1 and 0 < alpha < 1")
    if n + m > UP_TO:
        return (None,) * MOST_ADDED, None
    planned = _u_distribution(n, m)
    saved = _threshold(planned, alpha)  # the planned look passes up to here
    union = sum(planned[:saved + 1]) / sum(planned)
    levels: list[float | None] = []
    for k in range(1, MOST_ADDED + 1):
        later = _u_distribution(n + k, m + k)
        cap = _threshold(later, alpha)  # a threshold beyond is over alpha on its own
        joint = _joint(n, m, k, cap)
        orders = sum(joint.values())
        best: tuple[int, float] | None = None
        for t in range(saved + 1, cap + 1):
            # Planned looks this k is the fewest runs for (U0 above what fewer runs save)
            # whose extension passes; U0 <= U, so U <= t also bounds U0.
            extra = sum(w for (u0, u), w in joint.items() if u0 > saved and u <= t) / orders
            if union + extra > alpha + _ROUNDING:
                break
            best = (t, extra)
        if best is None:
            levels.append(None)
            continue
        t, extra = best
        union += extra
        saved = t
        levels.append(sum(later[:t + 1]) / sum(later))
    return tuple(levels), union


def extension_levels(n: int, m: int, alpha: float) -> tuple[float | None, ...]:
    """levels[k - 1]: the one-sided p-value at most which a candidate's ``n + k`` runs against
    the baseline's ``m + k`` are called better after the planned look at ``n`` against ``m``
    was not, for k = 1 .. ``MOST_ADDED``, chosen (module docstring) so that a wrong "better" at
    either look has probability at most ``alpha`` when k is the fewest runs that could pass;
    None for a k no level fits. All None beyond ``UP_TO``. Pure."""
    return _plan(n, m, alpha)[0]


def extension_level(n: int, m: int, alpha: float, added: int = 1) -> float | None:
    """``extension_levels(n, m, alpha)[added - 1]``. Pure."""
    if not 1 <= added <= MOST_ADDED:
        raise ValueError(f"added must be 1 .. {MOST_ADDED}")
    return extension_levels(n, m, alpha)[added - 1]


def union_bound(n: int, m: int, alpha: float) -> float:
    """P(a wrong "better" at the planned look or its extension) when nothing differs, for the
    levels ``extension_levels`` chooses: at most ``alpha``. For the docs and the tests. Pure."""
    union = _plan(n, m, alpha)[1]
    if union is None:  # no extension: the planned look alone
        planned = _u_distribution(n, m)
        return sum(planned[:_threshold(planned, alpha) + 1]) / sum(planned)
    return union
