"""Plots of the search: history with the baseline band, slices, heat map / contour, importance.

Drawn with matplotlib's object API (no pyplot state) from the Report, except the contour, which
uses Optuna's matplotlib plot on the search study when one is given.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import itertools

import numpy as np
import optuna
from matplotlib.figure import Figure

from autotune.report.model import ParameterInfo, Report, TrialRow

log = logging.getLogger(__name__)

MAX_CELLS = 10
"""A numeric parameter with more distinct values than this is binned for the heat map."""


def _label(report: Report) -> str:
    o = report.objectives[0]
    return f"{o.metric} ({o.unit})" if o.unit else o.metric


def _maybe_log(ax: object, values: Sequence[float]) -> None:
    positive = [v for v in values if v > 0]
    # Latencies of bad and good settings differ by 10-100x; a linear axis hides the good ones.
    if len(positive) == len(values) and positive and max(positive) / min(positive) > 20:
        ax.set_yscale("log")  # type: ignore[attr-defined]


def _empty(fig: Figure, text: str) -> Figure:
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    ax.set_axis_off()
    return fig


def history(report: Report) -> Figure:
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    pts = report.history
    if not pts:
        return _empty(fig, "no complete search trial")
    ax = fig.add_subplot()
    band = report.baseline_band
    if band is not None:
        ax.axhspan(band.min, band.max, color="tab:gray", alpha=0.25,
                   label=f"baseline min-max (n={band.n})")
        ax.axhline(band.median, color="tab:gray", linestyle="--", label="baseline median")
    ok = [p for p in pts if p.feasible]
    bad = [p for p in pts if not p.feasible]
    ax.scatter([p.number for p in ok], [p.value for p in ok], color="tab:blue", s=20,
               label="search trial", zorder=3)
    if bad:
        ax.scatter([p.number for p in bad], [p.value for p in bad], color="tab:red", marker="x",
                   label="infeasible", zorder=3)
    best = [(p.number, p.best) for p in pts if p.best is not None]
    if best:
        ax.step([n for n, _ in best], [b for _, b in best], where="post",
                color="tab:green", label="best feasible so far")
    _maybe_log(ax, [p.value for p in pts] + ([band.min, band.max] if band else []))
    ax.set_xlabel("search trial")
    ax.set_ylabel(_label(report))
    ax.set_title("Optimization history")
    ax.legend(loc="best", fontsize="small")
    return fig


def _search_rows(report: Report) -> list[TrialRow]:
    return [t for t in report.trials
            if t.study == "search" and t.state == "COMPLETE" and t.values]


def _is_categorical(p: ParameterInfo) -> bool:
    return p.type == "categorical" or (p.values is not None and not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in p.values))


def slices(report: Report) -> Figure:
    rows = _search_rows(report)
    params = report.parameters
    cols = min(3, len(params))
    nrows = -(-len(params) // cols)
    fig = Figure(figsize=(4 * cols, 3.5 * nrows), layout="constrained")
    if not rows:
        return _empty(fig, "no complete search trial")
    axes = fig.subplots(nrows, cols, squeeze=False)
    ys = [t.values[0] for t in rows if t.values]
    numbers = [t.number for t in rows]
    for i, p in enumerate(params):
        ax = axes[i // cols][i % cols]
        if _is_categorical(p):
            cats = [str(v) for v in (p.values or ())]
            xs: list[float] = [cats.index(str(t.settings.get(p.name)))
                               if str(t.settings.get(p.name)) in cats else -1 for t in rows]
            ax.set_xticks(range(len(cats)), cats)
        else:
            xs = [float(t.settings[p.name]) for t in rows]  # type: ignore[arg-type]
            if p.log:
                ax.set_xscale("log")
        points = ax.scatter(xs, ys, c=numbers, cmap="viridis", s=24, zorder=3)
        if report.baseline_band is not None:
            ax.axhline(report.baseline_band.median, color="tab:gray", linestyle="--")
        _maybe_log(ax, ys)
        ax.set_xlabel(p.name)
        ax.set_ylabel(_label(report) if i % cols == 0 else "")
    for j in range(len(params), nrows * cols):
        axes[j // cols][j % cols].set_axis_off()
    fig.colorbar(points, ax=axes, label="trial number", shrink=0.8)
    fig.suptitle("Slices (dashed: baseline median)")
    return fig


def _cells(p: ParameterInfo, values: Sequence[object]) -> tuple[list[str], list[int]]:
    """Axis labels and each trial's cell index for one parameter."""
    if _is_categorical(p) or len({str(v) for v in values}) <= MAX_CELLS:
        if p.values is not None:
            labels = [str(v) for v in p.values]
        else:
            labels = [str(v) for v in sorted({v for v in values}, key=float)]  # type: ignore[arg-type]
        return labels, [labels.index(str(v)) for v in values]
    xs = np.asarray(values, dtype=float)
    edges = (np.geomspace(xs.min(), xs.max(), MAX_CELLS + 1) if p.log
             else np.linspace(xs.min(), xs.max(), MAX_CELLS + 1))
    index = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, MAX_CELLS - 1)
    labels = [f"{lo:.3g}-{hi:.3g}" for lo, hi in itertools.pairwise(edges)]
    return labels, [int(i) for i in index]


