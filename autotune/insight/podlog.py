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


def trace_in_window(text: str, start: float, end: float) -> Trace | str:
    """The samples printed during [start, end] (Unix seconds), ``at_ms`` re-based to ``start``;
    or why there are none to give."""
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
    return Trace(tuple(inside), parser.skipped, tuple(parser.reasons))
