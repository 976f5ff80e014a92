"""Durations as people write them: ``500ms``, ``15s``, ``1m30s``, ``2h``, or plain seconds."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Spaces may separate a number from its unit and the parts ("1 m 30 s"), never split a number
# ("1 5s" is refused, not read as 15 s). The pattern is what editors check (``autotune schema``):
# it accepts exactly what ``parse_duration`` does.
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
DURATION_PATTERN = r"^\s*(\d+(\.\d+)?\s*(ms|s|m|h|d)\s*)+$"


def parse_duration(value: object) -> float:
    """Return seconds. Raises ValueError with a message fit for the user."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r} (use e.g. 15s, 500ms, 1m30s)")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("must not be negative")
        try:
            return float(value)
        except OverflowError:  # an integer of hundreds of digits
            raise ValueError("too large (at most 365d)") from None
    if not isinstance(value, str):
        raise ValueError(f"not a duration: {value!r} (use e.g. 15s, 500ms, 1m30s)")
    text = value.strip()
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {value!r} (use e.g. 15s, 500ms, 1m30s)")
    return total


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.3g}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 120:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
