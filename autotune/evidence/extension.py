"""One more round for a leader the planned confirmation left undecided, held to its level. Pure.

At the default confirmation (3 runs of a candidate against the baseline's 6, each of 3
candidates at 1.67%) the exact rank test calls "better" only when every candidate run beats
every baseline run (``significance.separation_p``: 1 / C(9, 3) = 1.19%). A candidate truly a
third better, but with one run among the baseline's slowest, stays INCONCLUSIVE: on the noisiest
recorded grid (12-03d) a third of the replayed runs ended INCONCLUSIVE, about one run in ten
with a single such crossing (docs/measurements/extension-2026-12-05.txt).

The extension gives such a leader one more run, and the baseline one more, and judges the
leader again at a stricter level ``extension_level`` chooses so that the chance of a wrong
"better" at *either* look, the planned one or the extension, stays within the candidate's share
of alpha. That is a two-look group-sequential rank test, counted exactly: every way the planned
runs can split between the candidate and the baseline (C(n + m, n)) times every place the two
new runs can fall among them ((n + m + 1)(n + m + 2) orders), all equally likely when nothing
differs and the runs are exchangeable. At 3 against 6 and 1.67%, the planned look passes with
U = 0 crossings (a baseline run better than a candidate run) and 1.190% of the time by chance;
the extension may then allow one crossing at 4 against 7 (P(U <= 1) = 0.606%), and the union
of the two is 1.385% <= 1.67%. Two crossings would make it 1.87%: too many.

Values are taken as distinct (ties have probability 0 for measured latencies; with ties the
p-value ``separation_p`` gives them mid-ranks and the level is approximate). Only small samples
are counted (``UP_TO``): a larger one (earlier nights' runs pooled in) gets no extension.
"""

from __future__ import annotations

import functools
import itertools
import math

UP_TO = 16
"""Planned runs (both groups) up to which the two-look count is made: at most C(16, 8) x 17 x 17
~ 3.7 million steps (a third of a second measured for 8 against 8); beyond, no extension."""

_ROUNDING = 1e-9
"""As ``significance._ROUNDING``: a level met exactly passes."""


def _u_distribution(n: int, m: int) -> list[int]:
    """ways[u]: how many of the C(n + m, n) splits have u crossings (pairs of a candidate run
    ranked worse than a baseline run). Counted by the classic recursion on the worst value."""
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


@functools.cache
def extension_level(n: int, m: int, alpha: float) -> float | None:
    """The one-sided p-value at most which a candidate's ``n + 1`` runs against the baseline's
    ``m + 1`` are called better after the planned look at ``n`` against ``m`` was not, such that
    a wrong "better" at either look has probability at most ``alpha`` (module docstring). None
    when no extension can pass within ``alpha``, or the sample is beyond ``UP_TO``. Pure."""
    if n < 1 or m < 1 or not 0 < alpha < 1:
        raise ValueError("n, m >= 1 and 0 < alpha < 1")
    total_n = n + m
    if total_n > UP_TO:
        return None
    planned = _threshold(_u_distribution(n, m), alpha)
    later = _u_distribution(n + 1, m + 1)
    cases = math.comb(total_n, n) * (total_n + 1) * (total_n + 2)
    # extension_only[u]: cases whose planned look fails and whose extension has u crossings.
    extension_only = [0] * len(later)
    passed_first = 0
    for picked in itertools.combinations(range(total_n), n):
        is_c = [False] * total_n
        for i in picked:
            is_c[i] = True
        # Positions run from best to worst; prefix[k]: candidate runs among the best k.
        prefix = [0]
        crossings = 0
        for i, c in enumerate(is_c):
            if c:
                crossings += i - prefix[-1]  # baseline runs better than this candidate run
            prefix.append(prefix[-1] + c)
        arrangements = (total_n + 1) * (total_n + 2)
        if crossings <= planned:
            passed_first += arrangements
            continue
        for a in range(total_n + 1):  # the new candidate run: a planned runs better than it
            beats_new_c = a - prefix[a]
            for d in range(total_n + 1):  # the new baseline run: d planned runs better
                worse_than_new_b = n - prefix[d]
                base = crossings + beats_new_c + worse_than_new_b
                if d < a:
                    extension_only[base + 1] += 1
                elif d > a:
                    extension_only[base] += 1
                else:  # same gap: either order, one each
                    extension_only[base + 1] += 1
                    extension_only[base] += 1
    later_total = sum(later)
    level, union = None, passed_first
    below = 0
    for u, w in enumerate(later):
        union += extension_only[u]
        below += w
        if union / cases > alpha + _ROUNDING:
            break
        level = below / later_total
    return level