def heatmap(report: Report) -> Figure | None:
    if len(report.main_parameters) < 2:
        return None
    rows = _search_rows(report)
    fig = Figure(figsize=(8, 6), layout="constrained")
    if not rows:
        return _empty(fig, "no complete search trial")
    px, py = (next(p for p in report.parameters if p.name == n) for n in report.main_parameters)
    xl, xi = _cells(px, [t.settings.get(px.name) for t in rows])
    yl, yi = _cells(py, [t.settings.get(py.name) for t in rows])
    cell: dict[tuple[int, int], list[float]] = {}
    for x, y, t in zip(xi, yi, rows, strict=True):
        cell.setdefault((y, x), []).append(t.values[0] if t.values else float("nan"))
    grid = np.full((len(yl), len(xl)), np.nan)
    for (y, x), vs in cell.items():
        grid[y, x] = float(np.median(vs))
    ax = fig.add_subplot()
    cmap = "viridis_r" if report.objectives[0].direction == "minimize" else "viridis"
    image = ax.imshow(grid, origin="lower", aspect="auto", cmap=cmap)
    for (y, x), vs in cell.items():
        ax.text(x, y, f"{np.median(vs):.3g}\nn={len(vs)}", ha="center", va="center",
                fontsize="x-small", color="white")
    ax.set_xticks(range(len(xl)), xl, rotation=45, ha="right")
    ax.set_yticks(range(len(yl)), yl)
    ax.set_xlabel(px.name)
    ax.set_ylabel(py.name)
    ax.set_title("Median objective per cell (empty: not measured)")
    fig.colorbar(image, ax=ax, label=_label(report))
    return fig


def contour(report: Report, search: optuna.Study, path: Path) -> bool:
    """Optuna's contour plot of the two main parameters; False when it cannot be drawn."""
    from matplotlib import pyplot as plt

    if len(report.main_parameters) < 2 or len(_search_rows(report)) < 3:
        return False
    sign = 1.0 if report.objectives[0].direction == "minimize" else -1.0
    multi = len(report.objectives) > 1
    # Optuna switches the global style to ggplot; rc_context puts it back afterwards.
    with matplotlib.rc_context(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ax = optuna.visualization.matplotlib.plot_contour(
                search, params=list(report.main_parameters),
                target=(lambda t: sign * t.values[0]) if multi else None,
                target_name=report.objectives[0].metric)
        except ValueError as e:
            log.warning("Optuna could not draw the contour plot (%s); drawing a heat map", e)
            return False
        fig = (ax if not isinstance(ax, np.ndarray) else ax.flat[0]).get_figure(root=True)
        assert fig is not None
        fig.set_size_inches(8, 6)
        fig.savefig(path, dpi=100)
        plt.close(fig)
    return True


def importance(report: Report) -> Figure | None:
    if not report.importance:
        return None
    fig = Figure(figsize=(7, 1.2 + 0.5 * len(report.importance)), layout="constrained")
    ax = fig.add_subplot()
    names = list(report.importance)[::-1]
    ax.barh(names, [report.importance[n] for n in names], color="tab:blue")
    ax.set_xlabel("importance (share)")
    ax.set_title("Parameter importance")
    return fig
