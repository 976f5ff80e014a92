"""Every plot of the report, written as PNG files next to it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna

from autotune.report import plot_configs, plot_search
from autotune.report.document import Figure
from autotune.report.model import Report

PLOTS = ("history", "slice", "contour", "heatmap", "importance", "candidates", "diagnostics")
"""File stems (``<stem>.png``); a stale one from an earlier report is removed."""


def render(report: Report, out_dir: Path, search: optuna.Study | None = None) -> dict[str, Figure]:
    """Write the plots; return them by kind. ``search`` enables Optuna's contour plot (else a
    heat map drawn from the report)."""
    out: dict[str, Figure] = {}
    primary = report.objectives[0].metric

    def save(kind: str, draw: Callable[[Report], object], caption: str) -> None:
        fig = draw(report)
        if fig is None:
            return
        fig.savefig(out_dir / f"{kind}.png", dpi=100)  # type: ignore[attr-defined]
        out[kind] = Figure(f"{kind}.png", caption)

    save("history", plot_search.history,
         f"Optimization history of {primary}: search trials, best feasible so far, and the band "
         "of the baseline repeats")
    save("slice", plot_search.slices, f"{primary} against each parameter (colour: trial number)")
    if search is not None and plot_search.contour(report, search, out_dir / "contour.png"):
        out["contour"] = Figure("contour.png", f"Contour of {primary} over "
                                f"{' and '.join(report.main_parameters)} (Optuna)")
    else:
        save("heatmap", plot_search.heatmap,
             f"Median {primary} over {' and '.join(report.main_parameters)}")
    save("importance", plot_search.importance, "Parameter importance")
    save("candidates", plot_configs.objective,
         f"{primary} of the baseline and the candidates, every run shown")
    save("diagnostics", plot_configs.diagnostics,
         "Diagnostic metrics of the compared configurations")
    for stem in PLOTS:
        if stem not in out:
            (out_dir / f"{stem}.png").unlink(missing_ok=True)
    return out
