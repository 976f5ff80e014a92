"""The report's layout as a list of blocks, so Markdown and HTML say exactly the same thing.

Only wording and number formatting happen here; every figure shown is a field of the Report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autotune.evidence import significance as sig
from autotune.evidence.members import DIFFERS, member_baselines
from autotune.experiment.models import Setting
from autotune.insight.explain import duration
from autotune.report.model import Configuration, MetricSummary, Report, SchedulerRow, TrialRow


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str
    strong: bool = False


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Figure:
    file: str
    """A PNG next to the report."""
    caption: str


Block = Heading | Paragraph | Bullets | Table | Figure

VERDICT_TITLE = {"adopt": "ADOPT", "keep current": "KEEP CURRENT",
                 "inconclusive": "INCONCLUSIVE"}
# The verdict's heading starts with this and its VERDICT_TITLE (html.py colours it by that).
VERDICT_HEADING = "Verdict: "


def value(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    return f"{x:.4g}{' ' + unit if unit else ''}"


def setting(v: Setting) -> str:
    return "unset" if v is None else str(v)


def settings(s: Mapping[str, Setting]) -> str:
    return " ".join(f"{k}={setting(v)}" for k, v in s.items())


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def build(report: Report, figures: Mapping[str, Figure]) -> list[Block]:
    """``figures`` by kind: history, slice, contour or heatmap, importance, candidates,
    diagnostics."""
    blocks: list[Block] = [Heading(1, f"autotune report: {report.experiment}")]
    if report.description:
        blocks.append(Paragraph(report.description))
    primary = report.objectives[0]
    goal = ", ".join(f"{o.direction} {o.metric}{f' ({o.unit})' if o.unit else ''}"
                     for o in report.objectives)
    blocks.append(Paragraph(
        f"Study {report.study}, report generated {report.environment.generated}. Objective: "
        f"{goal}. Constraints: {', '.join(report.constraints) or 'none'}."))
    blocks += _verdict(report)
    blocks += _robustness(report, figures)
    blocks += _candidates(report, figures)
    blocks += _configurations(report, figures)
    blocks += _scheduler(report, figures)
    blocks += _search(report, figures, primary.metric)
    blocks += _environment(report)
    blocks += _failures(report)
    blocks += _pool(report, primary.metric)
    blocks += _trials(report)
    return blocks


def _pool(report: Report, metric: str) -> list[Block]:
    """A pool's members: what each measured, and whether one measures differently."""
    members = sorted({t.member for t in report.trials if t.member})
    if len(members) < 2:
        return []
    # The target (the pool's first member, which runs the confirmation), as the verdict has it.
    d = report.deployment
    reference = f"{d.namespace}/{d.name}" if d is not None else None
    baselines = {b.member: b for b in member_baselines(
        ((t.member, t.values[0]) for t in report.trials
         if t.member and t.kind == "baseline" and t.state == "COMPLETE" and t.values),
        reference)}
    rows = []
    for m in members:
        mine = [t for t in report.trials if t.member == m]
        b = baselines.get(m)
        rows.append((m, str(sum(t.kind == "search" and t.state == "COMPLETE" for t in mine)),
                     str(sum(t.state == "FAIL" for t in mine)),
                     value(b.median) if b is not None else "-",
                     ("DIFFERS" if b.differs else "like the others") if b is not None else "-"))
    return [Heading(2, "Pool members"),
            Paragraph("Each member measured the baseline; a member DIFFERS when every one of its "
                      "baseline runs lies outside the other members' range and its median is "
                      f"more than {DIFFERS:.0%} from the pool's: its trials do not compare with "
                      "the others'. The confirmation ran on one member (the trials name it)."),
            Table(("member", "search trials", "failed", f"baseline {metric} median",
                   "baseline"), tuple(rows))]


