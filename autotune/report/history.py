"""Night by night: each run's study, environment, verdict, recommendation and primary objective,
read from the night records (``autotune.study.night.records``), as a table, a Markdown section, JSON
and a plot over time.

``write`` puts ``nights.md``, ``nights.json`` and ``nights.png`` in a directory (by default
next to the report); the Markdown is a self-contained section that a report can include.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autotune import files
from autotune.errors import StudyError
from autotune.experiment.models import Experiment, Setting
from autotune.report import markdown as md
from autotune.report.collect import build_report
from autotune.report.document import Block, Bullets, Figure, Heading, Paragraph, Table
from autotune.study import storage as st
from autotune.study.night.records import nights

PLOT = "nights.png"
FILES = ("nights.md", "nights.json", PLOT)
"""What ``write`` replaces in its directory."""


@dataclass(frozen=True)
class NightRow:
    night: str
    started: str
    finished: str | None
    status: str
    """running (or killed), finished, interrupted, failed."""
    study: str
    environment: str | None
    """The environment id (``autotune.study.night.fingerprint.environment_id``)."""
    opened: str | None
    """new, continued, new environment."""
    changes: tuple[str, ...]
    warm_started: int
    search_trials: int | None
    stop: str | None
    verdict: str | None
    configuration: str | None
    """The recommendation (adopt), else the most promising candidate; its id in the study."""
    settings: dict[str, Setting] | None
    metric: str | None
    unit: str
    candidate: float | None
    """Median of the primary objective over the configuration's runs."""
    baseline: float | None
    improvement: float | None
    ci95: tuple[float | None, float | None] | None
    """The improvement's interval, at ``confidence`` (named ci95 in the records: 95% unless
    several candidates shared the error rate, 98.33% each for 3)."""
    confidence: float | None
    drift: str | None
    drift_text: str | None
    cut: str | None = None
    """Why the night's confirmation or drift check stopped before its end (study.deadline)."""


def rows(records: Sequence[Mapping[str, Any]]) -> list[NightRow]:
    """One row per night record, oldest first. Pure; a field a record lacks stays None."""
    out = []
    for r in sorted(records, key=lambda r: str(r.get("started", ""))):
        verdict = r.get("verdict") or {}
        chosen = verdict.get("candidate") or {}
        drift = r.get("drift") or {}
        env = r.get("environment") or {}
        ci = verdict.get("ci95")
        out.append(NightRow(
            night=str(r.get("night")), started=str(r.get("started", "")),
            finished=r.get("finished"), status=str(r.get("status", "running")),
            study=str(r.get("study")), environment=env.get("id"), opened=r.get("opened"),
            changes=tuple(r.get("changes") or ()), warm_started=len(r.get("warm_start") or ()),
            search_trials=r.get("search_trials"), stop=r.get("stop"),
            verdict=verdict.get("verdict"), configuration=chosen.get("id"),
            settings=chosen.get("settings"), metric=verdict.get("metric"),
            unit=str(verdict.get("unit") or ""), candidate=verdict.get("candidate_median"),
            baseline=verdict.get("baseline_median"), improvement=verdict.get("improvement"),
            ci95=None if ci is None else (ci[0], ci[1]),
            confidence=verdict.get("confidence"),
            drift=drift.get("status"), drift_text=drift.get("text"), cut=r.get("cut"),
        ))
    return out


def load(exp: Experiment, url: str) -> list[NightRow]:
    missing = st.missing_database(url)
    if missing is not None:
        raise StudyError([missing])
    storage = st.open_storage(url, exp.study.heartbeat)
    if not st.experiment_studies(storage, exp.name):
        raise StudyError([f"no study named {exp.name!r} in {st.redact(url)}: "
                          "run `autotune run` with this experiment first"])
    return rows(nights(storage, exp.name))


# --- rendering ------------------------------------------------------------------------------

def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.3g} ms" if abs(v) < 1 else f"{v:.3g} s"
    return f"{v:.4g}{(' ' + unit) if unit else ''}"


def _settings(settings: Mapping[str, Setting] | None) -> str:
    if not settings:
        return "-"
    return " ".join(f"{k}={'unset' if v is None else v}" for k, v in settings.items())


def _objective(r: NightRow) -> str:
    if r.candidate is None and r.baseline is None:
        return "-"
    text = f"{_value(r.candidate, r.unit)} vs {_value(r.baseline, r.unit)}"
    if r.improvement is not None:
        text += f" ({r.improvement:+.1%}"
        if r.ci95 is not None and r.ci95[0] is not None and r.ci95[1] is not None:
            level = "" if r.confidence is None else f"{r.confidence * 100:.4g}% "
            text += f", {level}CI {r.ci95[0]:+.1%}..{r.ci95[1]:+.1%}"
        text += ")"
    return text


def _when(r: NightRow) -> str:
    return r.started.replace("T", " ")[:16] if r.started else "-"


def _verdict(r: NightRow) -> str:
    if r.status != "finished":
        return f"({r.status})"
    return (r.verdict or "-").upper()


