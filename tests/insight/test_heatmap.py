"""A histogram's distribution over time, from a Prometheus range query's result."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from autotune.errors import MetricsError
from autotune.insight.heatmap import Heat, coarse_edges, from_range, merge_coarse, rebucket

T0 = 1_700_000_000.0


def _series(le: str, points: dict[float, str]) -> dict[str, Any]:
    """One bucket series as prometheus-api-client returns it (times in unix seconds)."""
    return {"metric": {"le": le}, "values": [[T0 + t, v] for t, v in points.items()]}


def _result(buckets: dict[str, list[float]], times: list[float]) -> list[dict[str, Any]]:
    return [_series(le, {t: str(v) for t, v in zip(times, values, strict=True)})
            for le, values in buckets.items()]


def test_cumulative_buckets_become_counts_per_bucket_sorted_by_bound() -> None:
    # deliberately out of order, and "+Inf" as Prometheus spells it
    result = _result({"+Inf": [10, 4], "0.01": [9, 0], "0.001": [5, 0], "0.1": [9, 4]},
                     [5, 10])
    heat = from_range(result, start=T0, step=5)
    assert heat.edges == (0.001, 0.01, 0.1, math.inf)
    assert heat.t == (5.0, 10.0)
    assert heat.counts == ((5, 4, 0, 1), (0, 0, 4, 0))
    assert heat.step == 5
    assert tuple(sum(row) for row in heat.counts) == (10, 4)
    assert heat.shares[0] == (0.5, 0.4, 0.0, 0.1)


def test_times_are_seconds_from_the_window_start_or_the_first_step() -> None:
    result = _result({"1": [1, 2], "+Inf": [1, 2]}, [30, 45])
    assert from_range(result, start=T0 + 15).t == (15.0, 30.0)
    assert from_range(result).t == (0.0, 15.0)


def test_a_step_some_bucket_misses_is_left_out_not_guessed() -> None:
    result = [
        _series("0.001", {5: "1", 10: "2", 15: "3"}),
        _series("0.01", {5: "2", 15: "6"}),  # no value at 10
        _series("+Inf", {5: "2", 10: "9", 15: "6"}),
    ]
    heat = from_range(result, start=T0)
    assert heat.t == (5.0, 15.0)
    assert heat.counts == ((1, 1, 0), (3, 3, 0))


def test_a_step_every_bucket_misses_is_a_gap_in_t() -> None:
    result = _result({"0.5": [1, 1], "+Inf": [2, 3]}, [5, 20])
    heat = from_range(result, start=T0, step=5)
    assert heat.t == (5.0, 20.0)
    assert len(heat.counts) == 2


def test_nan_from_increase_over_a_gap_counts_as_missing() -> None:
    result = [_series("0.5", {5: "NaN", 10: "1"}), _series("+Inf", {5: "3", 10: "1"})]
    heat = from_range(result, start=T0)
    assert heat.t == (10.0,)
    assert heat.counts == ((1, 0),)


def test_an_inf_only_histogram_has_one_bucket() -> None:
    heat = from_range(_result({"+Inf": [7, 0]}, [5, 10]), start=T0)
    assert heat.edges == (math.inf,)
    assert heat.counts == ((7,), (0,))
    assert heat.shares == ((1.0,), (None,))


def test_observations_above_the_last_finite_bound_sit_in_the_inf_bucket() -> None:
    heat = from_range(_result({"0.1": [1], "+Inf": [5]}, [5]), start=T0)
    assert heat.counts == ((1, 4),)


def test_counter_reset_noise_never_makes_a_negative_count() -> None:
    # increase() corrects and extrapolates each series on its own: a higher bucket can come out
    # below a lower one
    result = _result({"0.001": [10.4], "0.01": [9.9], "0.1": [12.0], "+Inf": [12.0]}, [5])
    heat = from_range(result, start=T0)
    counts = heat.counts[0]
    assert min(counts) >= 0
    assert counts[1] == 0
    # the running floor keeps the total equal to the +Inf bucket (every observation once)
    assert counts == pytest.approx((10.4, 0.0, 1.6, 0.0))
    assert sum(counts) == pytest.approx(12.0)


def test_an_all_empty_row_has_no_shares() -> None:
    heat = from_range(_result({"0.01": [0, 3], "+Inf": [0, 4]}, [5, 10]), start=T0)
    assert heat.counts[0] == (0, 0)
    assert heat.shares == ((None, None), (0.75, 0.25))


def test_same_bound_spelled_twice_is_added() -> None:
    result = [_series("1", {5: "2"}), _series("1.0", {5: "3"}), _series("+Inf", {5: "5"})]
    heat = from_range(result, start=T0)
    assert heat.edges == (1.0, math.inf)
    assert heat.counts == ((5, 0),)


def test_empty_result_is_an_empty_heat() -> None:
    heat = from_range([], start=T0)
    assert heat == Heat((), (), ())
    assert heat.shares == ()


@pytest.mark.parametrize("result", [
    [{"metric": {"job": "demo"}, "values": [[T0, "1"]]}],
    [{"metric": {"le": "fast"}, "values": [[T0, "1"]]}],
    [{"metric": {"le": "1"}, "values": [[T0]]}],
    [{"metric": {"le": "1"}, "values": [[T0, "many"]]}],
])
def test_not_a_histogram_is_a_metrics_error(result: list[dict[str, Any]]) -> None:
    with pytest.raises(MetricsError, match=r"histogram|point"):
        from_range(result)


def test_json_round_trip_has_no_infinity_and_is_compact() -> None:
    heat = Heat((5.0, 10.0), (0.001, 0.0125893, math.inf),
                ((3.0, 1.5004, 0.0), (0.0, 0.0, 0.0)), step=5.0)
    data = heat.to_json()
    text = json.dumps(data, allow_nan=False)  # raises on inf/nan
    assert "Infinity" not in text and '"+Inf"' in text
    assert data["counts"][0] == [3, 1.5, 0]
    back = Heat.from_json(json.loads(text))
    assert back.edges == heat.edges
    assert back.t == heat.t and back.step == 5.0
    assert back.counts == ((3.0, 1.5, 0.0), (0.0, 0.0, 0.0))


def test_from_json_rejects_other_shapes() -> None:
    with pytest.raises(ValueError):
        Heat.from_json({"t": [1], "le": ["+Inf"]})
    with pytest.raises(ValueError):
        Heat.from_json({"t": [1], "le": ["+Inf"], "counts": [[1, 2]]})
    with pytest.raises(ValueError):
        Heat.from_json({"t": [1], "le": [True], "counts": [[1]]})


def test_heat_checks_its_shape() -> None:
    with pytest.raises(ValueError):
        Heat((1.0,), (1.0, 2.0), ((1.0,),))
    with pytest.raises(ValueError):
        Heat((1.0,), (2.0, 1.0), ((1.0, 1.0),))
    with pytest.raises(ValueError):
        Heat((1.0,), (1.0,), ((-1.0,),))


def _fine(n: int = 71) -> tuple[float, ...]:
    """The demo's R10 bounds, 1 µs .. 10 s, and +Inf."""
    return (*(round(10 ** (k / 10 - 6), 12) for k in range(n)), math.inf)


