"""Plots that look inside the Go scheduler: a latency histogram's distribution over the
measurement window (baseline next to the best configuration), and where each configuration's CPU
went."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import QuadMesh
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, NullLocator

from autotune.insight.explain import Breakdown, duration, percent
from autotune.insight.heatmap import Heat, coarse_edges, merge_coarse, rebucket

# Shares below 0.1% of a step's observations get the lowest colour: the log scale keeps the
# tail (where tuning shows) visible next to the bulk, down to a floor where single observations
# of a low-rate step would otherwise dominate the scale.
SHARE_FLOOR = 1e-3
MISSING = "0.88"  # axes background: the step was not measured
_CMAP = matplotlib.colormaps["magma_r"].with_extremes(under="white", bad=(0, 0, 0, 0))


def _ratio(edges: Sequence[float]) -> float:
    """The typical ratio of adjacent finite bounds, to give the open-ended buckets a height."""
    finite = [e for e in edges if 0 < e < math.inf]
    ratios = [b / a for a, b in itertools.pairwise(finite)]
    return statistics.median(ratios) if ratios else 10.0


def _y_bounds(edges: Sequence[float]) -> list[float] | None:
    """Drawing bounds of the buckets on a log axis (one more than buckets): the first bucket
    starts one typical ratio below its edge, ``+Inf`` ends one above the last finite edge.
    ``None`` when no edge is a positive finite number (nothing to anchor a log axis)."""
    r = _ratio(edges)
    ys: list[float | None] = [e if 0 < e < math.inf else None for e in edges]
    first = next((i for i, y in enumerate(ys) if y is not None), None)
    if first is None:
        return None
    for i in range(first - 1, -1, -1):  # edges <= 0 (an ``le="0"`` bucket)
        ys[i] = (ys[i + 1] or 1.0) / r
    for i in range(first + 1, len(ys)):  # +Inf
        if ys[i] is None:
            ys[i] = (ys[i - 1] or 1.0) * r
    bounds = [y for y in ys if y is not None]
    return [bounds[0] / r, *bounds]


def _columns(heat: Heat) -> tuple[list[float], list[int | None]]:
    """X edges and, per column, the heat row drawn there (``None``: a gap, not measured)."""
    step = heat.step
    if step is None:
        diffs = [b - a for a, b in itertools.pairwise(heat.t) if b > a]
        step = min(diffs) if diffs else 1.0
    xs: list[float] = []
    rows: list[int | None] = []
    for i in sorted(range(len(heat.t)), key=lambda i: heat.t[i]):
        left, right = heat.t[i] - step, heat.t[i]
        if xs and left > xs[-1] + 1e-6 * step:
            rows.append(None)
            xs.append(left)
        left = max(left, xs[-1]) if xs else left
        if right <= left:
            continue  # a duplicate time
        if not xs:
            xs.append(left)
        rows.append(i)
        xs.append(right)
    return xs, rows


def _decade_ticks(low: float, high: float) -> list[float]:
    return [10.0**k for k in range(math.ceil(math.log10(low) - 1e-9),
                                   math.floor(math.log10(high) + 1e-9) + 1)]


def _draw_heat(ax: Axes, heat: Heat, norm: LogNorm) -> tuple[QuadMesh | None, set[str]]:
    """One side of the pair; returns the mesh and which kinds of blank it drew."""
    ax.set_facecolor(MISSING)
    bounds = _y_bounds(heat.edges)
    xs, rows = _columns(heat)
    if not heat.t or bounds is None or len(xs) < 2:
        ax.set_facecolor("white")
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return None, set()
    shares = heat.shares
    grid = np.full((len(heat.edges), len(rows)), np.nan)
    blanks: set[str] = set()
    for col, row in enumerate(rows):
        if row is None:
            blanks.add("gap")
            continue
        values = shares[row]
        if all(v is None for v in values):
            blanks.add("empty")
            ax.axvspan(xs[col], xs[col + 1], facecolor="white", edgecolor="0.6", hatch="///",
                       linewidth=0)
            continue
        for j, v in enumerate(values):
            # an empty bucket goes below the scale (the "under" colour), not to NaN (a gap)
            grid[j, col] = SHARE_FLOOR / 10 if v == 0 else v
    if np.any(grid < SHARE_FLOOR):
        blanks.add("zero")
    mesh = ax.pcolormesh(np.array(xs), np.array(bounds), np.ma.masked_invalid(grid),
                         cmap=_CMAP, norm=norm, shading="flat")
    ax.set_yscale("log")
    ax.set_ylim(bounds[0], bounds[-1])
    ax.set_xlim(xs[0], xs[-1])
    finite = [e for e in heat.edges if 0 < e < math.inf]
    ticks = _decade_ticks(bounds[0], finite[-1])
    labels = [duration(t, space=False) for t in ticks]
    if math.isinf(heat.edges[-1]):
        ticks.append(math.sqrt(bounds[-2] * bounds[-1]))
        labels.append(f">{duration(finite[-1], space=False)}")
    ax.set_yticks(ticks, labels)
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("time in window (s)")
    return mesh, blanks


def heatmap_pair(
    baseline: Heat, best: Heat, *, title: str, baseline_label: str, best_label: str,
    max_buckets: int = 24,
) -> Figure:
    """The distribution of a latency histogram over the window, baseline left and best right,
    both coarsened to at most ``max_buckets`` buckets and coloured on the same scale (share of
    each step's observations)."""
    same_edges = baseline.edges == best.edges
    if same_edges:
        edges = coarse_edges([baseline, best], max_buckets)
        baseline, best = rebucket(baseline, edges), rebucket(best, edges)
    else:
        baseline, best = merge_coarse(baseline, max_buckets), merge_coarse(best, max_buckets)
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    axes = fig.subplots(1, 2, sharey=same_edges, squeeze=False)[0]
    norm = LogNorm(vmin=SHARE_FLOOR, vmax=1.0)
    mesh = None
    blanks: set[str] = set()
    for ax, heat, label in ((axes[0], baseline, baseline_label), (axes[1], best, best_label)):
        drawn, kinds = _draw_heat(ax, heat, norm)
        mesh = mesh or drawn
        blanks |= kinds
        ax.set_title(label, fontsize="medium")
    axes[0].set_ylabel("latency (bucket upper bound)")
    if mesh is not None:
        bar = fig.colorbar(mesh, ax=list(axes), extend="min", fraction=0.04)
        bar.set_label("share of the step's observations")
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: percent(v)))
    notes = {"zero": "white: no observation in that bucket",
             "empty": "hatched: no observation in that step",
             "gap": "grey: step not measured"}
    legend = "; ".join(text for kind, text in notes.items() if kind in blanks)
    fig.suptitle(title + (f"\n{legend}" if legend else ""), fontsize="medium")
    return fig


