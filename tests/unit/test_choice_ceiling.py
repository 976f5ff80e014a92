"""benchmarks/choice_ceiling.py: the exact chance that choosing by the mean of n runs picks the
best of a recorded grid's leaders."""

from __future__ import annotations

import pytest

from benchmarks.choice_ceiling import main, mean_distribution, p_chosen


def test_the_mean_of_draws_has_its_multinomial_distribution() -> None:
    assert mean_distribution([1.0, 3.0], 2) == [(1.0, 0.25), (2.0, 0.5), (3.0, 0.25)]
    dist = mean_distribution([7.7, 7.7, 12.2], 5)
    assert sum(p for _, p in dist) == pytest.approx(1.0)
    # Three or more slow draws of five: 1 - P(0, 1 or 2 of them), each slow with 1/3.
    slow = sum(p for m, p in dist if m > (3 * 7.7 + 2 * 12.2) / 5 + 1e-9)
    assert slow == pytest.approx(1 - sum(
        [(2 / 3) ** 5, 5 * (1 / 3) * (2 / 3) ** 4, 10 * (1 / 3) ** 2 * (2 / 3) ** 3]))


def test_a_tie_is_chosen_by_none_and_the_direction_counts() -> None:
    # One run each: [1, 3] against [2] wins half the time, loses half.
    assert p_chosen([[1.0, 3.0], [2.0]], 1) == pytest.approx([0.5, 0.5])
    # Two runs: mean 1 (0.25) wins, 2 (0.5) ties, 3 (0.25) loses.
    assert p_chosen([[1.0, 3.0], [2.0]], 2) == pytest.approx([0.25, 0.25])
    assert p_chosen([[1.0, 3.0], [2.0]], 2, sign=-1.0) == pytest.approx([0.25, 0.25])
    assert p_chosen([[1.0], [2.0]], 3, sign=-1.0) == pytest.approx([0.0, 1.0])


def test_the_third_cpuset_grid_at_ten_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    # The figures docs/measurements/tiebreak-2026-12-06.txt quotes.
    main(["benchmarks/grids/demo-2026-12-05-cpuset-c.yaml", "--window", "10",
          "--runs", "3", "5", "10"])
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()
            if line.strip()[:1].isdigit()}
    assert rows == {"3": ["0.774", "0.774"], "5": ["0.885", "0.885"],
                    "10": ["0.963", "0.963"]}
