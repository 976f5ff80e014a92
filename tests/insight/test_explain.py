"""The plain-English explanation: only measured figures, contrasts chosen by size."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from autotune.insight.explain import (
    Breakdown,
    Evidence,
    duration,
    explain,
    percent,
)

BASELINE = Evidence(
    label="the baseline (GOMAXPROCS unset, GOGC=100)",
    settings={"GOMAXPROCS": None, "GOGC": "100"},
    cpu_limit=1.0, p99=0.052, sched_p99=0.0041, gc_pause_p99=0.00031,
    throttled_share=0.41, gc_cpu_share=0.30, idle_share=0.62,
    overflow_count=2, overflow_longest=3.1, overflow_threshold=1024,
    runq_p999=1500.0, gomaxprocs=8,
)
BEST = Evidence(
    label="#1 (GOMAXPROCS=2, GOGC=400)",
    settings={"GOMAXPROCS": "2", "GOGC": "400"},
    cpu_limit=1.0, p99=0.00566, sched_p99=0.00029, gc_pause_p99=0.00028,
    throttled_share=0.12, gc_cpu_share=0.27, idle_share=0.35,
    overflow_count=0, overflow_longest=None, overflow_threshold=256,
    runq_p999=40.0, gomaxprocs=2,
)
WORST = Evidence(
    label="#6 (GOMAXPROCS=8, GOGC=25)", settings={"GOMAXPROCS": "8", "GOGC": "25"},
    cpu_limit=1.0, p99=0.164, throttled_share=0.63, gc_cpu_share=0.71,
    overflow_count=1, overflow_longest=4.5, overflow_threshold=1024,
)
MILD = Evidence(label="#3 (GOMAXPROCS=4, GOGC=100)", p99=0.060, throttled_share=0.5)

_UNITS = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "%": 0.01}
# a number not glued to a word: "p99" and "p99.9" are names, not figures
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(ns|µs|ms|s|%)?(?!\w|\.\d)")


def _figures(e: Evidence) -> list[float]:
    out: list[float] = []
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(float(value))
    for setting in e.settings.values():  # "GOGC=400 (100 in the baseline)"
        if setting is not None and re.fullmatch(r"\d+(\.\d+)?", setting):
            out.append(float(setting))
    return out


def _numbers(text: str, evidence: list[Evidence]) -> list[tuple[float, str]]:
    """Every number in ``text`` with its unit, after taking out what the inputs spell literally
    (labels and settings values)."""
    for e in evidence:
        text = text.replace(e.label, " ")
        for key, value in e.settings.items():
            text = text.replace(f"{key}={value}", " ")
    return [(float(n), unit or "") for n, unit in _NUMBER.findall(text)]


def _assert_from_inputs(text: str, evidence: list[Evidence]) -> None:
    """Each number is an input figure, to the precision the text shows it with."""
    figures = [x for e in evidence for x in _figures(e)]
    for value, unit in _numbers(text, evidence):
        scaled = value * _UNITS.get(unit, 1.0)
        # two significant digits: within 5% (or half a unit of the last digit)
        assert any(abs(scaled - f) <= max(0.05 * abs(f), 0.5 * _UNITS.get(unit, 1.0) * 0.1)
                   for f in figures), f"{value}{unit} is not an input figure in: {text}"


def test_the_full_story_names_the_big_contrasts_with_input_figures_only() -> None:
    text = explain(BASELINE, BEST, [MILD, WORST])
    _assert_from_inputs(text, [BASELINE, BEST, MILD, WORST])
    assert text.startswith("Under a 1-CPU limit, with the baseline")
    assert "GOMAXPROCS=8" in text  # the effective value the baseline ran with
    assert ">= 1024 goroutines for 3.1 s (the longest of 2 bursts)" in text
    assert "41% of CFS periods were throttled" in text
    assert "removed the overflow" in text
    assert "cut throttling to 12%" in text
    assert "p99 from 52 ms to 5.7 ms" in text
    assert "GOGC=400 (100 in the baseline)" in text
    assert "cut the scheduling latency p99 to 290 µs" in text
    # measured on both, hardly different: named as such, not as a contrast
    assert "GC's share of the CPU (30% and 27%)" in text
    assert "the GC pause p99 (310 µs and 280 µs)" in text
    assert "about the same" in text
    # the worst other configuration, not the mildly worse one
    assert "#6 (GOMAXPROCS=8, GOGC=25), reached a p99 of 164 ms" in text
    assert "63% of its CFS periods throttled" in text
    assert "#3" not in text


def test_absent_figures_never_appear() -> None:
    base = Evidence(label="the baseline", p99=0.052, throttled_share=0.41)
    best = Evidence(label="the best", p99=0.0057, throttled_share=0.12)
    text = explain(base, best)
    _assert_from_inputs(text, [base, best])
    for word in ("GC", "overflow", "run queue", "idle", "scheduling", "CPU limit", "GOMAXPROCS"):
        assert word not in text
    assert text == ("With the baseline, 41% of CFS periods were throttled. "
                    "The best cut throttling to 12% and cut p99 from 52 ms to 5.7 ms.")


def test_nothing_measured_says_so() -> None:
    text = explain(Evidence("the baseline"), Evidence("the best"))
    assert text == ("There is not enough measured evidence to explain the difference between "
                    "the baseline and the best.")
    # one-sided figures are not a contrast either
    text = explain(Evidence("a", p99=0.01, throttled_share=0.5), Evidence("b", gc_cpu_share=0.3))
    assert text.startswith("There is not enough measured evidence")
    assert not re.search(r"\d", text)


@pytest.mark.parametrize(("before", "after", "mentioned"), [
    (0.41, 0.36, True),  # exactly 5 points
    (0.41, 0.37, False),
    (0.10, 0.20, True),
    (0.00, 0.04, False),
])
def test_throttling_is_a_contrast_from_5_points(before: float, after: float,
                                                mentioned: bool) -> None:
    text = explain(Evidence("a", p99=0.01, throttled_share=before),
                   Evidence("b", p99=0.005, throttled_share=after))
    assert ("throttling to" in text) is mentioned
    assert ("about the same" in text) is not mentioned
    _assert_from_inputs(text, [Evidence("x", throttled_share=before, p99=0.01),
                               Evidence("y", throttled_share=after, p99=0.005)])


@pytest.mark.parametrize(("before", "after", "mentioned"), [
    (0.45, 0.40, True), (0.45, 0.41, False), (0.10, 0.30, True),
])
def test_gc_cpu_is_a_contrast_from_5_points(before: float, after: float, mentioned: bool) -> None:
    text = explain(Evidence("a", gc_cpu_share=before), Evidence("b", gc_cpu_share=after))
    assert ("GC took" in text) is mentioned
    if after > before and mentioned:
        assert "raised GC's share of the CPU" in text


def test_overflow_is_told_when_one_side_fired() -> None:
    fired = Evidence("a", overflow_count=1, overflow_longest=2.5, overflow_threshold=256)
    quiet = Evidence("b", overflow_count=0, overflow_threshold=256)
    unknown = Evidence("c")
    assert "removed the overflow" in explain(fired, quiet)
    text = explain(quiet, fired)
    assert text == "A let its run queue hold >= 256 goroutines for 2.5 s."
    # not watched on the best: the baseline's overflow is told, but nothing is "removed"
    text = explain(fired, unknown)
    assert "the run queue held >= 256 goroutines for 2.5 s" in text
    assert "removed" not in text
    # neither fired: nothing to say about it
    assert "overflow" not in explain(quiet, dataclasses.replace(quiet, label="d"))
    both = explain(fired, dataclasses.replace(fired, label="e", overflow_longest=3.0))
    assert "still overflowed its run queue for 3 s" in both


def test_worst_other_only_when_dramatically_worse() -> None:
    base = Evidence("the baseline", p99=0.0065)
    best = Evidence("the best", p99=0.0057)
    near = Evidence("#4", p99=0.012)  # < 2x the baseline
    far = Evidence("#7", p99=0.013, throttled_share=0.5, overflow_count=3, overflow_longest=6.0)
    assert "#4" not in explain(base, best, [near])
    text = explain(base, best, [near, far, Evidence("#9")])
    assert ("The worst configuration measured, #7, reached a p99 of 13 ms, with 50% of its CFS "
            "periods throttled and its run queue overflowing for 6 s (the longest of 3 bursts).") \
        in text
    _assert_from_inputs(text, [base, best, near, far])
    # without any p99 for the pair, "dramatically worse" cannot be judged
    assert "#7" not in explain(Evidence("a"), Evidence("b"), [far])


def test_only_p99_measured_says_no_mechanism_was() -> None:
    text = explain(Evidence("a", p99=0.01), Evidence("b", p99=0.005))
    assert text == ("B cut p99 from 10 ms to 5 ms. No scheduler or CPU figure was measured on "
                    "both sides to explain it.")
    text = explain(Evidence("a", p99=0.01, idle_share=0.3), Evidence("b", p99=0.02,
                                                                      idle_share=0.32))
    assert text.startswith("B raised p99 from 10 ms to 20 ms. No measured figure explains it: "
                           "P idle time (30% and 32%) was about the same")


def test_latency_figures_need_a_factor_of_two() -> None:
    a = Evidence("a", sched_p99=0.004, gc_pause_p99=0.001)
    b = Evidence("b", sched_p99=0.0021, gc_pause_p99=0.0005)
    text = explain(a, b)
    assert "cut the GC pause p99 to 500 µs" in text
    assert "scheduling latency p99 (4 ms and 2.1 ms)" in text


def test_run_queue_depth_when_no_overflow_was_watched() -> None:
    text = explain(Evidence("a", runq_p999=300), Evidence("b", runq_p999=20))
    assert "the run queue's p99.9 was 300 goroutines" in text and "cut it to 20" in text
    # short queues are not worth a word, whatever the ratio
    assert "run queue" not in explain(Evidence("a", runq_p999=30), Evidence("b", runq_p999=2))


def test_settings_changes_and_different_limits() -> None:
    a = Evidence("A", settings={"GOGC": "100", "GOMEMLIMIT": "512MiB", "X": None}, cpu_limit=1,
                 throttled_share=0.5)
    b = Evidence("B", settings={"GOGC": None, "GOMEMLIMIT": "512MiB", "X": "1"}, cpu_limit=2,
                 throttled_share=0.1)
    text = explain(a, b)
    assert "with GOGC unset (100 in the baseline) and X=1 (unset in the baseline)" in text
    assert "GOMEMLIMIT" not in text
    assert "A (under a 1-CPU limit)" in text and "B (under a 2-CPU limit)" in text
    _assert_from_inputs(text, [a, b])


def test_units() -> None:
    assert [duration(x) for x in (0.052, 0.00566, 3.1, 1e-4, 0.0009997, 0, 2.5e-7, 150)] == [
        "52 ms", "5.7 ms", "3.1 s", "100 µs", "1 ms", "0 s", "250 ns", "150 s"]
    assert duration(0.001, space=False) == "1ms"
    assert [percent(x) for x in (0.41, 0.057, 0.004, 0.05, 0, 1)] == [
        "41%", "5.7%", "0.4%", "5%", "0%", "100%"]


def test_breakdown_other_only_when_every_class_was_measured() -> None:
    assert Breakdown("a", 0.4, 0.3, 1.2, 2.0, 0.1).other == pytest.approx(0.1)
    assert Breakdown("a", 0.4, None, 1.2, 2.0, 0.1).other is None
    assert Breakdown("a", 0.4, 0.3, 1.4, 2.0, None).other == 0.0  # rate noise, not negative


def test_the_figure_check_catches_an_invented_number() -> None:
    with pytest.raises(AssertionError):
        _assert_from_inputs("p99 went to 7 ms.", [Evidence("a", p99=0.052)])


_KEYWORDS = {
    "throttled_share": "throttl", "gc_cpu_share": "GC's share", "idle_share": "idle",
    "sched_p99": "scheduling latency", "gc_pause_p99": "GC pause",
    "p99": r"(?<!latency )(?<!pause )\bp99\b(?!\.9)",
}


def _random_evidence(rng: random.Random, label: str) -> Evidence:
    def maybe(value: float) -> float | None:
        return value if rng.random() < 0.6 else None

    count = rng.choice([None, 0, 1, 3])
    return Evidence(
        label=label, settings={"GOGC": rng.choice([None, "25", "100", "400"])},
        cpu_limit=maybe(rng.choice([0.5, 1.0, 2.0])), p99=maybe(rng.uniform(1e-4, 0.5)),
        sched_p99=maybe(rng.uniform(1e-6, 0.05)), gc_pause_p99=maybe(rng.uniform(1e-5, 0.01)),
        throttled_share=maybe(rng.random()), gc_cpu_share=maybe(rng.random()),
        idle_share=maybe(rng.random()), overflow_count=count,
        overflow_longest=rng.uniform(2.5, 20) if count else None,
        overflow_threshold=rng.choice([None, 256, 1024]),
        runq_p999=maybe(rng.uniform(0, 3000)), gomaxprocs=rng.choice([None, 1, 2, 8]),
    )


@pytest.mark.parametrize("seed", range(40))
def test_random_evidence_only_ever_shows_input_figures(seed: int) -> None:
    rng = random.Random(seed)
    base, best = _random_evidence(rng, "the baseline"), _random_evidence(rng, "the best")
    others = [_random_evidence(rng, f"other {i}") for i in range(rng.randint(0, 3))]
    text = explain(base, best, others)
    assert text.endswith(".")
    _assert_from_inputs(text, [base, best, *others])
    for name, word in _KEYWORDS.items():
        if all(getattr(e, name) is None for e in (base, best, *others)):
            assert not re.search(word, text), f"{name} is absent everywhere but: {text}"
