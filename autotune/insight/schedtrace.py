"""Parse the Go runtime's ``GODEBUG=schedtrace=<ms>`` output into samples and summary metrics.

Every ``<ms>`` the runtime's sysmon prints one line to stderr (``runtime/proc.go``,
``schedtrace``). The formats seen in recordings (``tests/data/schedtrace``):

- Go 1.19::

    SCHED 0ms: gomaxprocs=2 idleprocs=1 threads=4 spinningthreads=0 idlethreads=2 runqueue=0 [0 0]

- Go 1.21 to 1.24 add ``needspinning=`` after ``spinningthreads=``.
- Go 1.25 and later pad the brackets and append per-P scheduler ticks::

    ... runqueue=0 [ 0 0 ] schedticks=[ 0 6 ]

- With ``scheddetail=1`` (any version) the ``SCHED`` line has no brackets but ends with
  ``gcwaiting= nmidlelocked= stopwait= sysmonwait=`` (``0``/``1`` in 1.19, ``false``/``true``
  from 1.21), and is followed by one ``  P<i>: ... runqsize=<n> ...`` line per P, then ``  M<i>:``
  and ``  G<i>:`` lines (every goroutine, dead ones too; a missing P or M shows as ``-1`` in 1.19,
  ``nil`` later). The local run-queue lengths are taken from the P lines.

The runtime prints a line in many small ``write`` calls without a lock shared with the program,
so the program's own stderr output can land inside a line. Hence the parser is defensive: a line
that looks like a scheduler line (contains ``SCHED `` or ``gomaxprocs=``) but does not parse is
skipped and counted, everything else (program output, M and G lines) is ignored silently, and
nothing raises on any input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

# Every count the runtime prints is at most a uint64: more digits is garbage, and bounding the
# digits also keeps int() away from Python's limit on huge decimal strings.
_UINT = r"[0-9]{1,20}"
_UINT_MAX = 2**64 - 1
_HEAD = re.compile(rf"SCHED ({_UINT})ms: ", re.ASCII)
_SCHEDTICKS = re.compile(rf"schedticks=\[(?: *{_UINT})* *\]", re.ASCII)
_P_LINE = re.compile(rf"^\s*P({_UINT}): .*?\brunqsize=({_UINT})(?:\s|$)", re.ASCII)
_MG_LINE = re.compile(rf"^\s*[MG]{_UINT}: ", re.ASCII)
_REQUIRED = ("gomaxprocs", "idleprocs", "threads", "spinningthreads", "idlethreads", "runqueue")
# A scheduler line is ~30 bytes plus ~20 per P; anything this long without a newline is not one,
# and buffering it whole would let a hostile stream grow the parser without bound.
MAX_LINE = 1 << 20
MAX_REASONS = 5

N = TypeVar("N", int, float)


@dataclass(frozen=True)
class Sample:
    """One ``SCHED`` line. ``local`` is the per-P local run-queue lengths, or ``()`` when the
    trace did not give them (a ``scheddetail`` block whose P lines were incomplete)."""

    at_ms: int
    gomaxprocs: int
    idleprocs: int
    threads: int
    spinningthreads: int
    needspinning: int | None  # not printed before Go 1.21
    idlethreads: int
    runqueue: int  # the global run queue
    local: tuple[int, ...]


@dataclass(frozen=True)
class Trace:
    samples: tuple[Sample, ...]
    skipped: int
    reasons: tuple[str, ...]
    source: str = ""  # which process printed it, when the target had several (a pod's name)
    incomplete: str = ""
    """Why part of the window is missing (a log cut or rotated), or "": a trace without the
    whole window can show an overflow, never its absence."""


class _Malformed(Exception):
    pass


@dataclass
class _Pending:
    """A ``scheddetail`` SCHED line waiting for its P lines."""

    sample: Sample
    local: list[int] = field(default_factory=list)
    broken: bool = False


def _uint(text: str, what: str) -> int:
    if not re.fullmatch(_UINT, text, re.ASCII):
        raise _Malformed(f"bad value {what}={text[:24]!r}")
    value = int(text)
    if value > _UINT_MAX:
        raise _Malformed(f"{what} exceeds uint64")
    return value


def _fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for token in text.split():
        key, eq, value = token.partition("=")
        if not eq or not key:
            raise _Malformed(f"unexpected token {token[:24]!r}")
        if key in fields:
            raise _Malformed(f"duplicate field {key}")
        fields[key] = value
    return fields


def _parse_sched(line: str) -> tuple[Sample, bool]:
    """The sample of a SCHED line, and whether it is a ``scheddetail`` one (locals to follow)."""
    head = _HEAD.search(line)
    if head is None:
        raise _Malformed("no 'SCHED <n>ms: ' prefix")
    rest = line[head.end():]
    before, bracket, after = rest.partition("[")
    fields = _fields(before)
    values: dict[str, int] = {}
    for key in _REQUIRED:
        if key not in fields:
            raise _Malformed(f"missing field {key}")
        values[key] = _uint(fields[key], key)
    if values["gomaxprocs"] < 1:
        raise _Malformed("gomaxprocs < 1")
    needspinning = None
    if "needspinning" in fields:
        needspinning = _uint(fields["needspinning"], "needspinning")
    local: tuple[int, ...] = ()
    detailed = False
    if bracket:
        inside, closed, trailer = after.partition("]")
        if not closed:
            raise _Malformed("unterminated local run queues")
        local = tuple(_uint(n, "local") for n in inside.split())
        if not local:
            raise _Malformed("empty local run queues")
        trailer = trailer.strip()
        if trailer and not _SCHEDTICKS.fullmatch(trailer):
            raise _Malformed(f"unexpected text after run queues {trailer[:24]!r}")
    elif "gcwaiting" in fields:
        detailed = True
    else:
        raise _Malformed("missing local run queues")
    sample = Sample(
        at_ms=_uint(head.group(1), "ms"),
        gomaxprocs=values["gomaxprocs"],
        idleprocs=values["idleprocs"],
        threads=values["threads"],
        spinningthreads=values["spinningthreads"],
        needspinning=needspinning,
        idlethreads=values["idlethreads"],
        runqueue=values["runqueue"],
        local=local,
    )
    return sample, detailed


class Parser:
    """Streaming parser: ``feed`` chunks as they arrive (lines may be split anywhere), then
    ``close``. ``skipped`` counts scheduler lines that did not parse; ``reasons`` keeps the first
    few, with their line numbers."""

    def __init__(self) -> None:
        self.skipped = 0
        self.reasons: list[str] = []
        self._tail = ""
        self._line_no = 0
        self._discarding = False  # inside an over-long line whose start was dropped
        self._pending: _Pending | None = None

    def feed(self, chunk: str) -> list[Sample]:
        out: list[Sample] = []
        lines = (self._tail + chunk).split("\n")
        self._tail = lines.pop()
        for line in lines:
            if self._discarding:  # the end of an over-long line, already dealt with
                self._discarding = False
                continue
            self._line_no += 1
            self._line(line.rstrip("\r"), out)
        if len(self._tail) > MAX_LINE:
            if not self._discarding:
                self._line_no += 1
                if _looks_like_sched(self._tail):
                    self._skip("line too long", self._tail)
                self._discarding = True
            self._tail = ""
        return out

    def close(self) -> list[Sample]:
        """Flush: a final line without its newline was cut off mid-print (the runtime ends every
        line with one), so it is skipped rather than trusted."""
        out: list[Sample] = []
        if self._tail and not self._discarding:
            self._line_no += 1
            if _looks_like_sched(self._tail):
                self._skip("truncated final line", self._tail)
        self._tail = ""
        self._discarding = False
        self._finish_pending(out)
        return out

    def _line(self, line: str, out: list[Sample]) -> None:
        if _looks_like_sched(line):
            self._finish_pending(out)
            try:
                sample, detailed = _parse_sched(line)
            except _Malformed as exc:
                self._skip(str(exc), line)
                return
            if detailed:
                self._pending = _Pending(sample)
            else:
                out.append(sample)
            return
        pending = self._pending
        if pending is None:
            return
        p_line = _P_LINE.match(line)
        if p_line is not None:
            if pending.broken or int(p_line.group(1)) != len(pending.local):
                pending.broken = True
            else:
                pending.local.append(int(p_line.group(2)))
                if len(pending.local) == pending.sample.gomaxprocs:
                    self._finish_pending(out)
        elif _MG_LINE.match(line):
            self._finish_pending(out)
        # anything else is the program's own output between the runtime's lines

    def _finish_pending(self, out: list[Sample]) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        complete = not pending.broken and len(pending.local) == pending.sample.gomaxprocs
        local = tuple(pending.local) if complete else ()
        out.append(replace(pending.sample, local=local))

    def _skip(self, reason: str, line: str) -> None:
        self.skipped += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(f"line {self._line_no}: {reason}: {line[:80]!r}")


def _looks_like_sched(line: str) -> bool:
    return "SCHED " in line or "gomaxprocs=" in line


def parse(text: str) -> Trace:
    parser = Parser()
    samples = parser.feed(text) + parser.close()
    return Trace(tuple(samples), parser.skipped, tuple(parser.reasons))


def p999(values: Sequence[N]) -> N:
    """The p99.9 by nearest rank: an observed value (no interpolation), so comparisons with a
    threshold are exact; with fewer than 1000 values it is the maximum."""
    ordered = sorted(values)
    # The epsilon keeps 0.999 * 1000 from rounding up to rank 1000.
    rank = max(1, math.ceil(0.999 * len(ordered) - 1e-9))
    return ordered[rank - 1]


def summarize(samples: Sequence[Sample]) -> dict[str, float]:
    """Metrics usable as objective or constraint values. A metric that cannot be computed is
    absent (never 0): no samples gives ``{}``, no sample with local queues gives no local or total
    metric."""
    if not samples:
        return {}
    out: dict[str, float] = {
        "samples": float(len(samples)),
        "runq_global_p999": float(p999([s.runqueue for s in samples])),
        "runq_global_max": float(max(s.runqueue for s in samples)),
        "idle_procs_mean": sum(s.idleprocs for s in samples) / len(samples),
        "threads_max": float(max(s.threads for s in samples)),
        "spinning_mean": sum(s.spinningthreads for s in samples) / len(samples),
    }
    with_local = [s for s in samples if s.local]
    if with_local:
        out["runq_local_max"] = float(max(max(s.local) for s in with_local))
        out["runq_total_p999"] = float(p999([s.runqueue + sum(s.local) for s in with_local]))
    return out


def compact(samples: Sequence[Sample]) -> dict[str, list[int | None]]:
    """Column-oriented time series for a trial's JSON record; ``local_sum`` is null where the
    sample had no local queues."""
    return {
        "t_ms": [s.at_ms for s in samples],
        "runqueue": [s.runqueue for s in samples],
        "local_sum": [sum(s.local) if s.local else None for s in samples],
        "idleprocs": [s.idleprocs for s in samples],
        "threads": [s.threads for s in samples],
    }


def merge_godebug(user_value: str | None, period_ms: int) -> str:
    """``user_value`` (a GODEBUG value, comma-separated ``key=value``) with ``schedtrace`` set to
    ``period_ms``.

    Ours replaces the user's own ``schedtrace`` setting: the samples are read at a period the tuner
    chose and records (a user's ``schedtrace=0`` would silently disable them). Every other setting,
    ``scheddetail=1`` included (the parser reads that format too), is kept in order; empty items
    are dropped.
    """
    if period_ms < 1:
        raise ValueError(f"schedtrace period must be >= 1 ms, got {period_ms}")
    kept = [
        item for item in (user_value or "").split(",")
        if item.strip() and item.partition("=")[0].strip() != "schedtrace"
    ]
    return ",".join([*kept, f"schedtrace={period_ms}"])
