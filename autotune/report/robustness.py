"""The report's view of several chaos scenarios: each top configuration under each storm.

A study with ``chaos.scenarios`` records every metric per scenario (``<metric>@<scenario>``,
``autotune.study.scenarios``). Here, for the primary objective's metric: the baseline, the
chosen configuration and the next candidates under each scenario, each against the baseline
under the same scenario with the verdict's own interval (``autotune.evidence.significance``);
where the chosen one gains least (the verdict names it); and a scenario's own winner that
loses clearly under another ("best under X but fragile under Y").
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from autotune.evidence import significance as sig
from autotune.experiment.expressions import split_scenario
from autotune.experiment.models import Experiment
from autotune.report.model import (
    Configuration,
    Objective,
    Robustness,
    ScenarioCell,
    ScenarioRow,
    TrialRow,
)
from autotune.study.scenarios import qualified

FRAGILE = 0.10
"""A scenario's winner is called fragile where its median is this much worse than the chosen
configuration's (more than the run-to-run noise a few repeats show on the demo)."""

SHOWN = 4
"""Rows of the table: the baseline and at most three candidates."""


def build(exp: Experiment, rows: Sequence[TrialRow], primary: Objective,
          baseline: Configuration | None, candidates: Sequence[Configuration],
          chosen: str | None, everything: Sequence[Configuration], *, seed: int,
          confidence: float) -> Robustness | None:
    terms = exp.goals[0].terms
    if len(exp.chaos.scenarios) < 2 or len(terms) != 1:
        return None  # one storm; or a weighted sum, which has no single metric per scenario
    [(metric, _weight)] = terms.items()
    if split_scenario(metric)[1] is not None:
        return None  # the objective is one scenario's value already
    names = tuple(s.name for s in exp.chaos.scenarios)
    by_run: dict[tuple[str, int], TrialRow] = {(r.study, r.number): r for r in rows}
    first = [c for c in candidates if c.id == chosen] + [c for c in candidates if c.id != chosen]
    shown = ([baseline] if baseline is not None else []) + first
    table = tuple(_row(c, names, metric, by_run, baseline, primary, seed, confidence)
                  for c in shown[:SHOWN])
    configs = {c.id: c for c in [*everything, *shown]}
    medians = {cid: _medians(c, names, metric, by_run) for cid, c in configs.items()}
    lower = primary.direction == "minimize"
    winners = {}
    for n in names:
        measured = [(v, cid) for cid, m in medians.items() if (v := m.get(n)) is not None]
        if measured:
            winners[n] = (min(measured) if lower else max(measured))[1]
    runs = {n: len(_values(configs[w], n, metric, by_run)) for n, w in winners.items()}
    chosen_row = next((r for r in table if r.config == chosen), None)
    return Robustness(metric=metric, combine=exp.chaos.combine, scenarios=names, rows=table,
                      winners=winners, winner_runs=runs, weakest=_weakest(chosen_row, confidence),
                      fragile=_fragile(winners, runs, medians, chosen, lower, everything))


def _values(c: Configuration, name: str, metric: str,
            by_run: Mapping[tuple[str, int], TrialRow]) -> list[float]:
    key = qualified(metric, name)
    out = []
    for run in c.runs:
        row = by_run.get((run.study, run.number))
        if row is not None and key in row.metrics:
            out.append(row.metrics[key])
    return out


def _medians(c: Configuration, names: Sequence[str], metric: str,
             by_run: Mapping[tuple[str, int], TrialRow]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for n in names:
        values = _values(c, n, metric, by_run)
        out[n] = statistics.median(values) if values else None
    return out


def _row(c: Configuration, names: Sequence[str], metric: str,
         by_run: Mapping[tuple[str, int], TrialRow], baseline: Configuration | None,
         primary: Objective, seed: int, confidence: float) -> ScenarioRow:
    cells = []
    for n in names:
        mine = _values(c, n, metric, by_run)
        theirs = _values(baseline, n, metric, by_run) if baseline is not None else []
        comparison = None
        if c is not baseline and mine and theirs:
            comparison = sig.compare(mine, theirs, metric=qualified(metric, n),
                                     direction=primary.direction, seed=seed,
                                     confidence=confidence)
        cells.append(ScenarioCell(n, tuple(mine), statistics.median(mine) if mine else None,
                                  comparison))
    return ScenarioRow(c.id, dict(c.settings), tuple(cells))


def _weakest(row: ScenarioRow | None, confidence: float) -> str | None:
    if row is None:
        return None
    compared = [(c, c.comparison.improvement) for c in row.cells if c.comparison is not None
                and c.comparison.improvement is not None]
    if len(compared) < 2:
        return None
    weak = min(compared, key=lambda pair: pair[1])[0]
    strong = max(compared, key=lambda pair: pair[1])[0]
    assert weak.comparison is not None and weak.comparison.improvement is not None
    how = "gains least" if weak.comparison.improvement >= 0 else "is worse than the baseline"
    return (f"{row.config} {how} under {weak.scenario}: {_change(weak, confidence)} "
            f"against the baseline there (most under {strong.scenario}: "
            f"{_change(strong, confidence)})")


def _change(cell: ScenarioCell, confidence: float) -> str:
    c = cell.comparison
    assert c is not None and c.improvement is not None
    text = f"{c.improvement:+.1%}"
    if c.low is not None and c.high is not None:
        text += f" ({confidence * 100:.4g}% interval {c.low:+.1%} .. {c.high:+.1%})"
    return text


def _fragile(winners: Mapping[str, str], runs: Mapping[str, int],
             medians: Mapping[str, Mapping[str, float | None]], chosen: str | None,
             lower: bool, everything: Sequence[Configuration]) -> tuple[str, ...]:
    if chosen is None or chosen not in medians:
        return ()
    settings = {c.id: c.settings for c in everything}
    out = []
    for scenario, winner in winners.items():
        if winner == chosen:
            continue
        worst: tuple[str, float] | None = None
        for other, value in medians[winner].items():
            mine = medians[chosen].get(other)
            if other == scenario or value is None or mine is None or mine <= 0:
                continue
            # How much worse than the chosen, relative to the chosen either way: 800 req/s
            # against 1000 is 20% worse (1000 / 800 - 1 would call it 25%).
            loss = (value / mine - 1) if lower else (1 - value / mine)
            if loss > FRAGILE and (worst is None or loss > worst[1]):
                worst = (other, loss)
        if worst is not None:
            what = " ".join(f"{k}={v}" for k, v in settings.get(winner, {}).items())
            n = runs.get(scenario, 0)
            out.append(f"{winner}{f' ({what})' if what else ''} is best under {scenario} but "
                       f"fragile under {worst[0]}: {worst[1]:.0%} worse than {chosen} there "
                       f"({'one run' if n == 1 else f'medians of {n} runs'} under {scenario})")
    return tuple(out)
