"""wait_until on a FakeClock: when the predicate runs, what comes back; nothing really sleeps."""

from __future__ import annotations

import time

import pytest

from autotune.clock import FakeClock, wait_until


def test_returns_the_first_truthy_value_and_polls_at_the_given_pace() -> None:
    clock = FakeClock()
    seen: list[float] = []

    def ready() -> str | None:
        seen.append(clock.monotonic())
        return "up" if clock.monotonic() >= 0.35 else None

    t0 = time.monotonic()
    assert wait_until(clock, ready, timeout=5, every=0.1) == "up"
    assert time.monotonic() - t0 < 1  # the FakeClock advanced, real time did not
    assert seen == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_immediate_success_does_not_sleep() -> None:
    clock = FakeClock()
    assert wait_until(clock, lambda: 42, timeout=5, every=1) == 42
    assert clock.monotonic() == 0


def test_timeout_without_error_returns_the_last_value_after_a_call_at_the_deadline() -> None:
    clock = FakeClock()
    calls: list[float] = []

    def never() -> int:
        calls.append(clock.monotonic())
        return 0

    assert wait_until(clock, never, timeout=1.0, every=0.3) == 0
    # every 0.3 s, and one last call exactly at the deadline, never past it
    assert calls == pytest.approx([0.0, 0.3, 0.6, 0.9, 1.0])
    assert clock.monotonic() == pytest.approx(1.0)


def test_timeout_with_error_raises_it_built_from_the_last_value() -> None:
    clock = FakeClock()
    values = iter(range(100))

    with pytest.raises(TimeoutError, match="last 0 of 3") as info:
        wait_until(clock, lambda: next(values) * 0, timeout=0.2, every=0.1,
                   error=lambda last: TimeoutError(f"last {last} of 3"))
    assert isinstance(info.value, TimeoutError)
    assert clock.monotonic() == pytest.approx(0.2)


def test_a_predicate_can_stop_the_wait_by_raising() -> None:
    clock = FakeClock()

    def dead() -> bool:
        if clock.monotonic() >= 0.2:
            raise RuntimeError("process exited")
        return False

    with pytest.raises(RuntimeError, match="exited"):
        wait_until(clock, dead, timeout=10, every=0.1)
    assert clock.monotonic() == pytest.approx(0.2)


def test_zero_timeout_calls_once() -> None:
    clock = FakeClock()
    calls = []
    assert wait_until(clock, lambda: calls.append(1), timeout=0, every=1) is None
    assert calls == [1] and clock.monotonic() == 0


def test_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match="every"):
        wait_until(FakeClock(), lambda: True, timeout=1, every=0)
