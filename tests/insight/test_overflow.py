"""The run-queue overflow rule: p99.9 per 0.5 s step >= threshold for a burst of >= 2.5 s."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from autotune.insight.overflow import Overflow, default_threshold, detect, from_samples
from autotune.insight.schedtrace import Sample, parse

DATA = Path(__file__).parent.parent / "data" / "schedtrace"


def _series(
    start: float, seconds: float, value: float, every: float = 0.1
) -> list[tuple[float, float]]:
    """Samples at start, start + every, ... covering ``seconds`` (n = seconds / every samples)."""
    return [(round(start + i * every, 6), value) for i in range(round(seconds / every))]


def test_default_thresholds_come_from_the_local_queue_capacity() -> None:
    assert default_threshold(2, "global") == 128
    assert default_threshold(64, "global") == 128
    assert default_threshold(1) == 128
    assert default_threshold(2) == 256
    assert default_threshold(8, "total") == 1024
    assert default_threshold(0) == 128  # never below one P's worth


def test_a_burst_of_exactly_2_5_s_fires() -> None:
    result = detect(_series(0, 2.5, 200) + _series(2.5, 1.5, 0), 128)
    assert result.bursts == ((0.0, 2.5),)
    assert result.fired and result.count == 1 and result.longest == 2.5
    assert result.threshold == 128


def test_a_burst_of_2_4_s_does_not() -> None:
    # 0.1 s steps so that 2.4 s is a whole number of steps.
    assert not detect(_series(0, 2.4, 200) + _series(2.4, 1, 0), 128, step=0.1).fired
    fired = detect(_series(0, 2.5, 200) + _series(2.5, 1, 0), 128, step=0.1)
    assert fired.bursts == ((0.0, 2.5),)


def test_with_the_default_step_four_steps_are_not_enough() -> None:
    assert not detect(_series(0, 2.0, 200) + _series(2.0, 1, 0), 128).fired
    assert detect(_series(0, 2.5, 200) + _series(2.5, 1, 0), 128).fired


def test_the_threshold_is_inclusive() -> None:
    assert detect(_series(0, 3, 128), 128).bursts == ((0.0, 3.0),)
    assert not detect(_series(0, 3, 127), 128).fired
    assert not detect(_series(0, 3, 127.999), 128).fired


def test_a_gap_without_samples_splits_a_burst() -> None:
    # 1.5 s high, nothing during [1.5, 2.0), 1.5 s high again: two bursts too short to fire.
    gapped = _series(0, 1.5, 500) + _series(2.0, 1.5, 500)
    assert not detect(gapped, 128).fired
    assert detect(gapped, 128, min_burst=1.5).bursts == ((0.0, 1.5), (2.0, 1.5))
    # The same pressure without the gap is one 3.5 s burst.
    assert detect(_series(0, 3.5, 500), 128).bursts == ((0.0, 3.5),)


def test_a_low_step_splits_a_burst_and_each_long_one_counts() -> None:
    series = _series(0, 3, 300) + _series(3, 0.5, 10) + _series(3.5, 4, 300) + _series(7.5, 1, 10)
    result = detect(series, 128)
    assert result.bursts == ((0.0, 3.0), (3.5, 4.0))
    assert result.count == 2 and result.longest == 4.0


def test_one_sample_over_the_threshold_makes_its_step_high() -> None:
    # Five samples a step: the p99.9 is the maximum, so a spike in every step keeps the burst going.
    series = [(i / 10, 200.0 if i % 5 == 2 else 0.0) for i in range(30)]
    assert detect(series, 128).bursts == ((0.0, 3.0),)


def test_with_more_than_1000_samples_a_step_ignores_a_single_spike() -> None:
    # 2000 samples per 0.5 s step, one spike each: the p99.9 (rank 1998) stays at 0.
    series = [(i / 4000, 900.0 if i % 2000 == 7 else 0.0) for i in range(4000 * 3)]
    assert not detect(series, 128).fired
    two_spikes = [(t, 900.0 if i % 2000 in (7, 8, 9) else v) for i, (t, v) in enumerate(series)]
    assert detect(two_spikes, 128).bursts == ((0.0, 3.0),)


def test_an_empty_series_has_no_burst() -> None:
    result = detect([], 128)
    assert result == Overflow((), 128)
    assert (result.count, result.longest, result.fired) == (0, 0.0, False)


def test_order_does_not_matter_and_failed_reads_are_dropped() -> None:
    series = [*_series(1.0, 3.0, 200), (2.0, math.nan), (math.inf, 500.0)]
    assert detect(list(reversed(series)), 128).bursts == ((1.0, 3.0),)


def test_a_bad_step_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        detect([(0.0, 1.0)], 128, step=0)


def test_to_dict_for_a_trial_record() -> None:
    result = detect(_series(0, 3, 200), 128)
    assert result.to_dict() == {"bursts": [[0.0, 3.0]], "count": 1, "longest": 3.0,
                                "threshold": 128, "fired": True}


def test_from_a_recording_under_pressure() -> None:
    samples = parse((DATA / "go1.27.3.txt").read_text()).samples
    assert max(s.runqueue for s in samples) > 0
    result = from_samples(samples, "global")
    assert result.threshold == 128
    # The program idles 0.5 s, spawns bursts for 3.5 s, then waits ~0.5 s behind the queue it
    # built before its idle phase: runqueue > 1000 from 612 ms to 4515 ms, 0 from 4617 ms.
    assert result.bursts == ((0.5, 4.5),)
    total = from_samples(samples, "total")
    assert total.threshold == 256 and total.bursts == ((0.5, 4.5),)
    assert not from_samples(samples, "global", threshold=10**9).fired


@pytest.mark.parametrize("path", sorted(DATA.glob("go*-detail.txt")), ids=lambda p: p.name)
def test_the_light_load_of_the_detail_recordings_does_not_overflow(path: Path) -> None:
    samples = parse(path.read_text()).samples
    assert not from_samples(samples).fired
    assert not from_samples(samples, "global").fired


def _at(ms: int, runqueue: int, local: tuple[int, ...] = (0, 0), gomaxprocs: int = 2) -> Sample:
    return Sample(at_ms=ms, gomaxprocs=gomaxprocs, idleprocs=0, threads=5, spinningthreads=0,
                  needspinning=0, idlethreads=1, runqueue=runqueue, local=local)


def test_total_adds_the_local_queues_and_skips_samples_without_them() -> None:
    samples = [_at(ms, 100, (100, 100)) for ms in range(0, 3000, 100)]
    assert not from_samples(samples, "global").fired  # 100 < 128
    assert from_samples(samples, "total").bursts == ((0.0, 3.0),)  # 300 >= 256
    without_locals = [_at(ms, 900, ()) for ms in range(0, 3000, 100)]
    assert from_samples(without_locals, "total") == Overflow((), 256)
    assert from_samples(without_locals, "global").fired


def test_the_default_threshold_uses_the_largest_gomaxprocs_seen() -> None:
    samples = [_at(ms, 0, (300, 0), gomaxprocs=2) for ms in range(0, 3000, 100)]
    samples += [_at(3000, 0, (0, 0, 0, 0), gomaxprocs=4)]
    assert from_samples(samples).threshold == 512
    assert not from_samples(samples).fired


def test_sparse_samples_widen_the_step() -> None:
    # schedtrace=1000 with a little jitter: 0.5 s steps would alternate with empty ones.
    samples = [_at(ms, 400) for ms in (0, 1003, 2001, 3010, 4004, 5002)]
    result = from_samples(samples, "global")
    assert result.count == 1 and result.longest == pytest.approx(6.0, abs=0.05)
    assert not detect([(s.at_ms / 1000, s.runqueue) for s in samples], 128).fired
