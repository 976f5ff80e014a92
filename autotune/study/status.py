"""What a study holds, as plain data (for ``--json``) and as text for people."""

from __future__ import annotations

import statistics
from typing import Any

from optuna.trial import TrialState

from autotune.experiment.models import Experiment
from autotune.study.kinds import TrialKind
from autotune.study.loop import RunResult, best_summary, completed_search, trial_summary
from autotune.study.storage import Studies, redact


def status_data(exp: Experiment, studies: Studies) -> dict[str, Any]:
    trials = [
        {**trial_summary(t), "study": "reference"}
        for t in studies.reference.get_trials(deepcopy=False)
    ] + [{**trial_summary(t), "study": "search"} for t in studies.search.get_trials(deepcopy=False)]
    trials.sort(key=lambda t: (t["study"] != "reference", t["number"]))
    baseline = [t["values"][0] for t in trials
                if t["kind"] == TrialKind.BASELINE and t["state"] == "COMPLETE" and t["values"]]
    return {
        "experiment": exp.name,
        "study": studies.name,
        "storage": redact(studies.url),
        "objective": [{"direction": g.direction, "metric": g.label} for g in exp.goals],
        "constraints": list(exp.constraints),
        "sampler": studies.search.user_attrs.get("sampler"),
        "budget": exp.study.trials,
        "completed": completed_search(studies.search),
        "running": sum(1 for t in trials if t["state"] == TrialState.RUNNING.name),
        "failed": sum(1 for t in trials if t["state"] == TrialState.FAIL.name),
        "baseline": _spread(baseline),
        "best": best_summary(exp, studies.search),
        "trials": trials,
    }


def _direction(data: dict[str, Any]) -> str:
    objective = data.get("objective") or [{}]
    return str(objective[0].get("direction", "minimize"))


def _spread(values: list[float]) -> dict[str, Any] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def _settings(settings: dict[str, Any]) -> str:
    return " ".join(f"{k}={'unset' if v is None else v}" for k, v in settings.items())


def _value(values: list[float] | None) -> str:
    return ", ".join(f"{v:.4g}" for v in values) if values else "-"


def status_text(data: dict[str, Any]) -> str:
    lines = [
        f"study {data['study']} in {data['storage']}",
        f"objective: {', '.join(o['direction'] + ' ' + o['metric'] for o in data['objective'])}"
        + (f"; constraints: {', '.join(data['constraints'])}" if data["constraints"] else ""),
        f"search trials: {data['completed']}/{data['budget']} complete, {data['failed']} failed, "
        f"{data['running']} running; sampler: {data['sampler'] or '-'}",
        "",
        f"{'#':>4}  {'kind':<9} {'state':<8} {'value':>10}  settings / constraints / failure",
    ]
    for t in data["trials"]:
        extra = _settings(t["settings"])
        if t["constraints"]:
            extra += "  [" + ", ".join(
                f"{k}: {'ok' if v <= 0 else f'violated by {v:.3g}'}"
                for k, v in t["constraints"].items()) + "]"
        if t["failure"]:
            extra += f"  FAILED: {t['failure']}"
        number = f"b{t['number']}" if t["study"] == "reference" else str(t["number"])
        lines.append(f"{number:>4}  {t['kind']:<9} {t['state']:<8} {_value(t['values']):>10}  "
                     f"{extra}")
    lines.append("")
    lines += best_lines(data["best"], data["baseline"], _direction(data))
    return "\n".join(lines)


def best_lines(best: dict[str, Any] | None, baseline: dict[str, Any] | None,
               direction: str = "minimize") -> list[str]:
    out = []
    if baseline:
        out.append(f"baseline: median {baseline['median']:.4g} "
                   f"(min {baseline['min']:.4g}, max {baseline['max']:.4g}, n={baseline['n']})")
    if best is None:
        out.append("best search trial: none feasible yet")
    elif "pareto" in best:
        out.append(f"Pareto front ({len(best['pareto'])} trials):")
        out += [f"  #{t['number']}: {_value(t['values'])}  {_settings(t['settings'])}"
                for t in best["pareto"]]
    else:
        # "search trial": one measurement, which the verdict (pooled runs) may overrule.
        line = f"best search trial: #{best['number']} value {_value(best['values'])}  " \
               f"{_settings(best['settings'])}"
        if baseline and best["values"] and baseline["median"]:
            # Oriented as the verdict's improvement, positive is better (review finding: the
            # raw change, -48.4% here for +57.0% there, read as the opposite of the verdict).
            change = (best["values"][0] - baseline["median"]) / abs(baseline["median"]) * 100
            better = -change if direction == "minimize" else change
            line += (f"  ({abs(better):.1f}% {'better' if better >= 0 else 'worse'} than the "
                     "baseline median in one measurement; the verdict weighs the noise)")
        out.append(line)
    return out


def run_text(result: RunResult, data: dict[str, Any], results_path: str) -> str:
    lines = [f"stopped: {result.stop_reason}; {result.completed} search trials complete, "
             f"{result.failed_this_run} failed in this run"]
    lines += best_lines(data["best"], data["baseline"], _direction(data))
    lines.append(f"results: {results_path} (autotune status / report for details)")
    return "\n".join(lines)
