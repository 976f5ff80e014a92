"""The primary objective night by night: the baseline's median and the chosen configuration's,
with the nights where the environment changed and the drift checks marked."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure

from autotune.report.history import NightRow

VERDICT_COLORS = {"adopt": "tab:green", "keep current": "tab:blue", "inconclusive": "tab:orange"}


def figure(history: Sequence[NightRow]) -> Figure:
    """One x position per night, in order, labelled with its start (UTC)."""
    fig = Figure(figsize=(max(7.0, 0.6 * len(history) + 3), 4.8), layout="constrained")
    ax = fig.add_subplot()
    measured = [r for r in history if r.candidate is not None or r.baseline is not None]
    if not measured:
        ax.text(0.5, 0.5, "no night with a verdict yet", ha="center", va="center")
        ax.set_axis_off()
        return fig
    unit = next((r.unit for r in measured if r.unit), "")
    scale = 1000.0 if unit == "s" else 1.0
    shown_unit = "ms" if unit == "s" else unit
    base = [(x, r.baseline * scale) for x, r in enumerate(history) if r.baseline is not None]
    if base:
        ax.plot([x for x, _ in base], [v for _, v in base], color="tab:gray", marker="o",
                label="baseline median")
    cand = [(x, r.candidate * scale, r.verdict) for x, r in enumerate(history)
            if r.candidate is not None]
    if cand:
        ax.plot([x for x, _, _ in cand], [v for _, v, _ in cand], color="black", linewidth=0.8,
                alpha=0.5)
        for verdict, color in VERDICT_COLORS.items():
            points = [(x, v) for x, v, which in cand if which == verdict]
            if points:
                ax.scatter([x for x, _ in points], [v for _, v in points], color=color, s=50,
                           zorder=3, label=f"configuration ({verdict})")
    for x, r in enumerate(history):
        if r.opened == "new environment":
            ax.axvline(x - 0.5, color="tab:purple", linestyle=":", linewidth=1)
            ax.annotate(f"env {r.environment}", (x - 0.5, 1.0),
                        xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                        fontsize=8, color="tab:purple")
        if r.drift == "drifted":
            ax.annotate("drift", (x, 0.02), xycoords=("data", "axes fraction"), ha="center",
                        fontsize=8, color="tab:red", fontweight="bold")
    ax.set_xticks(range(len(history)))
    ax.set_xticklabels([r.started.replace("T", " ")[:16] for r in history], rotation=30,
                       ha="right", fontsize=8)
    ax.set_xlim(-0.7, len(history) - 0.3)
    metric = next((r.metric for r in measured if r.metric), "objective")
    ax.set_ylabel(f"{metric} ({shown_unit})" if shown_unit else metric)
    ax.set_xlabel("night (start, UTC)")
    ax.set_title(f"{metric} night by night: the verdict's configuration vs the baseline")
    ax.legend(loc="best", fontsize=8)
    return fig
