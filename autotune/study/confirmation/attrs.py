"""What a confirmation records on the search study (user attrs), and reads back: the levels its
verdict and looks were judged at, the verdict rule, and each extension round (``Extension``).
Pure: the callers set and get the attrs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.evidence.extension import MOST_ADDED, extension_level

CONFIDENCE_ATTR = "confirm_confidence"
"""Search-study user attr: the confidence of the sequential confirmation's verdict (its last
look); the report's verdict uses it (absent: ``significance.CONFIDENCE``, a fixed design)."""

LOOK_CONFIDENCE_ATTR = "confirm_look_confidence"
"""Search-study user attr: the confidence of each earlier look that can decide, the ones that may
stop the confirmation. Absent when no early look could decide (``silent_looks``: one round, or
the default 3 with no earlier runs), and in studies confirmed before the split (they looked at
``CONFIDENCE_ATTR`` every time)."""

RULE_ATTR = "verdict_rule"
"""Search-study user attr: the rule its confirmation was run under (``RULE``). Absent in a study
confirmed before 2026-12-04, when a candidate's search measurement counted as evidence for it
and each candidate was judged at the family's level: the report, judging by today's rule, says
that a report made then may have given another verdict on the same runs."""

RULE = 4
"""Confirmation runs alone for "better", Bonferroni over the candidates (``looks``), and
"better" held to its level by the exact rank test (``significance.separation_p``; 3 since
2026-12-04 (d), 2 before); 4 since 2026-12-07: the fixed rounds (``--fixed``) need
``standing.MIN_RUNS`` runs a side too, as the sequential ones did under 3."""

ROUNDS_ATTR = "confirm_rounds"
"""Search-study user attr: ``{"search_trials": n, "after_round": r, "since_round": s, "options":
{"top", "repeats", "sequential"}, "open": bool}``, the search this study's latest confirmation
confirmed (its measured search trials), the last round before that search's first confirmation
round, the last round before this call's first, its options, and whether the call has not
finished (set before its first round, cleared after its last). A confirmation of the same
search continues in those rounds, its done slots held; one still open (killed, or its night
failed in it) with the same options is resumed as planned: the looks, extension and tie-breaks
it had count (``run.held_rounds`` after ``since_round``), its levels count the runs held before
``since_round``. Once the search has gone on (the next night of a continued study),
tonight's rounds are numbered after every earlier one, so that round 1 is not taken for the
earlier night's round 1 (its baseline slot held, tonight's candidates confirmed against no new
baseline run). Absent in a study confirmed before 2026-12-06: its next confirmation counts
rounds from 1, as then, and records it; without ``since_round``, ``options`` and ``open``
(before 2026-12-07) a call is never taken for a resume."""

EXTENSION_ATTR = "confirm_extension"
"""Search-study user attr: ``{settings key: Extension as a dict}`` for each candidate given an
extension round (``extension_round``), recorded before that round is measured (``extensions``
reads it back)."""


@dataclass(frozen=True)
class Extension:
    """One candidate's extension round (``extension_round``). The baseline's runs in that round
    count in this candidate's comparison only (in the report and in a later night's looks):
    pooled for the other candidates (judged on their planned runs at their full share) they
    would be a second look nothing pays for, and they stay out of the drift trend too."""

    level: float
    """The rank test's level, recorded before the round was measured."""
    round: int
    """The confirmation round the extension was measured in."""
    runs: tuple[int, int]
    """The candidate's and the baseline's runs at the planned look the level was counted for."""
    added: int = 1
    """Runs of each the round adds (``autotune.evidence.extension``: the fewest that could
    pass; 1 in a study extended before 2026-12-05 (b))."""

    def judged_at(self, alpha: float) -> float:
        """The level to judge the candidate at when its share of alpha is ``alpha``: the
        recorded one, or the two-look level recounted at ``alpha`` when a study continued over
        nights judges more candidates and ``alpha`` shrank (0 when no level fits: it cannot be
        called better)."""
        if not 1 <= self.added <= MOST_ADDED:  # a record this version cannot count
            return 0.0
        again = extension_level(*self.runs, alpha, self.added)
        return min(self.level, 0.0 if again is None else again)

    def in_part(self, measured: tuple[int, int]) -> bool:
        """Whether the round was measured in part: ``measured``, the candidate's and the
        baseline's completed runs in it, is neither none nor ``added`` of each (a run failed for
        good)."""
        return measured not in ((0, 0), (self.added, self.added))

    def level_for(self, alpha: float, measured: tuple[int, int]) -> float:
        """The level the report and the looks judge the candidate at (``judged_at``), or 0 when
        the round was measured in part (``in_part``): its level was counted for ``added`` runs
        of each, and no other count is paid for, so it cannot be called better. A round not yet
        measured already holds the candidate to the stricter level."""
        return 0.0 if self.in_part(measured) else self.judged_at(alpha)

    def record(self) -> dict[str, Any]:
        return {"level": self.level, "round": self.round, "runs": list(self.runs),
                "added": self.added}


def extensions(attrs: Mapping[str, Any]) -> dict[str, Extension]:
    """The extension rounds a study's search-study user attrs record, by settings key. Pure."""
    return {key: Extension(level=float(e["level"]), round=int(e["round"]),
                           runs=(int(e["runs"][0]), int(e["runs"][1])),
                           added=int(e.get("added", 1)))
            for key, e in (attrs.get(EXTENSION_ATTR) or {}).items()}
