"""What a trial is for, as stored in its ``kind`` user attr and its journal record.

A ``StrEnum`` so a member compares equal to the plain string the storage holds: records written
before this type existed, and readers that still compare strings, keep working.
"""

from __future__ import annotations

from enum import StrEnum


class TrialKind(StrEnum):
    BASELINE = "baseline"
    """A repeat of the experiment's baseline settings (reference study)."""
    SEARCH = "search"
    """A configuration the sampler or the initial design chose (search study)."""
    CONFIRM = "confirm"
    """A re-measurement of a candidate or the baseline (reference study, ``confirm``)."""
    DRIFT = "drift"
    """A night's re-measurement of earlier winners (reference study, ``nightly``)."""

