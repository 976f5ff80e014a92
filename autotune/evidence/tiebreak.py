"""When the candidate the report would adopt is not told apart from another one that may be
better: the tie-break rule of the sequential confirmation
(``autotune.study.confirmation.tiebreak.tiebreak_round``). Pure.

The report adopts, among the candidates it calls better than the baseline, the one with the
best mean of its runs (``significance.typical``). With three runs each, one slow run of the
truly better candidate can hand the choice to another: on the demo grid of 2026-12-05 (c) the
best configuration's three recorded windows were 7.7, 7.7 and 12.2 ms and the next one's
9.8-11.9 ms, and the replayed confirmation chose the next one in 28 of 100 runs
(docs/measurements/tiebreak-2026-12-05.txt). So the leader (the one the report would adopt)
and a **rival** each get one more run, at most ``TIE_BREAKS`` times, and the report chooses on
all of them. A rival the report also calls better ``contests`` the leader when the two are
``tied``:

- their runs overlap (some run of the rival is as good as some run of the leader), and
- their means are within ``TIE_GAP`` of each other (relative to the leader's).

The gap is the precision the tool claims for its choice (a recommendation within 10% of the
best): a larger lead is kept without spending a trial on it.

A rival need not be called better yet (since 2026-12-06): the looks drop a candidate after a
slow run (three candidates in round 1, the two best after it), and one dropped on one or two
runs is "unclear", however good it is. It contests when the tie-break's runs could still make
it better (``autotune.study.confirmation.tiebreak`` counts that) and its mean is better than the
leader's,
read over its confirmation runs and the search measurement that chose it. The search value
flatters it (the best of many looks better than it is), so it only decides where the runs go;
the report judges and chooses on confirmation runs alone. A tied one not called better is left
out: measuring those too gained 1-4 runs in 100 on five grids and cost 0.7 simulated minutes at
the median on three (docs/measurements/tiebreak-2026-12-06.txt).
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.evidence.significance import Direction, rank_key, typical

TIE_BREAKS = 2
"""The most tie-break rounds one confirmation gives: a third gained nothing in the replay."""

TIE_GAP = 0.10
"""Means closer than this, relative to the better one's, are a tie."""


def tied(leader: Sequence[float], runner_up: Sequence[float], direction: Direction) -> bool:
    """Whether the runs of the leader (the better mean) and of the runner-up call for a
    tie-break: they overlap and their means are within ``TIE_GAP``. Pure."""
    if not leader or not runner_up:
        return False
    sign = 1.0 if direction == "minimize" else -1.0
    if min(sign * v for v in runner_up) > max(sign * v for v in leader):
        return False
    lead, other = typical(leader), typical(runner_up)
    return abs(other - lead) < TIE_GAP * abs(lead)


def contests(leader: Sequence[float], rival: Sequence[float], direction: Direction, *,
             adoptable: bool) -> bool:
    """Whether a tie-break measures ``rival`` with ``leader`` (the candidate the report would
    adopt, the best mean among those it calls better): a rival it also calls better
    (``adoptable``) when the two are ``tied``; one it does not call better yet when its mean
    is better than the leader's. Pure."""
    if not leader or not rival:
        return False
    if adoptable:
        return tied(leader, rival, direction)
    return rank_key(rival, direction) < rank_key(leader, direction)
