"""Does one member of a pool measure differently from the others? (``target.kubernetes.pool``)

Every member of a pool measures the baseline (``autotune.study.pool``); this compares the
members' baseline runs. The verdict pools the runs of the members that do not differ (the user
declared them equivalent, and their baselines agree) and leaves out those of a member that does.

A member is called different only when every one of its runs lies outside the range of all the
other members' runs AND its median is more than ``DIFFERS`` from the pool's median: with 1-3 runs
a member, a looser rule would flag noise.

Where that calls every member different (two members apart: each is as far from the pool's
median as the other), the runs do not say which one is off. Given the ``reference`` member (the
target, which also runs the confirmation), the others are called different and the reference is
kept: without it every run was left out and the verdict had no baseline at all.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class MemberBaseline:
    member: str
    values: tuple[float, ...]
    median: float
    pool_median: float
    """The median of the members' medians."""
    differs: bool

    def text(self, metric: str) -> str:
        off = self.median / self.pool_median - 1 if self.pool_median else 0.0
        line = (f"{self.member}: baseline {metric} median {self.median:.4g} over "
                f"{len(self.values)} run(s) ({off:+.0%} against the pool's "
                f"{self.pool_median:.4g})")
        if self.differs:
            line += "; DIFFERS from the other members: its trials do not compare with theirs"
        return line


DIFFERS = 0.10
"""How far (relative) a member's baseline median must be from the pool's to be called
different, on top of not overlapping the other members' runs at all."""


def member_baselines(runs: Iterable[tuple[str, float]],
                     reference: str | None = None) -> list[MemberBaseline]:
    """Per member, from (member, baseline value) pairs; empty with fewer than two members."""
    by_member: dict[str, list[float]] = {}
    for member, v in runs:
        by_member.setdefault(member, []).append(v)
    if len(by_member) < 2:
        return []
    pool = statistics.median(statistics.median(v) for v in by_member.values())
    out = []
    for member, values in by_member.items():
        others = [x for m, v in by_member.items() if m != member for x in v]
        apart = all(x < min(others) for x in values) or all(x > max(others) for x in values)
        median = statistics.median(values)
        far = pool != 0 and abs(median / pool - 1) > DIFFERS
        out.append(MemberBaseline(member, tuple(values), median, pool, differs=apart and far))
    if reference in by_member and all(b.differs for b in out):
        out = [replace(b, differs=b.member != reference) for b in out]
    return out


def differing(runs: Iterable[tuple[str, float]],
              reference: str | None = None) -> frozenset[str]:
    """The members whose baseline DIFFERS: their runs are left out of the verdict."""
    return frozenset(b.member for b in member_baselines(runs, reference) if b.differs)