def _robustness(report: Report, figures: Mapping[str, Figure]) -> list[Block]:
    """Several chaos scenarios: each top configuration under each storm."""
    robust = report.robustness
    if robust is None:
        return []
    how = ("the worst scenario's value" if robust.combine == "worst"
           else "the scenarios' weighted mean")
    rows = []
    for r in robust.rows:
        cells = []
        for c in r.cells:
            text = value(c.median)
            if c.comparison is not None and c.comparison.improvement is not None:
                text += f" ({percent(c.comparison.improvement)}"
                if c.comparison.low is not None and c.comparison.high is not None:
                    text += f", {percent(c.comparison.low)} .. {percent(c.comparison.high)}"
                text += ")"
            cells.append(f"{text}, n={len(c.values)}")
        rows.append((r.config, settings(r.settings), *cells))
    out: list[Block] = [
        Heading(2, "Robustness: each storm"),
        Paragraph(f"Every trial measured {robust.metric} under each scenario in its own window "
                  f"(the order rotating from trial to trial); the objective is {how}. Each "
                  "cell: the median of the configuration's runs under that scenario, and in "
                  "brackets its improvement on the baseline under the same scenario with the "
                  "verdict's interval."),
        Table(("configuration", "settings", *robust.scenarios), tuple(rows)),
        Paragraph("Best under each (the median of n runs): " + "; ".join(
            f"{s}: {w} (n={robust.winner_runs.get(s, 0)})" for s, w in robust.winners.items())
            + ". A winner of one run may only have been lucky."),
    ]
    if robust.fragile:
        out.append(Bullets(robust.fragile))
    if "scenarios" in figures:
        out.append(figures["scenarios"])
    return out


def _verdict(report: Report) -> list[Block]:
    chosen = report.configuration(report.best_candidate)
    title = VERDICT_TITLE[report.verdict]
    if report.recommendation and chosen is not None:
        title += f": {chosen.id} ({settings(chosen.settings)})"
    out: list[Block] = [Heading(2, VERDICT_HEADING + title), Paragraph(report.reason, strong=True)]
    if chosen is not None and report.baseline is not None:
        label = "recommended" if report.recommendation else f"best candidate ({chosen.id})"
        out.append(Table(
            ("parameter", "variable", "current (baseline)", label),
            tuple((p.name, p.env, setting(report.baseline.settings.get(p.name)),
                   setting(chosen.settings.get(p.name))) for p in report.parameters),
        ))
    robust = report.robustness
    if robust is not None and robust.weakest:
        out.append(Paragraph(f"Under each storm: {robust.weakest}.", strong=True))
    out.append(Paragraph(f"Evidence: {report.evidence_note}."))
    if report.separation:
        out.append(Paragraph(f"Runner-up: {report.separation}."))
    out.append(Paragraph(
        f"Method: {report.method}. Improvement is the relative change of the median toward the "
        f"objective (positive is better). Adopt: the whole interval is above 0 (above "
        f"{sig.FALLBACK_MARGIN:.0%} without confirmation runs) and reaches "
        f"{sig.PRACTICAL:.0%}, confirmation runs separate from the baseline's by the exact "
        f"rank test at the interval's level, and every run satisfied the "
        f"constraints. Keep current: the interval excludes an improvement of "
        f"{sig.PRACTICAL:.0%} or more. Inconclusive: otherwise."))
    return out


def _candidates(report: Report, figures: Mapping[str, Figure]) -> list[Block]:
    out: list[Block] = [Heading(2, "Candidates against the baseline")]
    if not report.candidates:
        out.append(Paragraph("No candidate to compare."))
        return out
    unit = report.objectives[0].unit
    rows: list[tuple[str, ...]] = []
    for c in report.candidates:
        cmp = c.comparisons[0] if c.comparisons else None
        ci = (f"{percent(cmp.low)} .. {percent(cmp.high)}"
              if cmp is not None and cmp.low is not None else "-")
        spread = c.objectives[0] if c.objectives else None
        rows.append((c.id, settings(c.settings), str(len(c.runs)),
                     ", ".join(value(v, unit) for v in c.search_values) or "-",
                     value(spread.median if spread else None, unit),
                     value(spread.mean if spread else None, unit),
                     percent(cmp.improvement if cmp else None), ci,
                     "yes" if c.feasible else "no",
                     "-" if cmp is None else cmp.outcome + (" (with its search run)"
                                                            if cmp.with_search else "")))
    if report.baseline is not None and report.baseline.objectives:
        b = report.baseline
        rows.insert(0, ("baseline", settings(b.settings), str(len(b.runs)), "",
                        value(b.objectives[0].median, unit), value(b.objectives[0].mean, unit),
                        "", "", "yes" if b.feasible else "no", ""))
    metric = report.objectives[0].metric
    out.append(Table(("configuration", "settings", "runs", "search", f"median {metric}",
                      f"mean {metric}", "improvement", "CI", "feasible", "outcome"),
                     tuple(rows)))
    if report.evidence == "confirmation":
        out.append(Paragraph(
            "A candidate's runs are its confirmation runs; \"search\" is the search measurement "
            "that got it chosen, left out of its evidence because the best of several flatters "
            "it. It is used only to rule a candidate out: such a row says \"(with its search "
            "run)\", and its improvement and interval then include it. "
            "The improvement and its interval are about the median (the verdict's test); the "
            "rows are ordered by the mean, and among candidates called better the report adopts "
            "the best mean (every confirmation run counts in it)."))
    if "candidates" in figures:
        out.append(figures["candidates"])
    return out


