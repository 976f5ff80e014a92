"""Plots of the compared configurations: the objective of baseline vs candidates with every
repeat shown, and the diagnostic metrics of the same configurations."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from autotune.report.document import percent
from autotune.report.model import Configuration, Report


def _configs(report: Report) -> list[Configuration]:
    return [c for c in (report.baseline, *report.candidates) if c is not None]


def _color(report: Report, c: Configuration) -> str:
    if c.id == "baseline":
        return "tab:gray"
    if c.id == report.recommendation:
        return "tab:green"
    if c.id == report.best_candidate:
        return "tab:orange"
    return "tab:blue"


def _offsets(n: int) -> list[float]:
    # Spread the repeats sideways so equal values stay visible; deterministic, unlike jitter.
    if n == 1:
        return [0.0]
    return [-0.15 + 0.3 * i / (n - 1) for i in range(n)]


def _strip(ax: Axes, x: int, values: Sequence[float], median: float, color: str) -> None:
    ax.scatter([x + d for d in _offsets(len(values))], values, color=color, s=28, zorder=3)
    ax.hlines(median, x - 0.3, x + 0.3, color=color, linewidth=2)


def objective(report: Report) -> Figure:
    """The primary objective of the baseline and each candidate; one dot per run."""
    configs = _configs(report)
    fig = Figure(figsize=(max(6.0, 1.8 * len(configs) + 2), 4.8), layout="constrained")
    ax = fig.add_subplot()
    if not configs:
        ax.text(0.5, 0.5, "no configuration was measured", ha="center", va="center")
        ax.set_axis_off()
        return fig
    o = report.objectives[0]
    labels = []
    for x, c in enumerate(configs):
        values = [r.values[0] for r in c.runs if r.values]
        if values and c.objectives:
            _strip(ax, x, values, c.objectives[0].median, _color(report, c))
        label = c.id
        if c.comparisons:
            cmp = c.comparisons[0]
            label += f"\n{percent(cmp.improvement)}"
            if cmp.low is not None:
                label += f"\n[{percent(cmp.low)}, {percent(cmp.high)}]"
        if c.id == report.recommendation:
            label += "\nrecommended"
        labels.append(label)
    ax.set_xticks(range(len(configs)), labels, fontsize="small")
    ax.set_xlim(-0.6, len(configs) - 0.4)
    ax.set_ylabel(f"{o.metric} ({o.unit})" if o.unit else o.metric)
    source = {"confirmation": "confirmation runs", "search": "search runs vs baseline repeats",
              "none": "measurements"}[report.evidence]
    confidence = report.improvement.confidence if report.improvement is not None else 0.95
    level = f"{confidence * 100:.4g}"
    ax.set_title(f"{o.metric}: baseline vs candidates ({source})\n"
                 f"bar = median; below each: improvement and its {level}% CI",
                 fontsize="medium")
    return fig


def diagnostics(report: Report) -> Figure | None:
    """Every declared metric that is not an objective, for the same configurations."""
    names = report.diagnostics
    configs = _configs(report)
    if not names or not configs:
        return None
    cols = min(2, len(names))
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(max(6.0, 1.6 * len(configs) + 1.5) * cols, 4 * rows),
                 layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, name in enumerate(names):
        ax = axes[i // cols][i % cols]
        for x, c in enumerate(configs):
            m = next(m for m in c.metrics if m.name == name)
            if m.values and m.median is not None:
                _strip(ax, x, m.values, m.median, _color(report, c))
            else:
                reason = textwrap.fill("unavailable: " + "; ".join(m.reasons), 22)
                ax.text(x, 0.5, reason, transform=ax.get_xaxis_transform(), ha="center",
                        va="center", fontsize="x-small", color="tab:red")
        ax.set_xticks(range(len(configs)), [c.id for c in configs], fontsize="small")
        ax.set_xlim(-0.6, len(configs) - 0.4)
        unit = next((m.unit for c in configs for m in c.metrics if m.name == name), "")
        ax.set_title(f"{name} ({unit})" if unit else name, fontsize="medium")
    for j in range(len(names), rows * cols):
        axes[j // cols][j % cols].set_axis_off()
    fig.suptitle("Diagnostics of the compared configurations (bar = median)")
    return fig


def scenarios(report: Report) -> Figure | None:
    """Several chaos scenarios: the shown configurations under each, every run a dot."""
    robust = report.robustness
    if robust is None or not robust.rows:
        return None
    n = len(robust.rows)
    fig = Figure(figsize=(max(6.0, 2.2 * len(robust.scenarios) + 2), 4.8), layout="constrained")
    ax = fig.add_subplot()
    colors = {"baseline": "tab:gray", report.recommendation: "tab:green",
              report.best_candidate: "tab:orange"}
    width = 0.8 / n
    for i, row in enumerate(robust.rows):
        color = colors.get(row.config, f"C{i + 2}")
        for x, cell in enumerate(row.cells):
            if not cell.values or cell.median is None:
                continue
            at = x - 0.4 + width * (i + 0.5)
            ax.scatter([at] * len(cell.values), cell.values, color=color, s=22, zorder=3,
                       label=row.config if x == 0 else None)
            ax.hlines(cell.median, at - width * 0.4, at + width * 0.4, color=color, linewidth=2)
    unit = next((o.unit for o in report.objectives if o.metric == robust.metric), "")
    ax.set_xticks(range(len(robust.scenarios)),
                  [f"{s}\nbest: {robust.winners.get(s, '-')}" for s in robust.scenarios],
                  fontsize="small")
    ax.set_ylabel(f"{robust.metric} ({unit})" if unit else robust.metric)
    ax.legend(fontsize="small")
    ax.set_title(f"{robust.metric} under each scenario (bar = median, dot = run)",
                 fontsize="medium")
    return fig
