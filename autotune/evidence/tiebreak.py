"""When two candidates the report could adopt are not told apart by their means: the tie-break
rule of the sequential confirmation (``autotune.study.confirm.tiebreak_round``). Pure.

The report adopts, among the candidates it calls better than the baseline, the one with the
best mean of its runs (``significance.typical``). With three runs each, one slow run of the
truly better candidate can hand the choice to the other: on the demo grid of 2026-12-05 (c)
the best configuration's three recorded windows were 7.7, 7.7 and 12.2 ms and the next one's
9.8-11.9 ms, and the replayed confirmation chose the next one in 28 of 100 runs
(docs/measurements/tiebreak-2026-12-05.txt). So when the two leading adoptable candidates

- have overlapping runs (some run of the runner-up is as good as some run of the leader), and
- means within ``TIE_GAP`` of each other (relative to the leader's),

each gets one more run, at most ``TIE_BREAKS`` times, and the report chooses on all of them.
The gap is the precision the tool claims for its choice (a recommendation within 10% of the
best): a larger lead is kept without spending a trial on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.evidence.significance import Direction, typical

TIE_BREAKS = 2
"""The most tie-break rounds one confirmation gives: a third gained nothing in the replay."""

TIE_GAP = 0.10
"""Means closer than this, relative to the leader's, are a tie."""


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
