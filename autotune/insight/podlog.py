"""schedtrace lines out of a container log fetched with ``timestamps=true`` (Kubernetes).

The kubelet prefixes every line it serves with the time the container runtime received it, in
``RFC3339NanoFixed`` (``2006-01-02T15:04:05.000000000Z07:00``, kubernetes
``pkg/kubelet/kuberuntime/logs/logs.go`` ``timeFormatOut``) followed by one space; older runtimes'
lenient form without trailing zeros is accepted too. The runtime's own ``SCHED <ms>ms:`` counts
from process start, so the wall-clock time of each sample is ``offset + ms`` where ``offset`` is
the median of ``stamp - ms`` over the log's SCHED lines: robust to the odd line whose stamp came
late (a CRI log rotation, a slow pipe).
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import statistics
from dataclasses import replace

from autotune.insight.schedtrace import Parser, Trace

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ",
                    re.ASCII)
_SCHED_MS = re.compile(r"SCHED ([0-9]{1,20})ms: ", re.ASCII)


def stamp_seconds(line: str) -> tuple[float, str] | None:
    """(Unix seconds, the rest of the line) for a kubelet-stamped line, or None."""
    match = _STAMP.match(line)
    if match is None:
        return None
    zone = "+00:00" if match[3] == "Z" else match[3]
    try:
        whole = dt.datetime.fromisoformat(match[1] + zone)
    except ValueError:
        return None
    fraction = int((match[2] or "0").ljust(9, "0")) / 1e9
    return whole.timestamp() + fraction, line[match.end():]


def trace_in_window(text: str, start: float, end: float, *,
                    truncated: bool = False) -> Trace | str:
    """The samples printed during [start, end] (Unix seconds), ``at_ms`` re-based to ``start``;
    or why there are none to give. ``truncated``: the kubelet cut the log at ``limitBytes``.

    The trace says it is ``incomplete`` when the samples do not cover the window: the log
    starts after the window's start (the kubelet serves only the current log file: a rotation
    during the window loses its beginning), ends before its end (cut at ``limitBytes``, which
    counts from ``sinceSeconds``), or has a hole; a gap is judged against the runtime's own
    period (the median step of its ``SCHED <ms>ms``)."""
    lines: list[str] = []
    offsets: list[float] = []
    unstamped = 0
    for raw in text.split("\n"):
        if not raw:
            continue
        stamped = stamp_seconds(raw)
        if stamped is None:
            unstamped += 1
            continue
        at, rest = stamped
        lines.append(rest)
        head = _SCHED_MS.search(rest)
        if head is not None:
            offsets.append(at - int(head[1]) / 1000)
    if not offsets:
        why = (f"{unstamped} line(s) without the kubelet's timestamp"
               if unstamped else "no line at all")
        return (f"no SCHED line in the container's log ({why}): is GODEBUG=schedtrace reaching "
                "the Go runtime, and does the container log its stderr?")
    offset = statistics.median(offsets)
    parser = Parser()
    samples = parser.feed("\n".join(lines) + "\n") + parser.close()
    inside = []
    for s in samples:
        at = offset + s.at_ms / 1000
        if start <= at <= end:
            inside.append(replace(s, at_ms=round((at - start) * 1000)))
    stamps = sorted(offset + s.at_ms / 1000 for s in samples)
    return Trace(tuple(inside), parser.skipped, tuple(parser.reasons),
                 incomplete=_missing(stamps, start, end, truncated))


def _missing(stamps: list[float], start: float, end: float, truncated: bool) -> str:
    """What part of [start, end] the samples at ``stamps`` (seconds) do not cover, or ""."""
    steps = [b - a for a, b in itertools.pairwise(stamps) if b > a]
    if not stamps or not steps:
        return "fewer than two SCHED lines in the log" if stamps else ""
    period = statistics.median(steps)
    slack = 2 * period
    cut = (" (the kubelet cut the log at limitBytes, counted from the window's start: the "
           "service logs more than that)" if truncated else "")
    problems = []
    if stamps[0] > start + slack:
        problems.append(f"the log starts {stamps[0] - start:.1f}s into the window (rotated "
                        "during it? the kubelet serves only the current log file)")
    if stamps[-1] < end - slack:
        problems.append(f"the log ends {end - stamps[-1]:.1f}s before the window's end{cut}")
    elif truncated:
        problems.append("the kubelet cut the log at limitBytes")
    within = [t for t in stamps if start - slack <= t <= end + slack]
    holes = [b - a for a, b in itertools.pairwise(within) if b - a > 3 * period]
    if holes:
        problems.append(f"{len(holes)} gap(s) in the log, the longest {max(holes):.1f}s")
    return "; ".join(problems)
