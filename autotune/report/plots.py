"""Every plot of the report, written as PNG files next to it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna

from autotune.insight.explain import Breakdown
from autotune.insight.heatmap import Heat
from autotune.report import plot_configs, plot_sched, plot_search
from autotune.report.document import Figure
from autotune.report.model import Report

PLOTS = ("history", "slice", "contour", "heatmap", "importance", "candidates", "diagnostics",
         "scenarios", "sched_heat", "gc_heat", "cpu_breakdown")
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
    save("scenarios", plot_configs.scenarios,
         f"{primary} of the compared configurations under each chaos scenario")
    insight = report.insight
    if insight is not None:
        chosen = next((r for r in insight.rows if r.id == insight.chosen), None)
        titles = {"sched_heat": ("sched_latency", "Scheduling latency (time runnable before "
                                                  "running) over the window"),
                  "gc_heat": ("gc_pause", "Stop-the-world GC pauses over the window")}
        for kind, (name, title) in titles.items():
            sides = insight.heat.get(name)
            if not sides or chosen is None:
                continue
            base, best = sides["baseline"], sides["best"]
            fig = plot_sched.heatmap_pair(
                Heat.from_json(base), Heat.from_json(best), title=title,
                baseline_label=f"baseline ({base['run']})",
                best_label=f"{insight.chosen} ({best['run']})")
            fig.savefig(out_dir / f"{kind}.png", dpi=100)
            out[kind] = Figure(f"{kind}.png", f"{title}: share of each step's observations per "
                               f"latency bucket, the baseline and {insight.chosen}, one run each "
                               "(the one nearest to its median)")
        rows = [Breakdown(r.id, r.cpu.get("user"), r.cpu.get("gc"), r.cpu.get("idle"),
                          r.cpu.get("total"), r.throttled_share) for r in insight.rows]
        if any(r.total is not None for r in rows):
            plot_sched.cpu_breakdown(rows).savefig(out_dir / "cpu_breakdown.png", dpi=100)
            out["cpu_breakdown"] = Figure(
                "cpu_breakdown.png", "Where the CPU went (cores, /cpu/classes medians) and the "
                "share of CFS periods throttled")
    for stem in PLOTS:
        if stem not in out:
            (out_dir / f"{stem}.png").unlink(missing_ok=True)
    return out
