"""Study data -> Report. Pure: no storage, no clock, no randomness beyond the fixed seed.

Which evidence decides:

- **confirmation** (any complete ``kind="confirm"`` trial of a candidate): each candidate's
  confirmation runs (its search trials only to rule it out: ``significance.judge``), each at
  ``significance.each_of`` of the level, against every measurement of the baseline (its
  repeats before the search and its runs interleaved with the candidates'). When the
  baseline's two groups show that the host drifted between them
  (``autotune.evidence.drift.steadied``), every run's primary value is judged scaled by the
  baseline's trend in time to the end of the run, and the note (with both groups) and the
  verdict's reason say so.
- **search** (no confirmation): the top distinct feasible search configurations (as ``autotune
  confirm`` would pick them) against the baseline repeats, with the stricter fallback rule of
  ``significance`` (borrowed noise, 20% margin): at most "inconclusive" unless overwhelming.
- **none**: no baseline measurement, or no feasible search trial.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autotune.evidence import significance as sig
from autotune.evidence.drift import Drift, Trend, steadied
from autotune.evidence.members import differing
from autotune.evidence.tiebreak import TIE_GAP
from autotune.experiment.expressions import split_scenario
from autotune.experiment.models import Experiment
from autotune.report import robustness, scheduler
from autotune.report.environment import environment
from autotune.report.model import (
    Configuration,
    Counts,
    DeploymentRef,
    EvidenceKind,
    Failure,
    HistoryPoint,
    MetricSummary,
    Objective,
    ParameterInfo,
    Report,
    Run,
    Spread,
    TrialRow,
)
from autotune.study.confirmation.attrs import (
    CONFIDENCE_ATTR,
    LOOK_CONFIDENCE_ATTR,
    RULE,
    RULE_ATTR,
    Extension,
    extensions,
)
from autotune.study.confirmation.candidates import BASELINE, top_configurations
from autotune.study.confirmation.looks import LOOK_RUNS
from autotune.study.confirmation.standing import MIN_RUNS
from autotune.study.kinds import TrialKind
from autotune.study.record import measured_at
from autotune.study.space import settings_key, to_env

TOP = 3
"""Candidates considered without confirmation runs (``autotune confirm``'s default too)."""

OLD_RULE_NOTE = (
    ". This study's confirmation did not record its verdict rule (autotune records it since "
    "2026-12-04): if it was confirmed before that day's rule (a candidate judged on its "
    "confirmation runs alone, each of k candidates at 1 - alpha/k), the report made then counted "
    "the search measurement that chose a candidate as evidence for it and judged each candidate "
    "at the whole family's level, so the verdict reported then may differ from this one, made "
    "by today's rule")
"""Appended to the evidence note of a study confirmed before ``RULE_ATTR`` was recorded. The
rule changed at 2026-12-04 13:17 UTC and the attr came later that day: a study confirmed in
between was judged by today's rule but cannot be told apart, hence the "if"."""

BOOTSTRAP_RULE_NOTE = (
    ". This study was confirmed by an autotune that called a candidate better on the bootstrap "
    "interval alone (before 2026-12-04's exact rank test); this report also requires the rank "
    "test, so its verdict may differ from the one reported then")
"""Appended to the evidence note of a study confirmed under ``RULE`` 2 (the bootstrap alone)."""

FIXED_RUNS_NOTE = (
    ". This study was confirmed in fixed rounds by an autotune that let them adopt on 2 runs a "
    "side (before 2026-12-07); this report requires 3, as the sequential confirmation does, so "
    "its verdict may differ from the one reported then (`autotune confirm --fixed --repeats 3` "
    "measures the missing round)")
"""Appended to the evidence note of a study confirmed in fixed rounds under ``RULE`` 3."""


@dataclass(frozen=True)
class StudyData:
    """Everything ``summarize`` reads, gathered by ``collect.build_report``."""

    status: Mapping[str, Any]
    """``status_data(exp, studies)``."""
    details: Mapping[tuple[str, int], Mapping[str, Any]]
    """(study, trial number) -> {"record": ..., "candidate": ..., "round": ..., "step": ...}
    (``TrialRow.step``)."""
    attrs: Mapping[str, Any]
    """The search study's user attrs (target, chaos, measure, sampler, fingerprint)."""
    importance: Mapping[str, float] | None
    importance_note: str
    generated: str
    version: str


def summarize(exp: Experiment, data: StudyData, *, seed: int = sig.DEFAULT_SEED) -> Report:
    rows = tuple(_row(t, data.details.get((t["study"], t["number"]), {}))
                 for t in data.status["trials"])
    objectives = _objectives(exp)
    # A sequential confirmation looked several times: its verdict holds at the level the
    # looks' split gave it (autotune.study.confirmation.looks.look_levels), not at the usual 95%.
    sequential = CONFIDENCE_ATTR in data.attrs
    confidence = float(data.attrs.get(CONFIDENCE_ATTR, sig.CONFIDENCE))
    interim = data.attrs.get(LOOK_CONFIDENCE_ATTR)
    # MIN_RUNS a side for any confirmation, the fixed rounds' too (review finding: --fixed
    # --top 1 --repeats 2 adopted on 2 runs, 2 against 5 separating at 1/C(7, 2) = 4.8%).
    judged = _evidence(exp, rows, objectives, seed, confidence, MIN_RUNS,
                       extended=extensions(data.attrs))
    evidence, baseline, shift = judged.kind, judged.baseline, judged.shift
    # Confirmed candidates in the order the verdict chooses among them (the mean of their runs,
    # significance.typical); search-only ones by their median.
    by_mean = evidence == "confirmation"
    # Re-reporting a study confirmed under the old rule can change its verdict: say so.
    rule = data.attrs.get(RULE_ATTR)
    note = judged.note + ("" if not by_mean or rule == RULE or (rule == 3 and sequential)
                          else FIXED_RUNS_NOTE if rule == 3
                          else BOOTSTRAP_RULE_NOTE if rule == 2 else OLD_RULE_NOTE)
    candidates = tuple(sorted(judged.candidates, key=lambda c: _rank(c, objectives[0], by_mean)))
    if evidence == "none":
        # Nothing to compare: without a baseline the best search configuration is still what a
        # forced export would apply.
        # Keep current only says something on a measured baseline and a search that measured
        # candidates, none of them feasible; with nothing measured on either side nothing can
        # be kept on evidence (every search trial failed: Prometheus down all night, say).
        searched = any(r.study == "search" and r.state in ("COMPLETE", "SCREENED")
                       for r in rows)
        decision = sig.Decision("inconclusive" if candidates or baseline is None
                                or not searched else "keep current",
                                candidates[0].id if candidates else None, note, None)
    else:
        decision = sig.decide(
            [sig.Evidence(c.id, c.comparisons, c.feasible, len(c.runs),
                          _typical(c) if evidence == "confirmation" else None)
             for c in candidates],
            confirmed=evidence == "confirmation",
        )
        if shift is not None:  # the note has the runs; the reason, read alone, must say it too
            decision = replace(decision,
                               reason=f"{decision.reason}. {shift.warning(judged.steady)}")
    search = [r for r in rows if r.study == "search"]
    chosen = next((c for c in candidates if c.id == decision.chosen), None)
    measured: dict[str, list[TrialRow]] = {}
    for r in search:
        if r.state == "COMPLETE" and r.values:
            measured.setdefault(settings_key(r.settings), []).append(r)
    everything = [_configuration(exp, f"#{min(r.number for r in runs)}",
                                 min(r.number for r in runs), runs, (), ())
                  for runs in measured.values()]
    return Report(
        experiment=exp.name,
        description=exp.description,
        study=str(data.status["study"]),
        objectives=objectives,
        constraints=tuple(exp.constraints),
        parameters=tuple(_parameter(exp, p.name) for p in exp.parameters),
        deployment=_deployment(exp),
        environment=environment(
            exp, status=data.status, attrs=data.attrs,
            records=[d.get("record") or {} for d in data.details.values()],
            started=[r.started for r in rows if r.started], generated=data.generated,
            version=data.version),
        counts=Counts(
            budget=int(data.status["budget"]),
            search_complete=int(data.status["completed"]),
            search_failed=sum(1 for r in search if r.state == "FAIL"),
            baseline_complete=sum(1 for r in rows if r.kind == TrialKind.BASELINE
                                  and r.state == "COMPLETE"),
            confirm_complete=sum(1 for r in rows if r.kind == TrialKind.CONFIRM
                                 and r.state == "COMPLETE"),
            failed=int(data.status["failed"]),
            running=int(data.status["running"]),
            search_screened=sum(1 for r in search if r.state == "SCREENED"),
        ),
        evidence=evidence,
        evidence_note=note,
        method=_method(sequential, confidence, interim,
                       len(judged.candidates) if evidence == "confirmation" else 0),
        verdict=decision.verdict,
        reason=decision.reason,
        recommendation=decision.chosen if decision.verdict == "adopt" else None,
        best_candidate=decision.chosen,
        repeats_needed=decision.repeats_needed,
        separation=_separation(chosen, candidates, objectives[0], seed, by_mean),
        improvement=chosen.comparisons[0] if chosen is not None and chosen.comparisons else None,
        baseline=baseline,
        candidates=candidates,
        baseline_band=_spread(r.values[0] for r in rows
                              if r.kind == TrialKind.BASELINE and r.state == "COMPLETE"
                              and r.values),
        history=_history(search, objectives[0]),
        importance=dict(data.importance) if data.importance is not None else None,
        importance_note=data.importance_note,
        main_parameters=_main_parameters(exp, data.importance),
        diagnostics=tuple(m for m in exp.metrics
                          if not any(m in g.terms for g in exp.goals)),
        failures=tuple(Failure(r.study, r.number, r.kind, r.settings, r.failure or "unknown")
                       for r in rows if r.state == "FAIL"),
        trials=rows,
        insight=scheduler.build(exp, baseline, candidates, decision.chosen, everything,
                                data.details, data.attrs.get("target") or {}),
        captures=tuple(dict(c) for c in data.attrs.get("captures") or ()),
        robustness=robustness.build(exp, rows, objectives[0], baseline, candidates,
                                    decision.chosen, everything, seed=seed,
                                    confidence=confidence),
    )


def _method(sequential: bool, confidence: float, interim: Any, judged: int) -> str:
    """How the verdict was tested: the bootstrap, the looks' levels, the candidates' split."""
    text = sig.METHOD
    if sequential:
        text += f"; sequential confirmation: the verdict holds at {confidence:.2%}"
        if interim is not None:
            text += (f"; the earlier looks, which may stop it, at {float(interim):.2%} each (a "
                     "5% error rate over all of them, Bonferroni)")
        elif confidence == sig.CONFIDENCE:
            text += (" (no earlier look spent any of it: none could decide before the leader "
                     f"had {LOOK_RUNS} confirmation runs)")
    if judged > 1:
        text += (f"; {judged} candidates, each judged at "
                 f"{sig.each_of(confidence, judged):.2%} so that any wrong 'better' among them "
                 f"stays within {1 - confidence:.0%} (Bonferroni over the exact rank tests)")
    return text


# --- trials ------------------------------------------------------------------------------------

def _iso(ts: Any) -> str | None:
    if not isinstance(ts, int | float):
        return None
    return dt.datetime.fromtimestamp(float(ts), dt.UTC).isoformat(timespec="seconds")


def _row(t: Mapping[str, Any], detail: Mapping[str, Any]) -> TrialRow:
    record: Mapping[str, Any] = detail.get("record") or {}
    constraints = dict(t.get("constraints") or {})
    complete = t["state"] == "COMPLETE"
    seconds = record.get("seconds")
    return TrialRow(
        study=t["study"],
        number=int(t["number"]),
        kind=str(t["kind"]),
        # Optuna's PRUNED is our screened trial (study.screening): say it in the report's words
        state="SCREENED" if t["state"] == "PRUNED" else str(t["state"]),
        settings=dict(t.get("settings") or {}),
        values=tuple(t["values"]) if t.get("values") else None,
        metrics=dict(t.get("metrics") or {}),
        unavailable=dict(record.get("unavailable") or {}),
        constraints=constraints,
        feasible=all(v <= 0 for v in constraints.values()) if complete else None,
        # A retried trial inherits the failure attr of the attempt it replaces: only a trial
        # that failed has a failure.
        failure=(t.get("failure") or record.get("failure")) if t["state"] == "FAIL" else None,
        candidate=detail.get("candidate"),
        round=detail.get("round"),
        started=_iso(record.get("started")),
        seconds=float(seconds) if isinstance(seconds, int | float) else None,
        phases=dict(record.get("phases") or {}),
        retry_of=record.get("retry_of"),
        origin=record.get("origin"),
        timeline=tuple((str(n), float(a), float(b)) for n, a, b in record.get("timeline") or ()),
        member=record.get("member"),
        at=measured_at(record),
        step=detail.get("step"),
    )


def _objectives(exp: Experiment) -> tuple[Objective, ...]:
    out = []
    for g in exp.goals:
        terms = list(g.terms)
        unit = exp.metric(split_scenario(terms[0])[0]).unit if len(terms) == 1 else ""
        out.append(Objective(metric=g.label, direction=g.direction, unit=unit))
    return tuple(out)


def _typical(c: Configuration) -> float | None:
    """A confirmed candidate's ``significance.typical`` primary value over every run of it."""
    values = [r.values[0] for r in c.runs if r.values]
    return sig.typical(values) if values else None


def _spread(values: Iterable[float]) -> Spread | None:
    xs = list(values)
    if not xs:
        return None
    return Spread(median=statistics.median(xs), min=min(xs), max=max(xs), n=len(xs),
                  mean=statistics.fmean(xs))


# --- evidence ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Evidence:
    """What the verdict is judged on: its kind, the note that says so, the baseline and the
    candidates compared with it, and the baseline's drift when the runs show one."""

    kind: EvidenceKind
    note: str
    baseline: Configuration | None
    candidates: list[Configuration]
    shift: Drift | None = None
    steady: Trend | None = None
    """The baseline's trend every run was scaled by (``autotune.evidence.drift.steadied``)."""


_UNSCALED = (". The runs are judged as measured, so a verdict that mixes early and late runs "
             "is biased by the drift: there is no trend in time to scale them by (a run "
             "without a recorded time, or a value that is not positive)")


def _scaled(r: TrialRow, steady: Trend) -> TrialRow:
    """``r`` with its primary value scaled by the trend (the drift is measured on it alone:
    other objectives, the metrics and the trial table stay as measured); a run without a time
    (recorded by an older autotune) is left as measured."""
    if r.at is None or not r.values:
        return r
    return replace(r, values=(steady.scale(r.at, r.values[0]), *r.values[1:]))


def _evidence(
    exp: Experiment, rows: Sequence[TrialRow], objectives: Sequence[Objective], seed: int,
    confidence: float, min_runs: int, *, extended: Mapping[str, Extension] | None = None,
) -> _Evidence:
    # ``min_runs``: a sequential confirmation decides nothing on fewer than MIN_RUNS runs a
    # side, and the verdict must not either (a candidate dropped after round 1 has only 2).
    done = [r for r in rows if r.state == "COMPLETE" and r.values]
    # A pool's verdict leaves out the runs of a member whose baseline differs
    # (autotune.study.confirmation.standing.comparable).
    left_out = differing(((r.member, r.values[0]) for r in done
                          if r.member and r.kind == TrialKind.BASELINE and r.values),
                         reference=exp.member)
    done = [r for r in done if r.member not in left_out]
    repeats = [r for r in done if r.kind == TrialKind.BASELINE]
    # The baseline's runs of extension rounds count in their candidate's comparison alone
    # (autotune.study.confirmation.attrs.Extension): not in the drift, not for the other candidates.
    extended = extended or {}
    extension_rounds = {e.round for e in extended.values()}

    def interleaved(rows: Sequence[TrialRow]) -> tuple[list[TrialRow], list[TrialRow]]:
        # The baseline's confirmation runs: those every candidate is judged against, and those
        # of extension rounds.
        runs = [r for r in rows if r.kind == TrialKind.CONFIRM and r.candidate == BASELINE]
        return ([r for r in runs if r.round not in extension_rounds],
                [r for r in runs if r.round in extension_rounds])

    confirmed_baseline, _ = interleaved(done)
    # A host that drifted between the baseline's two groups biases evidence that mixes early
    # and late runs (autotune.evidence.drift): every run is then scaled by the baseline's trend
    # in time to what it would have read at the end, and the note and the reason say so.
    # Only a verdict on confirmation runs is scaled: the search-only fallback below compares
    # search trials with the repeats and says nothing of drift.
    shift, steady = steadied([(r.at, r.values[0]) for r in repeats if r.values],
                             [(r.at, r.values[0]) for r in confirmed_baseline if r.values])
    confirming = any(r.kind == TrialKind.CONFIRM and r.candidate != BASELINE for r in done)
    if steady is not None and confirming:
        done = [_scaled(r, steady) for r in done]
        repeats = [r for r in done if r.kind == TrialKind.BASELINE]
    confirm: dict[str, list[TrialRow]] = {}
    for r in done:
        if r.kind == TrialKind.CONFIRM and r.candidate != BASELINE:
            confirm.setdefault(settings_key(r.settings), []).append(r)
    confirmed_baseline, extension_baseline = interleaved(done)
    search = [r for r in done if r.study == "search"]
    by_settings: dict[str, list[TrialRow]] = {}
    for r in search:
        by_settings.setdefault(settings_key(r.settings), []).append(r)

    if confirm and (confirmed_baseline or repeats):
        # A candidate is judged on its confirmation runs only: its search measurement is the
        # one that got it chosen, biased towards looking better (confirmation.standing,
        # "What a verdict is judged on"); it is shown apart (search_values). The baseline's
        # repeats and interleaved runs were never chosen: both count.
        base_runs = [*repeats, *confirmed_baseline]
        baseline = _configuration(exp, "baseline", None, base_runs, (), ())
        # The report adopts if any candidate is called better: each is judged at the level
        # that keeps the family at ``confidence`` (Bonferroni over the candidates).
        each = sig.each_of(confidence, len(confirm))
        candidates = []
        stricter: list[str] = []
        for key, runs in confirm.items():
            trial = next((r.candidate for r in runs if isinstance(r.candidate, int)),
                         min((r.number for r in by_settings.get(key, [])), default=None))
            # A leader given an extension round is held to the stricter level recorded before
            # it was measured (autotune.evidence.extension), against the baseline with that
            # round's runs.
            given = extended.get(key)
            own = ([] if given is None
                   else [r for r in extension_baseline if r.round == given.round])
            measured = (0 if given is None else sum(r.round == given.round for r in runs),
                        len(own))
            alpha = None if given is None else given.level_for(1 - each, measured)
            partial = given is not None and given.in_part(measured)
            against = (baseline if not own else
                       _configuration(exp, "baseline", None, [*base_runs, *own], (), ()))
            candidates.append(_candidate(exp, trial, runs, by_settings.get(key, []), against,
                                         objectives, seed, margin=0.0, borrow=False,
                                         confidence=each, min_runs=min_runs,
                                         confirmed=True, rank_alpha=alpha))
            if given is not None and measured[0]:
                times = {1: "", 2: " twice"}.get(given.added, f" {given.added} times")
                level = ("measured in part: it cannot be called better" if partial
                         else f"rank test at p <= {alpha:.2g}")
                stricter.append(f"{candidates[-1].id}{times} ({level})")
        rounds = len({r.round for rs in confirm.values() for r in rs})
        searched = sum(len(by_settings.get(key, [])) for key in confirm)
        note = (f"confirmation: {sum(len(rs) for rs in confirm.values())} runs of "
                f"{len(confirm)} candidate(s) in {rounds} round(s), each judged on its "
                f"confirmation runs alone at {each * 100:.4g}% (the {searched} search "
                "measurement(s) that chose them are left out of 'better': the best of many looks "
                "better than it is; they may only rule a candidate out); "
                f"baseline: {len(repeats)} repeats before the search and "
                f"{len(confirmed_baseline)} runs interleaved with the candidates")
        if stricter:
            note += (f". One more round after the planned ones measured {', '.join(stricter)} "
                     "and the baseline as often, the leader being undecided; it is judged at that "
                     f"stricter level so that a wrong 'better' at either look stays within "
                     f"{1 - each:.2g}, against the baseline's runs with that round's, which no "
                     "other candidate is judged against (autotune.evidence.extension)")
        ties = [r for rs in confirm.values() for r in rs if r.step == "tie-break"]
        if ties:
            ids = [f"#{c}" for c in sorted({str(r.candidate) for r in ties},
                                           key=lambda c: (len(c), c))]
            # Two ids, except when the pair changed between rounds (a study continued over
            # nights, or more rounds of looks).
            names = (" and ".join(ids) if len(ids) == 2
                     else f"two of {', '.join(ids[:-1])} and {ids[-1]}")
            count = len({r.round for r in ties})
            note += (f". After the looks, {count} tie-break round(s) each measured {names} once "
                     "more (the one to adopt and one that may be better: a better mean, or "
                     f"runs overlapping and means within {TIE_GAP:.0%}): the choice is made on "
                     "all their runs (autotune.evidence.tiebreak)")
        if shift is not None:
            note += f". {shift.text(objectives[0].metric)}"
            note += f". {steady.text(objectives[0].metric)}" if steady is not None else _UNSCALED
        return _Evidence("confirmation", note, baseline, candidates, shift, steady)

    picks = top_configurations([_summary(r) for r in search], [o.direction for o in objectives],
                               TOP, exclude=[exp.baseline_settings()])
    if not repeats:
        unmatched = [_configuration(exp, f"#{p.trial}", p.trial,
                                    by_settings[settings_key(p.settings)], (), ()) for p in picks]
        return _Evidence("none", "the baseline was never measured successfully, so no "
                         "candidate can be compared with it", None, unmatched)
    baseline = _configuration(exp, "baseline", None, repeats, (), ())
    if not picks:
        return _Evidence("none", "no feasible completed search trial to compare with the "
                         "baseline", baseline, [])
    candidates = [
        _candidate(exp, p.trial, by_settings[settings_key(p.settings)],
                   by_settings[settings_key(p.settings)], baseline, objectives, seed,
                   margin=sig.FALLBACK_MARGIN, borrow=True)
        for p in picks
    ]
    note = (f"search only (no confirmation runs): the top {len(picks)} search configuration(s) "
            f"against the {len(repeats)} baseline repeats measured before the search; a single "
            "search measurement borrows the baseline's relative noise, and adopting needs the "
            f"whole interval above {sig.FALLBACK_MARGIN:.0%}. Run `autotune confirm` for a "
            "verdict from interleaved repeats")
    return _Evidence("search", note, baseline, candidates)


def _summary(r: TrialRow) -> dict[str, Any]:
    return {"number": r.number, "kind": r.kind, "state": r.state, "settings": r.settings,
            "values": list(r.values or ()), "constraints": r.constraints}


def _candidate(
    exp: Experiment,
    trial: int | None,
    runs: Sequence[TrialRow],
    search_runs: Sequence[TrialRow],
    baseline: Configuration,
    objectives: Sequence[Objective],
    seed: int,
    *,
    margin: float,
    borrow: bool,
    confidence: float = sig.CONFIDENCE,
    min_runs: int = 2,
    confirmed: bool = False,
    rank_alpha: float | None = None,
) -> Configuration:
    """``runs`` are the evidence; with ``confirmed`` they are confirmation runs and the primary
    objective is judged with ``significance.judge`` (``search_runs`` may only rule it out)."""
    comparisons = []
    for i, o in enumerate(objectives):
        mine = [r.values[i] for r in runs if r.values]
        theirs = [run.values[i] for run in baseline.runs]
        if confirmed and i == 0:
            # Better on its confirmation runs alone; ruled out with its search runs too.
            comparisons.append(sig.judge(
                mine, [r.values[0] for r in search_runs if r.values], theirs, metric=o.metric,
                direction=o.direction, confidence=confidence, min_runs=min_runs, seed=seed,
                rank_alpha=rank_alpha))
            continue
        comparisons.append(sig.compare(mine, theirs, metric=o.metric, direction=o.direction,
                                       margin=margin, borrow=borrow, seed=seed,
                                       confidence=confidence, min_runs=min_runs))
    search_values = tuple(r.values[0] for r in sorted(search_runs, key=lambda r: r.number)
                          if r.values)
    config_id = f"#{trial}" if trial is not None else f"confirmed-{runs[0].number}"
    return _configuration(exp, config_id, trial, runs, search_values, tuple(comparisons))


def _configuration(
    exp: Experiment,
    config_id: str,
    trial: int | None,
    runs: Sequence[TrialRow],
    search_values: tuple[float, ...],
    comparisons: tuple[sig.Comparison, ...],
) -> Configuration:
    runs = sorted(runs, key=lambda r: (r.round or 0, r.study, r.number))
    settings = dict(runs[0].settings)
    n_obj = len(exp.goals)
    return Configuration(
        id=config_id,
        trial=trial,
        settings=settings,
        env=to_env(exp, settings),
        runs=tuple(Run(r.study, r.number, r.round, tuple(r.values or ()), bool(r.feasible))
                   for r in runs),
        objectives=tuple(s for i in range(n_obj)
                         if (s := _spread(r.values[i] for r in runs if r.values)) is not None),
        metrics=tuple(_metric(exp, name, runs) for name in exp.metrics),
        feasible=all(r.feasible for r in runs),
        search_values=search_values,
        comparisons=comparisons,
    )


def _metric(exp: Experiment, name: str, runs: Sequence[TrialRow]) -> MetricSummary:
    values = tuple(r.metrics[name] for r in runs if name in r.metrics)
    missing = [r for r in runs if name not in r.metrics]
    reasons = sorted({r.unavailable.get(name, "no reading was recorded") for r in missing})
    return MetricSummary(name=name, unit=exp.metric(name).unit, values=values,
                         median=statistics.median(values) if values else None,
                         unavailable=len(missing), reasons=tuple(reasons))


def _separation(chosen: Configuration | None, candidates: Sequence[Configuration],
                primary: Objective, seed: int, by_mean: bool) -> str | None:
    """The chosen configuration against the best other feasible one, by the evidence runs of
    each: better beyond the noise, equivalent (the whole interval within the practical margin),
    or not told apart (the interval's two ends, in words)."""
    others = [c for c in candidates if c is not chosen and c.feasible and c.runs]
    if chosen is None or not chosen.runs or not others:
        return None
    runner_up = min(others, key=lambda c: _rank(c, primary, by_mean))
    mine = [r.values[0] for r in chosen.runs if r.values]
    theirs = [r.values[0] for r in runner_up.runs if r.values]
    c = sig.compare(mine, theirs, metric=primary.metric, direction=primary.direction, seed=seed)
    if c.outcome == "better":
        return f"{chosen.id} beats the runner-up {runner_up.id}: {sig.describe(c)}"
    if c.low is None or c.high is None:
        return (f"{chosen.id} vs the runner-up {runner_up.id}: too few runs to compare "
                f"({sig.describe(c)})")
    if c.high < 0:
        # The choice is by the mean of the runs (or the runner-up broke no rule the chosen did
        # not): the runner-up's median is still better beyond the noise, and the reader must know.
        return (f"the runner-up {runner_up.id} has the better median beyond the noise: "
                f"{chosen.id} is between {_side(c.low)} and {_side(c.high)} "
                f"({sig.describe(c, rank_test=False)})"
                + (f"; {chosen.id} was chosen by the mean of its runs" if by_mean else ""))
    if max(abs(c.low), abs(c.high)) < sig.PRACTICAL:
        return (f"{chosen.id} and the runner-up {runner_up.id} are equivalent within "
                f"{sig.PRACTICAL:.0%} ({sig.describe(c, rank_test=False)}); "
                "either is a sound choice")
    # A wide interval is no equivalence: "equivalent within 21%" read as "the same" when the
    # chosen one may be a fifth better, or worse.
    return (f"{chosen.id} and the runner-up {runner_up.id} are not told apart by these runs: "
            f"{chosen.id} is between {_side(c.low)} and {_side(c.high)} ({sig.describe(c)})")


def _side(change: float) -> str:
    """+0.213 -> "21.3% better", -0.032 -> "3.2% worse"."""
    if abs(change) < 0.0005:
        return "no different"
    return f"{abs(change):.1%} {'better' if change > 0 else 'worse'}"


def _rank(c: Configuration, primary: Objective,
          by_mean: bool) -> tuple[float, float, float, str]:
    """Best first: ``by_mean``, by ``significance.rank_key`` of the runs (the mean, then the
    median: as the confirmation's leader is chosen, ``standing.read_standing``); otherwise by the
    median; then the trial number."""
    trial = float("inf") if c.trial is None else float(c.trial)
    values = [r.values[0] for r in c.runs if r.values]
    if by_mean and values:
        return (*sig.rank_key(values, primary.direction), trial, c.id)
    if not c.objectives:
        return (float("inf"), float("inf"), trial, c.id)
    sign = 1.0 if primary.direction == "minimize" else -1.0
    median = c.objectives[0].median
    return (sign * median, sign * median, trial, c.id)


# --- search ------------------------------------------------------------------------------------

def _history(search: Sequence[TrialRow], primary: Objective) -> tuple[HistoryPoint, ...]:
    better: Callable[[float, float], bool] = (
        (lambda a, b: a < b) if primary.direction == "minimize" else (lambda a, b: a > b))
    best: float | None = None
    points = []
    for r in sorted(search, key=lambda r: r.number):
        if r.state != "COMPLETE" or not r.values:
            continue
        value = r.values[0]
        if r.feasible and (best is None or better(value, best)):
            best = value
        points.append(HistoryPoint(r.number, value, bool(r.feasible), best))
    return tuple(points)


def _main_parameters(exp: Experiment, importance: Mapping[str, float] | None) -> tuple[str, ...]:
    names = [p.name for p in exp.parameters]
    if importance:
        names.sort(key=lambda n: -importance.get(n, 0.0))
    return tuple(names[:2])


def _parameter(exp: Experiment, name: str) -> ParameterInfo:
    p = exp.parameter(name)
    return ParameterInfo(name=p.name, env=p.env_var, type=p.type, values=p.values, low=p.low,
                         high=p.high, log=p.log)


def _deployment(exp: Experiment) -> DeploymentRef | None:
    k = exp.target.kubernetes
    return DeploymentRef(k.namespace, k.deployment, k.container) if k is not None else None
