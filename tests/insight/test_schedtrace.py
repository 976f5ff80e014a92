"""The schedtrace parser on real recordings of several Go versions and on damaged input."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.insight import schedtrace
from autotune.insight.schedtrace import (
    Parser,
    Sample,
    compact,
    merge_godebug,
    p999,
    parse,
    summarize,
)

DATA = Path(__file__).parent.parent / "data" / "schedtrace"
RECORDED = sorted(DATA.glob("go*.txt"))
HEADER = re.compile(
    r"# recorded \d{4}-\d{2}-\d{2} with go(\d+)\.(\d+)(?:\.\d+)? by benchmarks/record_schedtrace.py"
)
GOMAXPROCS = 2  # what benchmarks/record_schedtrace.py sets


def _version(path: Path) -> tuple[int, int]:
    match = HEADER.fullmatch(path.read_text().splitlines()[0])
    assert match, path.name
    return int(match.group(1)), int(match.group(2))


def _line(
    at_ms: int = 0, runqueue: int = 0, local: str = "[0 0]", needspinning: bool = True
) -> str:
    spin = " needspinning=0" if needspinning else ""
    return (f"SCHED {at_ms}ms: gomaxprocs=2 idleprocs=1 threads=4 spinningthreads=0{spin} "
            f"idlethreads=2 runqueue={runqueue} {local}\n")


def test_the_recordings_cover_each_format() -> None:
    versions = {_version(p) for p in RECORDED}
    assert any(v < (1, 21) for v in versions)  # no needspinning
    assert any((1, 21) <= v < (1, 25) for v in versions)  # needspinning, "[0 0]"
    assert any(v >= (1, 25) for v in versions)  # "[ 0 0 ] schedticks=[ ... ]"
    assert {p.name.endswith("-detail.txt") for p in RECORDED} == {True, False}


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_every_recording_parses_completely(path: Path) -> None:
    text = path.read_text()
    assert len(text.encode()) < 40_000
    assert f"GOMAXPROCS={GOMAXPROCS} " in text.splitlines()[1]
    trace = parse(text)
    assert trace.skipped == 0, trace.reasons
    # Independent of the parser: one sample per line the runtime started with "SCHED ".
    assert len(trace.samples) == sum(1 for line in text.splitlines() if line.startswith("SCHED "))
    assert len(trace.samples) > 0
    assert {s.gomaxprocs for s in trace.samples} == {GOMAXPROCS}
    assert all(len(s.local) == GOMAXPROCS for s in trace.samples)  # scheddetail's P lines too
    times = [s.at_ms for s in trace.samples]
    assert times == sorted(times) and times[0] == 0
    has_needspinning = {s.needspinning is not None for s in trace.samples}
    assert has_needspinning == {_version(path) >= (1, 21)}


@pytest.mark.parametrize("path", [p for p in RECORDED if "detail" not in p.name],
                         ids=lambda p: p.name)
def test_plain_recordings_show_the_idle_and_pressure_phases(path: Path) -> None:
    samples = parse(path.read_text()).samples
    assert len(samples) >= 45  # ~5 s at schedtrace=100
    idle = [s for s in samples
            if s.idleprocs == GOMAXPROCS and s.runqueue == 0 and s.local == (0, 0)]
    assert len(idle) >= 5
    # Bursts of 3000 goroutines from one P overflow its local queue into the global one.
    assert max(s.runqueue for s in samples) > 1000
    assert max(max(s.local) for s in samples) > 0
    assert all(max(s.local) <= 256 for s in samples)  # the local queue's capacity


@pytest.mark.parametrize("path", [p for p in RECORDED if "detail" in p.name], ids=lambda p: p.name)
def test_detail_recordings_take_local_queues_from_the_p_lines(path: Path) -> None:
    text = path.read_text()
    samples = parse(text).samples
    p_lines = [int(m) for m in re.findall(r"^  P\d+: .* runqsize=(\d+) ", text, re.M)]
    assert [n for s in samples for n in s.local] == p_lines
    assert max(p_lines) > 0


def test_the_formats_of_each_version_give_the_same_sample() -> None:
    old = ("SCHED 5ms: gomaxprocs=2 idleprocs=0 threads=5 spinningthreads=1 idlethreads=2 "
           "runqueue=3 [4 5]\n")
    mid = old.replace("spinningthreads=1", "spinningthreads=1 needspinning=1")
    new = mid.replace("[4 5]", "[ 4 5 ] schedticks=[ 100 7 ]")
    expected = Sample(at_ms=5, gomaxprocs=2, idleprocs=0, threads=5, spinningthreads=1,
                      needspinning=1, idlethreads=2, runqueue=3, local=(4, 5))
    assert parse(mid).samples == parse(new).samples == (expected,)
    assert parse(old).samples == (replace(expected, needspinning=None),)


def test_malformed_input_is_counted_and_the_valid_lines_survive() -> None:
    trace = parse((DATA / "malformed.txt").read_text())
    assert [s.at_ms for s in trace.samples] == [0, 100, 500, 700, 1300, 1400]
    by_ms = {s.at_ms: s for s in trace.samples}
    assert by_ms[100].local == (256, 17) and by_ms[100].runqueue == 129
    assert by_ms[500].runqueue == 2**64 - 1  # the largest count the runtime can print
    assert by_ms[700].runqueue == 5  # program output before SCHED on the same line
    assert by_ms[1300].local == () and by_ms[1300].runqueue == 9  # P1's line is missing
    # 200 (missing field), 300 (negative), 400 (> uint64), 600 (program output inside),
    # 800 (text after), 900 (unterminated), -5ms, 1000 (duplicate), 1100 (gomaxprocs=0),
    # 1200 (non-ASCII digit), 1500 (truncated final line)
    assert trace.skipped == 11
    assert len(trace.reasons) == schedtrace.MAX_REASONS
    assert trace.reasons[0].startswith("line 6: missing field runqueue")


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("SCHED 1ms: gomaxprocs=2 idleprocs=0 threads=5 spinningthreads=0 idlethreads=2 "
         "runqueue=99999999999999999999 [0 0]", "runqueue exceeds uint64"),
        ("SCHED 1ms: gomaxprocs=2 idleprocs=0 threads=5 spinningthreads=0 idlethreads=2 "
         "runqueue=1", "missing local run queues"),
        ("SCHED 1ms: gomaxprocs=2 idleprocs=0 threads=5 spinningthreads=0 idlethreads=2 "
         "runqueue=1 []", "empty local run queues"),
        ("SCHED 1ms: gomaxprocs=2 idleprocs=0 threads=5 spinningthreads=0 idlethreads=2 "
         "runqueue=1 [0 x]", "bad value local='x'"),
        ("gomaxprocs=2 idleprocs=0 threads=5", "no 'SCHED <n>ms: ' prefix"),
    ],
)
def test_each_kind_of_bad_scheduler_line_says_why(line: str, reason: str) -> None:
    trace = parse(line + "\n")
    assert trace.samples == ()
    assert trace.skipped == 1
    assert reason in trace.reasons[0]


def test_a_final_line_without_newline_is_skipped_and_counted() -> None:
    parser = Parser()
    assert parser.feed(_line(runqueue=7).rstrip("\n")) == []
    assert parser.close() == []
    assert parser.skipped == 1 and "truncated final line" in parser.reasons[0]
    # Program output cut off at the end is not the runtime's business.
    parser = Parser()
    assert len(parser.feed(_line() + "partial program outp")) == 1
    assert parser.close() == [] and parser.skipped == 0


def test_non_scheduler_lines_are_ignored_not_counted() -> None:
    text = "starting\n  M0: p=0 curg=1\n  G1: status=2() m=0\n  P0: runqsize=4 \n" + _line()
    trace = parse(text)
    assert len(trace.samples) == 1 and trace.skipped == 0


SHORT = (
    "app started\n"
    + _line(0, 0, "[0 0]", needspinning=False)
    + _line(100, 300, "[ 256 1 ] schedticks=[ 4 5 ]").replace("\n", "\r\n")
    + "SCHED 200ms: gomaxprocs=2 idleprocs=0 threads=5 bogus\n"
    + "SCHED 300ms: gomaxprocs=2 idleprocs=0 threads=5 spinningthreads=0 idlethreads=2 runqueue=4"
    " gcwaiting=false nmidlelocked=0 stopwait=0 sysmonwait=false\n"
    "  P0: status=1 schedtick=1 syscalltick=0 m=0 runqsize=7 gfreecnt=0 timerslen=0\n"
    "  P1: status=0 schedtick=1 syscalltick=0 m=nil runqsize=2 gfreecnt=0 timerslen=0\n"
    "  M0: p=0 curg=1 mallocing=0\n"
    + _line(400, 1, "[1 1]")
    + "SCHED 500ms: gomaxprocs=2 idle"
)


def test_feeding_in_two_chunks_at_every_offset_equals_parsing_the_whole() -> None:
    whole = parse(SHORT)
    assert [s.at_ms for s in whole.samples] == [0, 100, 300, 400]
    assert whole.samples[2].local == (7, 2)
    assert whole.skipped == 2  # the 200 ms line and the truncated 500 ms one
    for cut in range(len(SHORT) + 1):
        parser = Parser()
        samples = parser.feed(SHORT[:cut]) + parser.feed(SHORT[cut:]) + parser.close()
        assert tuple(samples) == whole.samples, cut
        assert parser.skipped == whole.skipped, cut


def test_feeding_one_character_at_a_time() -> None:
    parser = Parser()
    samples = [s for ch in SHORT for s in parser.feed(ch)] + parser.close()
    assert tuple(samples) == parse(SHORT).samples


def test_a_sample_is_returned_as_soon_as_its_line_is_complete() -> None:
    parser = Parser()
    line = _line(100, 3)
    assert parser.feed(line[:20]) == []
    assert [s.runqueue for s in parser.feed(line[20:])] == [3]


def test_scheddetail_p_lines_out_of_order_leave_the_local_queues_unknown() -> None:
    text = (
        "SCHED 0ms: gomaxprocs=2 idleprocs=0 threads=5 spinningthreads=0 idlethreads=2 runqueue=4"
        " gcwaiting=0 nmidlelocked=0 stopwait=0 sysmonwait=0\n"
        "  P1: status=1 schedtick=1 syscalltick=0 m=0 runqsize=7 gfreecnt=0 timerslen=0\n"
        "  P0: status=1 schedtick=1 syscalltick=0 m=0 runqsize=7 gfreecnt=0 timerslen=0\n"
    )
    (sample,) = parse(text).samples
    assert sample.local == () and sample.runqueue == 4


def test_an_over_long_line_is_dropped_without_buffering_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedtrace, "MAX_LINE", 100)
    parser = Parser()
    assert parser.feed("SCHED " + "9" * 150) == []
    assert parser.skipped == 1 and "line too long" in parser.reasons[0]
    assert parser.feed("9" * 500) == []
    assert len(parser._tail) <= 100
    samples = parser.feed("999\n" + _line(5)) + parser.close()
    assert [s.at_ms for s in samples] == [5] and parser.skipped == 1
    # The program's own over-long output is dropped too, but is no scheduler line to count.
    assert parser.feed("x" * 150) == [] and parser.feed("\n" + _line(6)) != []
    assert parser.skipped == 1


def test_never_raises_on_mangled_recordings() -> None:
    rng = random.Random(7)
    base = (DATA / "go1.19.8.txt").read_text() + (DATA / "go1.27.3-detail.txt").read_text()[:4000]
    alphabet = "SCHED ms:=[] 0123456789-\n\r\x00\u0663PMG" + "gomaxprocs=runqueue="
    for _ in range(200):
        chars = list(base[: rng.randrange(len(base))])
        for _ in range(rng.randrange(1, 40)):
            pos = rng.randrange(len(chars) + 1)
            if rng.random() < 0.5 and pos < len(chars):
                del chars[pos]
            else:
                chars.insert(pos, rng.choice(alphabet))
        text = "".join(chars)
        parser = Parser()
        out: list[Sample] = []
        i = 0
        while i < len(text):
            step = rng.randrange(1, 300)
            out += parser.feed(text[i : i + step])
            i += step
        out += parser.close()
        assert all(s.gomaxprocs >= 1 for s in out)
        assert tuple(out) == parse(text).samples


def _sample(
    runqueue: int, local: tuple[int, ...], idle: int, threads: int, spinning: int
) -> Sample:
    return Sample(at_ms=0, gomaxprocs=2, idleprocs=idle, threads=threads, spinningthreads=spinning,
                  needspinning=0, idlethreads=1, runqueue=runqueue, local=local)


def test_summarize_a_known_series() -> None:
    samples = [
        _sample(0, (1, 2), idle=2, threads=5, spinning=0),
        _sample(130, (256, 10), idle=0, threads=6, spinning=1),
        _sample(40, (3, 0), idle=1, threads=7, spinning=1),
        _sample(7, (), idle=0, threads=5, spinning=0),  # a scheddetail sample without P lines
    ]
    assert summarize(samples) == {
        "samples": 4.0,
        "runq_global_p999": 130.0,
        "runq_global_max": 130.0,
        "runq_local_max": 256.0,
        "runq_total_p999": 396.0,  # 130 + 256 + 10; the sample without locals is left out
        "idle_procs_mean": 0.75,
        "threads_max": 7.0,
        "spinning_mean": 0.5,
    }


def test_summarize_leaves_out_what_cannot_be_computed() -> None:
    assert summarize([]) == {}
    summary = summarize([_sample(7, (), idle=0, threads=5, spinning=0)])
    assert "runq_local_max" not in summary and "runq_total_p999" not in summary
    assert summary["runq_global_max"] == 7.0


def test_p999_is_by_nearest_rank() -> None:
    assert p999([5]) == 5
    assert p999([3, 1, 2]) == 3  # fewer than 1000 values: the maximum
    assert p999(list(range(1, 1001))) == 999  # rank ceil(0.999 * 1000) = 999, not 1000
    assert p999(list(range(1, 2001))) == 1998
    assert p999([*[0] * 1999, 500]) == 0  # one spike in 2000 is above the p99.9


def test_compact_is_column_oriented() -> None:
    samples = [
        Sample(100, 2, 1, 4, 0, None, 2, 3, (1, 2)),
        Sample(200, 2, 0, 5, 1, 1, 1, 9, ()),
    ]
    assert compact(samples) == {
        "t_ms": [100, 200],
        "runqueue": [3, 9],
        "local_sum": [3, None],
        "idleprocs": [1, 0],
        "threads": [4, 5],
    }
    assert compact([]) == {"t_ms": [], "runqueue": [], "local_sum": [], "idleprocs": [],
                           "threads": []}


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        (None, "schedtrace=100"),
        ("", "schedtrace=100"),
        ("gctrace=1", "gctrace=1,schedtrace=100"),
        ("schedtrace=1000,gctrace=1", "gctrace=1,schedtrace=100"),  # ours replaces theirs
        ("schedtrace=0", "schedtrace=100"),
        ("gctrace=1,,scheddetail=1,", "gctrace=1,scheddetail=1,schedtrace=100"),
        (" schedtrace=5,madvdontneed=1", "madvdontneed=1,schedtrace=100"),
        ("schedtracex=1", "schedtracex=1,schedtrace=100"),
    ],
)
def test_merge_godebug(user: str | None, expected: str) -> None:
    assert merge_godebug(user, 100) == expected


def test_merge_godebug_rejects_a_period_that_disables_the_trace() -> None:
    with pytest.raises(ValueError, match="period"):
        merge_godebug("gctrace=1", 0)