_PARTS = (("user", "user work", "tab:blue"), ("gc", "GC", "tab:orange"),
          ("other", "other (scavenger, ...)", "tab:purple"), ("idle", "idle", "0.8"))


def cpu_breakdown(rows: Sequence[Breakdown]) -> Figure:
    """Stacked bars of each configuration's CPU (cores) by class, the total available to Go
    (GOMAXPROCS x time) as an outline, and the share of CFS periods throttled beside each bar.
    A class that was not measured is not drawn and the row's label says so."""
    fig = Figure(figsize=(10, 1.2 + 0.7 * max(1, len(rows))), layout="constrained")
    ax = fig.add_subplot()
    if not rows:
        ax.text(0.5, 0.5, "no configuration was measured", ha="center", va="center")
        ax.set_axis_off()
        return fig
    drawn: dict[str, Patch] = {}
    labels = []
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i  # the first row on top
        left = 0.0
        missing = []
        for attr, name, color in _PARTS:
            value = getattr(row, attr)
            if value is None:
                if attr != "other":
                    missing.append(name)
                continue
            ax.barh(y, value, left=left, height=0.6, color=color)
            drawn.setdefault(name, Patch(color=color, label=name))
            left += value
        if row.total is not None:
            ax.add_patch(Rectangle((0, y - 0.36), row.total, 0.72, fill=False,
                                   edgecolor="black", linewidth=1.2))
            drawn.setdefault("total", Patch(fill=False, edgecolor="black",
                                            label="available to Go (GOMAXPROCS x time)"))
        else:
            missing.append("total")
        if len(missing) == 4:
            label = f"{row.label}\n(CPU classes not measured)"
        elif missing:
            label = f"{row.label}\n({', '.join(missing)} not measured)"
        else:
            label = row.label
        labels.append((y, label))
        throttled = ("throttled in " + percent(row.throttled_share) + " of CFS periods"
                     if row.throttled_share is not None else "CFS throttling not measured")
        ax.text(1.01, y, throttled, transform=ax.get_yaxis_transform(), va="center",
                fontsize="small", color="tab:red" if row.throttled_share else "0.3")
    ax.set_yticks([y for y, _ in labels], [text for _, text in labels], fontsize="small")
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlim(left=0)
    ax.set_xlabel("cores (CPU-seconds per second, from /cpu/classes/*)")
    if drawn:
        ax.legend(handles=list(drawn.values()), loc="upper center", bbox_to_anchor=(0.5, -0.18),
                  ncols=min(5, len(drawn)), fontsize="small", frameon=False)
    ax.set_title("Where the CPU went, and how often the CPU limit throttled the service",
                 fontsize="medium")
    return fig
