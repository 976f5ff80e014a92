"""Process identity from /proc: a PID plus its start time names one process, never a recycled PID.

Kept outside ``autotune.platforms.local`` because the study storage uses it too (to tell a
dead worker's RUNNING trial from a live one).
"""

from __future__ import annotations

import os
from pathlib import Path


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def alive(pid: int, started: str | None) -> bool:
    """True if ``pid`` is the same process that was recorded (not a recycled PID, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] != "Z" and (started is None or fields[19] == started)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one live process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