def _opened(r: NightRow) -> str:
    if r.opened == "new environment":
        return f"new env, warm {r.warm_started}" if r.warm_started else "new env"
    return r.opened or "-"


def table(history: Sequence[NightRow]) -> list[list[str]]:
    """Header and one row per night: what the terminal and the Markdown show."""
    metric = next((r.metric for r in reversed(history) if r.metric), "objective")
    head = ["night (UTC)", "study", "env", "opened", "trials", "verdict", "configuration",
            f"{metric}: it vs baseline", "drift"]
    body = [[_when(r), r.study, r.environment or "-", _opened(r),
             "-" if r.search_trials is None else str(r.search_trials), _verdict(r),
             "-" if r.configuration is None else f"{r.configuration} {_settings(r.settings)}",
             _objective(r), r.drift or "-"] for r in history]
    return [head, *body]


def text(history: Sequence[NightRow]) -> str:
    if not history:
        return "no nights recorded yet (runs before nightly records have none)"
    cells = table(history)
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in history:
        if r.changes:
            lines.append(f"{_when(r)}: environment changed: {'; '.join(r.changes)}")
        if r.drift in ("drifted", "inconclusive", "still best") and r.drift_text:
            lines.append(f"{_when(r)}: {r.drift_text}")
    return "\n".join(lines)


def blocks(history: Sequence[NightRow], plot: str | None = PLOT) -> list[Block]:
    """The report section (in report.md and report.html alike, and alone in nights.md): the
    plot, the table, what changed and what the drift checks said."""
    out: list[Block] = [Heading(2, "Night by night")]
    if not history:
        return [*out, Paragraph("No nights recorded yet.")]
    if plot is not None:
        out.append(Figure(plot, "Primary objective night by night"))
    cells = table(history)
    out.append(Table(tuple(cells[0]), tuple(tuple(row) for row in cells[1:])))
    notes = [f"{_when(r)}: environment changed ({'; '.join(r.changes)}): new study "
             f"{r.study}" for r in history if r.changes]
    notes += [f"{_when(r)}: {r.drift_text}" for r in history
              if r.drift_text and r.drift != "skipped"]
    notes += [f"{_when(r)}: the search stopped: {r.stop}" for r in history
              if r.stop and r.stop.startswith(("converged", "night budget"))]
    notes += [f"{_when(r)}: cut short ({r.cut}); its verdict rests on the runs done"
              for r in history if r.cut]
    if notes:
        out.append(Bullets(tuple(notes)))
    out.append(Paragraph(
        "Configuration: the recommendation when the verdict is ADOPT, else the most promising "
        "candidate. Its objective is the median of its runs against the baseline's, with the "
        "relative improvement and its bootstrap interval at the level shown (95%, or more for "
        "each of several candidates sharing the error rate)."))
    return out


def markdown(history: Sequence[NightRow], plot: str | None = PLOT) -> str:
    return md.render(blocks(history, plot))


def to_json(history: Sequence[NightRow]) -> str:
    return json.dumps([asdict(r) for r in history], indent=2) + "\n"


def _write(path: Path, content: str) -> Path:
    # Readers (a browser refreshing, CI collecting artifacts) never see half a file; a link
    # planted in the results directory is replaced, never written through (autotune.files).
    files.replace(path, content)
    return path


def write(history: Sequence[NightRow], out_dir: Path) -> list[Path]:
    """nights.md, nights.json and, when matplotlib is installed, nights.png."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plot: str | None = PLOT
    try:
        from autotune.report import plot_history
    except ImportError:
        plot = None
        (out_dir / PLOT).unlink(missing_ok=True)
    written = []
    if plot is not None:
        fig = plot_history.figure(history)
        fig.savefig(out_dir / PLOT, dpi=100)
        written.append(out_dir / PLOT)
    written.insert(0, _write(out_dir / "nights.json", to_json(history)))
    written.insert(0, _write(out_dir / "nights.md", markdown(history, plot)))
    return written


def verdict_record(exp: Experiment, studies: st.Studies) -> dict[str, Any]:
    """The report's verdict, the chosen configuration and the primary objective's medians."""
    report = build_report(exp, studies)
    chosen = report.configuration(report.best_candidate)
    c = report.improvement
    o = report.objectives[0]
    baseline = (report.baseline.objectives[0].median
                if report.baseline is not None and report.baseline.objectives else None)
    return {
        "verdict": report.verdict, "reason": report.reason,
        "recommendation": report.recommendation,
        "candidate": None if chosen is None else {"id": chosen.id, "settings": chosen.settings,
                                                  "env": chosen.env},
        "metric": o.metric, "unit": o.unit, "direction": o.direction,
        "candidate_median": None if c is None else c.candidate_median,
        "baseline_median": c.baseline_median if c is not None else baseline,
        "improvement": None if c is None else c.improvement,
        "ci95": None if c is None else [c.low, c.high],
        "confidence": None if c is None else c.confidence,  # ci95's level: not always 95%
        "n": None if c is None else [c.n_candidate, c.n_baseline],
    }