def _metric_cell(m: MetricSummary) -> str:
    if m.median is None:
        return "unavailable: " + "; ".join(m.reasons)
    text = value(m.median, m.unit)
    if m.unavailable:
        text += f" (unavailable in {m.unavailable} run(s): {'; '.join(m.reasons)})"
    return text


def _configurations(report: Report, figures: Mapping[str, Figure]) -> list[Block]:
    configs: list[Configuration] = [c for c in (report.baseline, *report.candidates)
                                    if c is not None]
    out: list[Block] = [Heading(2, "Configurations")]
    if not configs:
        out.append(Paragraph("No configuration was measured."))
        return out
    names = [m.name for m in configs[0].metrics]
    out.append(Paragraph("One row per configuration: the median of every declared metric over "
                         "the runs used as evidence."))
    out.append(Table(("configuration", "settings", "runs", *names),
                     tuple((c.id, settings(c.settings), str(len(c.runs)),
                            *(_metric_cell(m) for m in c.metrics)) for c in configs)))
    if "diagnostics" in figures:
        out.append(figures["diagnostics"])
    elif not report.diagnostics:
        out.append(Paragraph("The experiment declares no diagnostic metric besides the "
                             "objective."))
    return out


def _scheduler(report: Report, figures: Mapping[str, Figure]) -> list[Block]:
    """Inside the Go scheduler: why the chosen configuration wins, from measured figures."""
    insight = report.insight
    if insight is None:
        return _captures(report)
    out: list[Block] = [Heading(2, "Inside the Go scheduler"), Paragraph(insight.explanation)]

    def share(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    def overflow(r: SchedulerRow) -> str:
        if r.overflow_runs is None:
            return "not traced"
        longest = f", longest {r.overflow_longest:.1f} s" if r.overflow_runs else ""
        return f"{r.overflow_runs} of {r.traced_runs} runs{longest}"

    out.append(Paragraph(
        "Medians over each configuration's runs. Throttled: share of CFS periods in which the "
        "cgroup was throttled. GC CPU: GC's share of the CPU the program used; P idle: idle "
        "share of GOMAXPROCS x time (/cpu/classes). Run queue: runnable goroutines (global + "
        "local queues), p99.9 over the window (schedtrace, else Go 1.26's runnable-goroutines "
        "gauge per scrape). Overflow: runs in which that p99.9 "
        "stayed at or above 128 per P for 2.5 s or more (autotune/insight/overflow.py). "
        "'-': not measured."))
    out.append(Table(
        ("configuration", "GOMAXPROCS", "throttled", "GC CPU", "P idle", "sched p99",
         "run queue p99.9", "overflow"),
        tuple((r.label, "-" if r.gomaxprocs is None else str(r.gomaxprocs),
               share(r.throttled_share), share(r.gc_cpu_share), share(r.idle_share),
               "-" if r.sched_p99 is None else duration(r.sched_p99),
               "-" if r.runq_p999 is None else f"{r.runq_p999:g}",
               overflow(r)) for r in insight.rows)))
    for kind in ("sched_heat", "gc_heat", "cpu_breakdown"):
        if kind in figures:
            out.append(figures[kind])
    return out + _captures(report)


def _captures(report: Report) -> list[Block]:
    if not report.captures:
        return []
    # The captures were taken when the run ended; a report made later (more confirmation
    # runs, another rule) may recommend something else, or nothing.
    now = report.configuration(report.recommendation) if report.recommendation else None
    items = []
    for c in report.captures:
        name = str(c["name"])
        if name == "recommended" and (now is None
                                      or dict(now.settings) != dict(c.get("settings") or {})):
            name = "recommended when captured, not now"
        what = f"{name} ({settings(c.get('settings') or {})})"
        if c.get("failure"):
            items.append(f"{what}: not captured, {c['failure']}")
            continue
        for f in c.get("files") or ():
            items.append(f"{what}, {f['kind']} under stress, {f['seconds']:g} s, {f['bytes']} "
                         f"bytes, open with: {f['open_with']}")
    return [Heading(3, "Runtime trace and CPU profile"), Bullets(tuple(items))]


def _search(report: Report, figures: Mapping[str, Figure], metric: str) -> list[Block]:
    n = report.counts
    out: list[Block] = [
        Heading(2, "Search"),
        Paragraph(f"{n.search_complete} of {n.budget} search trials complete"
                  + (f" ({n.search_screened} screened out early: study.screening)"
                     if n.search_screened else "")
                  + f", {n.search_failed} failed; {n.baseline_complete} baseline repeats and "
                  f"{n.confirm_complete} confirmation runs complete; sampler "
                  f"{report.environment.sampler}."),
    ]
    if report.baseline_band is not None:
        band = report.baseline_band
        out.append(Paragraph(f"Baseline repeats before the search: {metric} median "
                             f"{value(band.median)} (min {value(band.min)}, max "
                             f"{value(band.max)}, n={band.n})."))
    for kind in ("history", "slice", "contour", "heatmap", "importance"):
        if kind in figures:
            out.append(figures[kind])
    if report.importance is None:
        out.append(Paragraph(f"Parameter importance: {report.importance_note}."))
    else:
        out.append(Paragraph("Parameter importance (" + report.importance_note + "): " + ", ".join(
            f"{k} {v:.2f}" for k, v in report.importance.items()) + "."))
    return out


def _environment(report: Report) -> list[Block]:
    e = report.environment
    items = [f"target: {e.target_kind}"]
    items += [f"target {k}: {v}" for k, v in e.target.items() if k != "kind"]
    items += [
        f"CPU limit: {e.cpu_limit}",
        f"Go version of the service: {e.go_version}",
        f"GOMAXPROCS when unset (the baseline): {e.gomaxprocs_default}",
        f"stress: {e.stress}",
        f"measurement: {e.measure}",
        f"sampler: {e.sampler}",
        f"autotune version: {e.autotune_version} (trials measured with "
        f"{', '.join(e.measured_with) or 'not recorded'})",
        f"study: {e.study} in {e.storage}",
        f"hosts: {', '.join(e.hosts) or 'not recorded'}",
        f"trials started between {e.first_trial or '-'} and {e.last_trial or '-'} (UTC)",
        f"report generated: {e.generated}",
    ]
    return [Heading(2, "Environment"), Bullets(tuple(items))]


def _failures(report: Report) -> list[Block]:
    out: list[Block] = [Heading(2, "Failed trials")]
    if not report.failures:
        out.append(Paragraph("None."))
        return out
    out.append(Table(("study", "#", "kind", "settings", "reason"),
                     tuple((f.study, str(f.number), f.kind, settings(f.settings), f.reason)
                           for f in report.failures)))
    return out


def _trials(report: Report) -> list[Block]:
    rows = []
    for t in report.trials:
        tag = "" if t.candidate is None else (
            f"#{t.candidate}" if isinstance(t.candidate, int) else str(t.candidate))
        if t.round is not None:
            tag += f" r{t.round}"
        if t.step is not None:
            tag += f" {t.step}"
        rows.append((t.study, str(t.number) + (f" @{t.member}" if t.member else ""),
                     t.kind + (f" ({t.origin})" if t.origin else ""),
                     t.state, ", ".join(value(v) for v in t.values) if t.values else "-",
                     settings(t.settings),
                     "-" if t.feasible is None else ("yes" if t.feasible else "no"),
                     tag.strip(), t.started or "-", _timeline(t), t.failure or ""))
    return [Heading(2, "All trials"),
            Paragraph("#: the trial's number (@ the pool member that measured it). Kind "
                      "(origin): a search trial came from study.enqueue, the Go-aware prior, "
                      "the space-filling design or the sampler. Candidate / round: a confirmation "
                      "run's candidate and round, and 'extension' or 'tie-break' for a run "
                      "after the looks. Timeline: each phase's start and length in seconds "
                      "from the trial's start."),
            Table(("study", "#", "kind", "state", "values", "settings", "feasible",
                   "candidate / round", "started (UTC)", "timeline (s)", "failure"),
                  tuple(rows))]


def _timeline(t: TrialRow) -> str:
    if t.timeline:
        return " ".join(f"{name}@{start:.1f}+{seconds:.1f}" for name, start, seconds in t.timeline)
    return " ".join(f"{name} {seconds:.1f}" for name, seconds in t.phases.items()) or "-"

