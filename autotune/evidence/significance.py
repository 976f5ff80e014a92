"""Is a candidate better than the baseline by more than the noise? Pure and seedable.

The statistic is the **relative improvement of the median**, oriented so that positive is
better: ``(median(baseline) - median(candidate)) / |median(baseline)|`` when minimizing, the
opposite sign when maximizing. The median rather than the mean because one window that caught a
GC storm or a bimodal phase should not move a configuration's summary (under stress, Go's
defaults often alternate between a good and a bad phase).

Its 95% confidence interval is a **percentile bootstrap**: each group is resampled with
replacement independently (``RESAMPLES`` = 10000 times, NumPy's PCG64 seeded by ``seed``), the
statistic is computed per resample, and the 2.5th and 97.5th percentiles bound it. It gives the
interval for the effect size the report states; a rank test (below, "Exact") holds its "better"
to its level.

Outcome of one comparison (``margin`` is 0 for confirmation runs):

- ``better``: the whole interval is above ``margin`` (low > margin), on at least ``min_runs``
  runs a side, **and** the runs separate: the exact rank test (below, "Exact") gives
  p <= 1 - confidence;
- ``not better``: the interval excludes any improvement of ``PRACTICAL`` (5%) or more
  (high < PRACTICAL) -- this covers an interval entirely on the "no better" side and one that
  straddles zero but is too narrow to hide a worthwhile gain;
- ``unclear``: otherwise (an improvement of 5% or more is plausible but not shown), and always
  when either side has fewer than 2 values (no noise estimate).

For ``unclear`` the repeats that would settle it are estimated by scaling the interval's
half-width with 1/sqrt(n) around the same point estimate ``r``: the outcome is decided once the
half-width drops below ``max(r, PRACTICAL - r)`` (then either low > 0 or high < PRACTICAL). Aimed
at exactly that, a new sample would decide only half the time, so the target half-width is
shrunk by 1.96 / (1.96 + 0.84), the usual 80%-power factor (about twice the repeats). Above
``MANY_REPEATS`` the verdict gives no plan from it but says what the number means.

Without confirmation runs (a candidate measured once during the search) the candidate borrows
the baseline's relative noise (``borrow_noise``) and must clear ``FALLBACK_MARGIN`` (20%): the
best of many single measurements is optimistic (winner's curse), so only an overwhelming gain is
adopted unconfirmed.

**Which of several candidates** (``decide``, and the confirmation's leader,
``autotune.study.confirmation``): each candidate is first judged against the baseline by the median
interval above; among those it calls better, the one adopted is the one with the best ``typical``
value, the **mean** of its runs. Choosing is an estimate, not a test: with the 3 to 6 runs a
confirmation gives a candidate, a median is one or two of them, the mean uses all, and the
whole-run replay of the recorded grids picks a configuration within 10% of the best more often
that way (docs/measurements/choice-2026-12-03.txt, with the confirmation's leader by the mean
too and its early stop: 12-03b 93% -> 96%, 12-03c 90% -> 94%, the outside inventory service
69% -> 73%; the same verdict in 1097 of 1100 runs). A run far from the rest still cannot make a
candidate adopted (the median interval decides that); it can only make another candidate the
interval also calls better preferred to it, which is the tail risk one would want to avoid.
When two candidates called better are that close (runs overlapping, means within 10%), the
sequential confirmation first measures each once or twice more (``autotune.evidence.tiebreak``).

**What a confirmed candidate is judged on** (``judge``): "better" on its confirmation runs
alone, "not better" also with the search measurement(s) that chose it (chosen for looking good,
they flatter it: a "not better" with them errs no more often than with unchosen runs; ``judge``
says why and what it assumes).

**Several candidates, one error rate** (``each_of``): the report adopts if *any* confirmed
candidate is called better, so with ``k`` candidates there are ``k`` chances of a wrong
"better". Each is judged at ``1 - (1 - confidence) / k`` (Bonferroni: the chance that any of
them is wrongly called better is then at most what one would have, whatever their dependence).
Measured before it was adopted: with 3 candidates and no selection, judging each at the
family's level adopted wrongly 9.7% of the time
(docs/measurements/null-confirmation-2026-12-04.txt).

**Exact** (``separation_p``, since 2026-12-04 (d)). The percentile bootstrap of medians is
coarse at 2-6 runs a side and not conservative: at 2 vs 5 it called "better" at 98.33% whenever
both candidate runs beat every baseline run, which happens by chance with probability 1 /
C(7, 2) = 4.8%, and the whole product replayed with nothing differing adopted in 7.5% of runs
(15 of 200, docs/measurements/drift-2026-12-04c.txt). So "better" also needs the one-sided
Wilcoxon rank-sum (Mann-Whitney) test, counted exactly over every way to split the pooled runs,
at p <= 1 - confidence: a wrong "better" then has probability at most 1 - confidence whatever
the runs' distribution (heavy tails included), when every run of both groups is exchangeable
(nothing differs, no drift) and the number of runs was fixed before they were measured (the
default confirmation: 3 rounds, the baseline in each; an extension round is a second look,
counted exactly for its one candidate at a stricter level: ``autotune.evidence.extension``).
Re-testing as runs arrive (``--fixed``'s adaptive rounds, looks from 5 rounds on) is held only
by the Bonferroni split over the looks that spend, and adaptive rounds spend none: there it is
not exact. The whole two-sided alpha goes to this one side: a wrong "better" is the error that
changes production; "not better" stays the bootstrap's upper end. At 3 candidate runs against 6
baseline runs (the default confirmation) "better" at 98.33% (each of 3 candidates at 95%) means
every candidate run beats every baseline run: 1 / C(9, 3) = 1.2%, under the 1.67% each candidate
holds, so any wrong "better" among the 3 stays under 5%. It can never be called on fewer runs
than make the smallest p-value, 1 / C(n + m, n), reach the level (3 vs 3 at 95%: 5%, just;
2 vs 5 at 98.33%: never; ``autotune.study.confirmation.run.confirm`` warns of a plan that
cannot adopt).
Replayed on the whole product: docs/measurements/exact-2026-12-04.txt.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

Direction = Literal["minimize", "maximize"]
Outcome = Literal["better", "not better", "unclear"]
Verdict = Literal["adopt", "keep current", "inconclusive"]

RESAMPLES = 10_000
CONFIDENCE = 0.95
PRACTICAL = 0.05
"""The smallest relative improvement worth changing a production setting for."""
FALLBACK_MARGIN = 0.20
"""How far the lower bound must clear zero when the candidate was never re-measured."""
DEFAULT_SEED = 0
POWER_SHRINK = 1.96 / (1.96 + 0.84)
"""z(97.5%) / (z(97.5%) + z(80%)): the half-width that gives an 80% chance to decide."""
MANY_REPEATS = 50
"""Above this (``baseline.repeats``' own ceiling) the repeat estimate is no plan, and the verdict
says what such a number means instead: either the difference sits too close to the margin to
settle, or one or a few runs far from the rest blew the interval open (the 1/sqrt(n) rule
assumes a spread that shrinks smoothly with n). One throttled 10 s window at 86 ms among 4-5 ms
gave -1357% .. +33% and "about 11228 repeats" (docs/measurements/demo-2026-12-03b.txt)."""
_ROUNDING = 1e-9
"""A p-value exactly at the level passes: 1 - 0.95 is 0.05000000000000004 in floats, 1 - 0.99
is 0.010000000000000009, and 1/120 at 1 - 1/120 must not fail on the last bit."""
EXACT_UP_TO = 40
"""Values (both groups) up to which ``separation_p`` counts exactly; beyond, the normal
approximation (a confirmation holds 9-15)."""
METHOD = (f"percentile bootstrap ({RESAMPLES} resamples, each group resampled independently) "
          f"of the relative improvement of the median; {CONFIDENCE:.0%} interval; 'better' "
          "also needs the exact one-sided rank-sum test at p <= 1 - the interval's level")


@dataclass(frozen=True)
class Comparison:
    """One candidate against the baseline on one objective; improvements are fractions."""

    metric: str
    direction: Direction
    n_candidate: int
    n_baseline: int
    candidate_median: float
    baseline_median: float
    improvement: float | None
    """None when the baseline median is 0 (no relative change is defined)."""
    low: float | None
    high: float | None
    outcome: Outcome
    repeats_needed: int | None
    """For ``unclear``: total repeats per configuration estimated to settle it."""
    borrowed_noise: bool = False
    """The candidate had one value, spread like the baseline repeats (``borrow_noise``)."""
    confidence: float = CONFIDENCE
    """Of the interval (a sequential confirmation's looks use a higher one)."""
    with_search: int = 0
    """Search measurements among the candidate's values (``judge``: only in a "not better"
    call, which they can only make harder)."""
    separation: float | None = None
    """The exact rank test's one-sided p-value (``separation_p``); None for borrowed noise,
    fewer than 2 values a side or a baseline median of 0. "Better" needs it at most
    ``rank_level``."""
    rank_alpha: float | None = None
    """The rank test's level when it is not ``1 - confidence``: a leader judged again after one
    more round (``autotune.evidence.extension``) is held to a stricter one."""

    @property
    def rank_level(self) -> float:
        """The p-value at most which the rank test lets "better" be called: ``rank_alpha``
        never loosens it beyond ``1 - confidence``."""
        alpha = 1 - self.confidence
        return alpha if self.rank_alpha is None else min(self.rank_alpha, alpha)


def compare(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    metric: str,
    direction: Direction,
    margin: float = 0.0,
    borrow: bool = False,
    seed: int = DEFAULT_SEED,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    practical: float = PRACTICAL,
    min_runs: int = 2,
    rank_alpha: float | None = None,
) -> Comparison:
    """``candidate`` against ``baseline`` (module docstring). ``rank_alpha``: the rank test's
    level when it is not ``1 - confidence`` (``Comparison.rank_alpha``)."""
    if not candidate or not baseline:
        raise ValueError("both groups need at least one value")
    if direction not in ("minimize", "maximize"):
        raise ValueError(f"unknown direction {direction!r}")
    borrowed = borrow and len(candidate) == 1 and len(baseline) > 1
    c = np.asarray(borrow_noise(candidate[0], baseline) if borrowed else candidate, dtype=float)
    b = np.asarray(baseline, dtype=float)
    med_c, med_b = float(np.median(c)), float(np.median(b))
    base = Comparison(metric=metric, direction=direction, n_candidate=len(candidate),
                      n_baseline=len(b), candidate_median=med_c, baseline_median=med_b,
                      improvement=None, low=None, high=None, outcome="unclear",
                      repeats_needed=None, borrowed_noise=borrowed, confidence=confidence,
                      rank_alpha=rank_alpha)
    if med_b == 0:
        return base
    sign = -1.0 if direction == "minimize" else 1.0
    r = sign * (med_c - med_b) / abs(med_b)
    if len(c) < 2 or len(b) < 2:
        return replace(base, improvement=r)
    rng = np.random.default_rng(seed)
    boot_c = np.median(c[rng.integers(0, len(c), size=(resamples, len(c)))], axis=1)
    boot_b = np.median(b[rng.integers(0, len(b), size=(resamples, len(b)))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = sign * (boot_c - boot_b) / np.abs(boot_b)
    rel = rel[np.isfinite(rel)]
    if rel.size == 0:
        return replace(base, improvement=r)
    tail = (1 - confidence) / 2 * 100
    low, high = (float(x) for x in np.percentile(rel, [tail, 100 - tail]))
    p = None if borrowed else separation_p(c, b, direction=direction, margin=margin)
    outcome: Outcome
    if high < practical:
        # First: an interval wholly below the practical margin rules out a gain worth changing
        # production for, even where it also lies above 0 (+1.8% .. +3.6%: better, by too
        # little). Review finding: "better" was tested first, and such a candidate was
        # adopted while the method's KEEP CURRENT condition held too.
        outcome = "not better"
    elif (low > margin and min(len(c), len(b)) >= min_runs
            and (p is None or p <= base.rank_level + _ROUNDING)):
        # Below min_runs a side the interval is narrower than the noise it comes from: too
        # little to adopt on (it may still show that a candidate is no better). The rank test
        # holds "better" to its level exactly (module docstring, "Exact").
        outcome = "better"
    else:
        outcome = "unclear"
    needed = (_repeats_needed(r, (high - low) / 2, min(len(c), len(b)), practical)
              if outcome == "unclear" else None)
    return replace(base, improvement=r, low=low, high=high, outcome=outcome,
                    repeats_needed=needed, separation=p)


def separation_p(
    candidate: Sequence[float] | np.ndarray, baseline: Sequence[float] | np.ndarray, *,
    direction: Direction, margin: float = 0.0,
) -> float:
    """How often runs drawn from one distribution separate at least this well: the exact
    one-sided p-value of the Wilcoxon rank-sum (Mann-Whitney) test that the candidate is better
    than the baseline by more than ``margin`` (module docstring, "Exact"). Pure.

    The baseline's values are first moved by ``margin`` towards the candidate's better side
    (``b * (1 -+ margin)``), then every value of both groups is ranked, better ranked higher
    (ties share their mid-rank). The p-value is the share of the C(n + m, n) ways to pick ``n``
    of the pooled values whose rank sum is at least the candidate's: exact when every run of
    both groups is exchangeable (nothing differs), whatever the distribution, heavy tails
    included. Counted by dynamic programming over doubled ranks (integers); beyond
    ``EXACT_UP_TO`` values the normal approximation."""
    c = np.asarray(candidate, dtype=float)
    b = np.asarray(baseline, dtype=float)
    n, m = len(c), len(b)
    if n == 0 or m == 0:
        raise ValueError("both groups need at least one value")
    shifted = b - margin * np.abs(b) if direction == "minimize" else b + margin * np.abs(b)
    pooled = np.concatenate([c, shifted])
    # Better ranked higher: the lowest value when minimizing.
    key = -pooled if direction == "minimize" else pooled
    doubled = _doubled_ranks(key)
    observed = int(doubled[:n].sum())
    if n + m > EXACT_UP_TO:
        return _normal_p(doubled, n, observed)
    top = int(doubled.sum())
    # ways[k][s]: subsets of k values whose doubled ranks sum to s (floats: C(40, 20) ~ 1e11,
    # and a p-value needs no more than float precision).
    ways = np.zeros((n + 1, top + 1))
    ways[0, 0] = 1.0
    for rank in doubled:
        r = int(rank)
        for k in range(n, 0, -1):
            ways[k, r:] += ways[k - 1, :top + 1 - r]
    total = float(ways[n].sum())
    return float(ways[n, observed:].sum()) / total


def _normal_p(doubled: np.ndarray, n: int, observed: int) -> float:
    """The rank sum's normal approximation (tie-corrected variance, continuity correction):
    beyond ``EXACT_UP_TO`` values, where the exact count would cost more than it tells."""
    ranks = doubled / 2.0
    total = len(ranks)
    mean = n * (total + 1) / 2.0
    variance = n * (total - n) / total * float(np.var(ranks)) * total / (total - 1)
    if variance <= 0:
        return 1.0
    z = (observed / 2.0 - 0.5 - mean) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _doubled_ranks(values: np.ndarray) -> np.ndarray:
    """2 x the 1-based ranks of ``values``, ascending, ties sharing their mid-rank (an integer
    once doubled)."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.int64)
    sorted_values = values[order]
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_values[j + 1] == sorted_values[i]:
            j += 1
        # Positions i..j (0-based) tie: their ranks i+1..j+1 average to (i + j + 2) / 2.
        ranks[order[i:j + 1]] = i + j + 2
        i = j + 1
    return ranks


def _repeats_needed(r: float, half_width: float, n: int, practical: float) -> int | None:
    # At the n where the half-width just equals the distance to decide, a new sample lands on
    # either side half of the time; shrinking it to POWER_SHRINK of that distance gives ~80%.
    target = max(r, practical - r) * POWER_SHRINK
    if half_width <= 0 or target <= 0:
        return None
    return max(n + 1, math.ceil(n * (half_width / target) ** 2))


def borrow_noise(value: float, baseline: Sequence[float]) -> tuple[float, ...]:
    """A single measurement spread like the baseline repeats (same relative deviations).

    Used when a candidate was measured once: its own noise is unknown, and the baseline's,
    measured under the same stress, is the best estimate we have.
    """
    med = statistics.median(baseline)
    if med == 0:
        return tuple(value for _ in baseline)
    return tuple(value * x / med for x in baseline)


@dataclass(frozen=True)
class Evidence:
    """What ``decide`` needs about one candidate."""

    id: str
    comparisons: tuple[Comparison, ...]
    """One per objective; the first is the primary one the verdict is about."""
    feasible: bool
    runs: int
    typical: float | None = None
    """The primary objective's ``typical`` value over its runs (None: choose by the median
    gain, as for a candidate measured once)."""


def judge(
    confirmed: Sequence[float], searched: Sequence[float], baseline: Sequence[float], *,
    metric: str, direction: Direction, confidence: float, min_runs: int,
    seed: int = DEFAULT_SEED, rank_alpha: float | None = None,
) -> Comparison:
    """A confirmed candidate against the baseline (module docstring, "What a confirmed candidate
    is judged on"). Pure.

    "Better" is called on its confirmation runs alone: its search measurements got it chosen
    because they looked good, and counted as evidence they made a confirmation that measured
    nothing different adopt 12-20% of the time (docs/measurements/null-2026-12-04.txt). The
    same bias lets them help the other call. With the resampling fixed, each resample's median
    only moves towards "better" when any one value does, so the interval's upper end does too;
    a search value chosen for looking good is (in distribution) better than an unchosen run, so
    "not better" with it errs no more often than with a run measured like the others. This
    compares the pool with an unchosen run of the same size, not with the confirmation runs
    alone (more values can narrow an interval), and it assumes the host did not drift between
    the search and the confirmation (a host that got faster makes early runs look worse; when
    the baseline drifted, the report and the looks pass values scaled by its trend in time:
    ``autotune.evidence.drift.steadied``). It lets a candidate the confirmation measured once
    (dropped after round 1 for a better one) be ruled out rather than leave the verdict
    INCONCLUSIVE. "Not better" never leads to ADOPT: the wrong-ADOPT rate does not depend on
    it."""
    if not confirmed and not searched:
        raise ValueError("a candidate needs a measurement")
    mine = compare(confirmed, baseline, metric=metric, direction=direction, seed=seed,
                   confidence=confidence, min_runs=min_runs,
                   rank_alpha=rank_alpha) if confirmed else None
    if mine is not None and (mine.outcome != "unclear" or not searched):
        return mine
    pooled = compare([*searched, *confirmed], baseline, metric=metric, direction=direction,
                     seed=seed, confidence=confidence, min_runs=min_runs, rank_alpha=rank_alpha)
    if pooled.outcome == "not better":
        return replace(pooled, with_search=len(searched))
    if mine is not None:
        return mine
    return replace(pooled, outcome="unclear", with_search=len(searched))


def each_of(confidence: float, k: int) -> float:
    """The level each of ``k`` comparisons is judged at so that the family holds at
    ``confidence`` (Bonferroni; module docstring). Pure."""
    return 1 - (1 - confidence) / max(k, 1)


def typical(values: Sequence[float]) -> float:
    """How a candidate is ranked against other candidates: the mean of its runs (module
    docstring, "Which of several candidates"). Pure."""
    return statistics.fmean(values)


def rank_key(values: Sequence[float], direction: Direction) -> tuple[float, float]:
    """Sorts candidates best first: by ``typical``, ties by the median, oriented so that lower
    is better. The confirmation's leader (``autotune.study.confirmation``) and the report's order of
    confirmed candidates both sort by it (then by trial number), so a look and the report name
    the same candidate. Pure."""
    sign = 1.0 if direction == "minimize" else -1.0
    return (sign * typical(values), sign * statistics.median(values))


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    chosen: str | None
    """Adopt: the recommendation. Otherwise the most promising feasible candidate (what a
    forced export would apply), or None."""
    reason: str
    repeats_needed: int | None


def decide(candidates: Sequence[Evidence], *, confirmed: bool) -> Decision:
    """The verdict over all candidates.

    - **adopt** the best (``typical``, else the largest primary improvement) candidate that is
      ``better`` on the primary
      objective, not significantly worse (interval entirely below 0) on any other objective, and
      feasible in every run;
    - otherwise **inconclusive** when a feasible candidate's primary comparison is ``unclear``;
    - otherwise **keep current**.
    """
    if not candidates:
        return Decision("keep current", None,
                        "no feasible search trial to compare with the baseline", None)
    feasible = [e for e in candidates if e.feasible]
    eligible = [e for e in feasible if e.comparisons[0].outcome == "better"
                and not any(_worse(c) for c in e.comparisons[1:])]
    if eligible:
        best = _choose(eligible)
        reason = _adopt_reason(best, confirmed) + _over(best, max(eligible, key=_gain))
        return Decision("adopt", best.id, reason, None)
    unclear = [e for e in feasible if e.comparisons[0].outcome == "unclear"]
    if unclear:
        best = _choose(unclear)
        return Decision("inconclusive", best.id, _unclear_reason(best, confirmed),
                        best.comparisons[0].repeats_needed)
    chosen = _choose(feasible).id if feasible else None
    return Decision("keep current", chosen, _keep_reason(candidates), None)


def _choose(group: Sequence[Evidence]) -> Evidence:
    """The best ``typical`` value; the largest median gain when any lacks one."""
    if any(e.typical is None for e in group):
        return max(group, key=_gain)
    sign = 1.0 if group[0].comparisons[0].direction == "maximize" else -1.0
    return max(group, key=lambda e: (sign * float(e.typical or 0.0), _gain(e)))


def _over(chosen: Evidence, by_median: Evidence) -> str:
    if chosen.id == by_median.id or chosen.typical is None or by_median.typical is None:
        return ""
    return (f"; chosen over {by_median.id} (a larger median gain, "
            f"{by_median.comparisons[0].improvement:+.1%}, also better) for the "
            f"{'lower' if chosen.comparisons[0].direction == 'minimize' else 'higher'} mean of "
            f"its runs ({chosen.typical:.4g} vs {by_median.typical:.4g}): with a few runs a "
            "median is one or two of them, the mean uses them all")


def _gain(e: Evidence) -> float:
    imp = e.comparisons[0].improvement
    return imp if imp is not None else -math.inf


def _worse(c: Comparison) -> bool:
    return c.high is not None and c.high < 0


def describe(c: Comparison, *, rank_test: bool = True) -> str:
    """``p99 median 0.0107 vs 0.0182 (improvement +41.2%, 95% CI +38.0% .. +44.1%, one-sided
    rank test p = 0.05 (at most 0.05 to call it better); n=3 vs 3)``. ``rank_test=False``
    leaves the rank test out where it answers no question the sentence asks (the runner-up
    better than the chosen one, or the two equivalent: its p is of "the chosen is better")."""
    if c.improvement is None:
        return f"{c.metric}: the baseline median is 0, no relative change is defined"
    text = (f"{c.metric} median {c.candidate_median:.4g} vs {c.baseline_median:.4g} "
            f"(improvement {c.improvement:+.1%}")
    if c.low is not None and c.high is not None:
        text += f", {_percent(c.confidence)} CI {c.low:+.1%} .. {c.high:+.1%}"
    else:
        text += ", no interval: fewer than 2 values on a side"
    if c.separation is not None and rank_test:
        text += (f", one-sided rank test p = {c.separation:.2g} "
                 f"(at most {c.rank_level:.2g} to call it better)")
    n = f"{c.n_candidate}{' (noise borrowed from the baseline)' if c.borrowed_noise else ''}"
    if c.with_search:
        n = (f"{c.n_candidate} ({c.n_candidate - c.with_search} confirmation run(s) + "
             f"{c.with_search} search measurement(s), used only to rule it out)")
    return text + f"; n={n} vs {c.n_baseline})"


def _percent(confidence: float) -> str:
    """95% -> "95%", 98.75% -> "98.75%": as precise as the confidence is."""
    return f"{confidence * 100:.4g}%"


def _adopt_reason(e: Evidence, confirmed: bool) -> str:
    text = (f"{e.id} beats the baseline by more than the noise: {describe(e.comparisons[0])}; "
            f"constraints satisfied in every run ({e.runs})")
    if confirmed:
        return text
    return (f"{text}. Not confirmed by repeats, but the whole interval is above "
            f"{FALLBACK_MARGIN:.0%}; `autotune confirm` would make it firmer")


def _unclear_reason(e: Evidence, confirmed: bool) -> str:
    c = e.comparisons[0]
    text = f"too noisy to decide: {e.id}: {describe(c)}"
    if (c.low is not None and c.low > 0 and c.separation is not None
            and c.separation > c.rank_level + _ROUNDING):
        text += ("; the interval clears 0 but the runs overlap too much for the rank test "
                 "(module autotune.evidence.significance, \"Exact\")")
    if c.repeats_needed is None:
        more = "at least 2 repeats per configuration are needed to estimate the noise"
    elif c.repeats_needed > MANY_REPEATS:
        more = (f"the 1/sqrt(n) rule asks for {c.repeats_needed} repeats per configuration, "
                f"more than any study runs. Either the difference is too close to the "
                f"{PRACTICAL:.0%} margin to settle, or one or a few runs are far from the rest. "
                "The report lists every run: check those for throttling or foreign load. If "
                "they are real, they are the configuration's tail risk, not noise to average "
                "away")
    else:
        more = (f"about {c.repeats_needed} repeats per configuration would settle it "
                "(the interval's half-width shrinks as 1/sqrt(n))")
    if confirmed:
        return f"{text}; {more}"
    return (f"{text}; it was measured only during the search, where the best of many single "
            f"measurements is optimistic, so without confirmation runs only a lower bound above "
            f"{FALLBACK_MARGIN:.0%} is adopted; run `autotune confirm` ({more})")


def _keep_reason(candidates: Sequence[Evidence]) -> str:
    parts = []
    for e in candidates:
        c = e.comparisons[0]
        if not e.feasible:
            parts.append(f"{e.id} violated a constraint in at least one run")
        elif c.outcome == "better":
            worse = next(x for x in e.comparisons[1:] if _worse(x))
            parts.append(f"{e.id} is better on {c.metric} but significantly worse on "
                         f"{worse.metric}")
        else:
            parts.append(f"{e.id}: {describe(c)}")
    # Review finding: it said "(at least 5% still plausible)", the opposite of what keeping
    # the current settings means (every interval rules a gain of 5% out).
    return ("no candidate is better than the baseline by a worthwhile margin (an improvement "
            f"of {PRACTICAL:.0%} or more is ruled out): " + "; ".join(parts))
