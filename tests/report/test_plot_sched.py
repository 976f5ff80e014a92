"""The scheduler plots: latency heatmaps side by side, and where the CPU went."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import QuadMesh
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from autotune.insight.explain import Breakdown
from autotune.insight.heatmap import Heat
from autotune.report.plot_sched import cpu_breakdown, heatmap_pair

# The demo's runtime histogram bounds: R10 series 1 µs .. 10 s, then +Inf.
EDGES = (*(round(10 ** (k / 10 - 6), 12) for k in range(71)), math.inf)


def _heat(center: int, times: list[float], step: float | None = 5.0,
          empty: tuple[float, ...] = ()) -> Heat:
    """Observations spread over the buckets around index ``center``."""
    rows = []
    for t in times:
        row = [0.0] * len(EDGES)
        if t not in empty:
            for d, c in ((-3, 2.0), (-2, 10.0), (-1, 40.0), (0, 80.0), (1, 30.0), (2, 5.0),
                         (6, 1.0)):
                row[center + d] = c
        rows.append(tuple(row))
    return Heat(tuple(times), EDGES, tuple(rows), step)


def _save(fig: Figure, path: Path) -> int:
    fig.savefig(path, dpi=80)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return len(data)


def _meshes(fig: Figure) -> list[QuadMesh]:
    """The heatmaps' meshes (the first two axes; the colour bar has a mesh of its own)."""
    return [c for ax in fig.axes[:2] for c in ax.collections if isinstance(c, QuadMesh)]


def test_heatmap_pair_draws_both_sides_on_one_scale(tmp_path: Path) -> None:
    times = [5.0 * i for i in range(1, 25)]
    baseline = _heat(38, [t for t in times if t not in (35.0, 40.0)], empty=(60.0,))  # ~6 ms
    best = _heat(24, times)  # ~250 µs
    fig = heatmap_pair(baseline, best, title="Scheduling latency", baseline_label="baseline",
                       best_label="best (GOGC=400)")
    meshes = _meshes(fig)
    assert len(meshes) == 2
    assert {m.norm.vmin for m in meshes} == {1e-3} and {m.norm.vmax for m in meshes} == {1.0}
    # both sides coarsened onto the same <= 24 buckets; the gap is a column of its own
    grids = [np.asarray(m.get_array()).reshape(-1) for m in meshes]
    heat_axes = fig.axes[:2]
    assert heat_axes[0].get_yscale() == "log"
    assert heat_axes[0].get_ylim() == heat_axes[1].get_ylim()
    n_buckets = len(grids[1]) // len(times)
    assert n_buckets <= 24
    assert len(grids[0]) == n_buckets * (len(times) - 2 + 1)  # 22 rows and one gap column
    labels = [t.get_text() for t in heat_axes[0].get_yticklabels()]
    assert "100µs" in labels and "1ms" in labels and "10ms" in labels
    assert heat_axes[0].get_xlabel() == "time in window (s)"
    suptitle = fig.get_suptitle()
    assert "grey: step not measured" in suptitle and "hatched: no observation" in suptitle
    assert _save(fig, tmp_path / "heat.png") > 20_000


def test_heatmap_pair_with_an_unmeasured_side(tmp_path: Path) -> None:
    fig = heatmap_pair(Heat((), (), ()), _heat(30, [5.0, 10.0]), title="GC pauses",
                       baseline_label="baseline", best_label="best")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "not measured" in texts
    assert len(_meshes(fig)) == 1
    assert _save(fig, tmp_path / "one.png") > 5_000


def test_heatmap_pair_with_different_buckets_and_no_step(tmp_path: Path) -> None:
    coarse = Heat((1.0, 2.0, 4.0), (0.001, 0.01, 0.1, math.inf),
                  ((1.0, 2.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0), (0.0, 1.0, 1.0, 1.0)))
    inf_only = Heat((1.0,), (math.inf,), ((3.0,),))
    fig = heatmap_pair(_heat(30, [5.0]), coarse, title="t", baseline_label="a", best_label="b")
    assert len(_meshes(fig)) == 2
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert ">100ms" in labels  # the +Inf bucket
    _save(fig, tmp_path / "diff.png")
    # a histogram with nothing but +Inf has no scale to draw on
    fig = heatmap_pair(inf_only, inf_only, title="t", baseline_label="a", best_label="b")
    assert [t.get_text() for ax in fig.axes for t in ax.texts].count("not measured") == 2


def test_cpu_breakdown_stacks_the_measured_classes(tmp_path: Path) -> None:
    rows = [
        Breakdown("baseline (GOMAXPROCS=8)", user=0.40, gc=0.30, idle=7.1, total=8.0,
                  throttled_share=0.41),
        Breakdown("best (GOMAXPROCS=2)", user=0.45, gc=0.12, idle=1.3, total=2.0,
                  throttled_share=0.12),
        Breakdown("#3", user=0.5, gc=None, idle=None, total=4.0, throttled_share=None),
        Breakdown("#4", user=None, gc=None, idle=None, total=None, throttled_share=0.0),
    ]
    fig = cpu_breakdown(rows)
    ax = fig.axes[0]
    bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_fill()]
    widths = sorted(round(p.get_width(), 6) for p in bars)
    # baseline: user, gc, other (0.2), idle; best: four again (other 0.13); #3: user only
    assert len(bars) == 9
    assert widths == sorted(round(w, 6) for w in
                            (0.40, 0.30, 0.2, 7.1, 0.45, 0.12, 0.13, 1.3, 0.5))
    outlines = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert sorted(p.get_width() for p in outlines) == [2.0, 4.0, 8.0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "baseline (GOMAXPROCS=8)"
    assert labels[2] == "#3\n(GC, idle not measured)"
    assert labels[3] == "#4\n(CPU classes not measured)"
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["throttled in 41% of CFS periods", "throttled in 12% of CFS periods",
                     "CFS throttling not measured", "throttled in 0% of CFS periods"]
    assert _save(fig, tmp_path / "cpu.png") > 15_000


@pytest.mark.parametrize("rows", [[], [Breakdown("a", None, None, None, None, None)]])
def test_cpu_breakdown_without_data(rows: list[Breakdown], tmp_path: Path) -> None:
    fig = cpu_breakdown(rows)
    _save(fig, tmp_path / "empty.png")
    text = " ".join(t.get_text() for ax in fig.axes for t in [*ax.texts, *ax.get_yticklabels()])
    assert "not measured" in text or "no configuration" in text