def test_merge_coarse_keeps_real_edges_and_every_observation() -> None:
    edges = _fine()
    row = [0.0] * len(edges)
    for j, c in ((20, 5.0), (21, 1.0), (30, 7.0), (45, 2.0), (50, 1.0)):
        row[j] = c
    heat = Heat((5.0, 10.0), edges, (tuple(row), (0.0,) * len(edges)), step=5.0)
    coarse = merge_coarse(heat, max_buckets=24)
    assert len(coarse.edges) <= 24
    assert set(coarse.edges) <= set(edges)
    assert coarse.edges[-1] == math.inf
    assert coarse.t == heat.t and coarse.step == 5.0
    assert sum(coarse.counts[0]) == 16
    assert coarse.shares[1] == (None,) * len(coarse.edges)
    # the occupied range keeps its top edge and most of the resolution
    assert edges[50] in coarse.edges and edges[19] in coarse.edges
    occupied = [e for e in coarse.edges if edges[19] <= e <= edges[50]]
    assert len(occupied) >= 20
    # every observation stays at or below its own bound: at each coarse edge, as many
    # observations are at or below it as in the fine histogram (merging only moves them up to
    # a coarser edge, never down)
    for e in coarse.edges:
        fine_below = sum(c for edge, c in zip(edges, heat.counts[0], strict=True) if edge <= e)
        coarse_below = sum(c for edge, c in zip(coarse.edges, coarse.counts[0], strict=True)
                           if edge <= e)
        assert coarse_below == pytest.approx(fine_below)


def test_merge_coarse_leaves_a_small_histogram_alone() -> None:
    heat = Heat((5.0,), (0.001, 0.01, math.inf), ((1.0, 2.0, 3.0),))
    assert merge_coarse(heat, max_buckets=24) == heat


def test_merge_coarse_of_an_empty_heat_uses_equal_groups() -> None:
    heat = Heat((5.0,), _fine(), ((0.0,) * 72,))
    coarse = merge_coarse(heat, max_buckets=24)
    assert len(coarse.edges) == 24 and coarse.edges[-1] == math.inf


@pytest.mark.parametrize("max_buckets", [1, 2, 3, 7])
def test_merge_coarse_respects_tiny_budgets(max_buckets: int) -> None:
    row = [0.0] * 72
    row[30] = 1.0
    row[40] = 1.0
    heat = Heat((5.0,), _fine(), (tuple(row),))
    coarse = merge_coarse(heat, max_buckets=max_buckets)
    assert 1 <= len(coarse.edges) <= max_buckets
    assert coarse.edges[-1] == math.inf
    assert sum(coarse.counts[0]) == 2


def test_two_heats_share_coarse_edges() -> None:
    edges = _fine()
    low = [0.0] * 72
    low[10] = 1.0
    high = [0.0] * 72
    high[60] = 1.0
    a, b = Heat((5.0,), edges, (tuple(low),)), Heat((5.0,), edges, (tuple(high),))
    shared = coarse_edges([a, b], 24)
    assert edges[9] in shared and edges[60] in shared  # spans both occupied ranges
    assert rebucket(a, shared).edges == rebucket(b, shared).edges == shared
    with pytest.raises(ValueError):
        coarse_edges([a, Heat((5.0,), (1.0, math.inf), ((0.0, 0.0),))])
    with pytest.raises(ValueError):
        rebucket(a, (0.5, math.inf))  # not one of its edges
