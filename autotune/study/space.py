"""The experiment's parameters as Optuna distributions, and settings as environment variables."""

from __future__ import annotations

import math
from typing import Any

import optuna

from autotune.experiment.models import Experiment, Parameter, Scalar, Setting


def suggest(trial: optuna.Trial, exp: Experiment) -> dict[str, Setting]:
    return {p.name: _suggest_one(trial, p) for p in exp.parameters}


def _suggest_one(trial: optuna.Trial, p: Parameter) -> Scalar:
    if p.values is not None:
        choice = trial.suggest_categorical(p.name, list(p.values))
        assert choice is not None  # values never hold null (checked when loading)
        return choice
    assert p.low is not None and p.high is not None
    if p.type == "int":
        return int(trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1),
                                     log=p.log))
    return float(trial.suggest_float(p.name, p.low, p.high, step=p.step, log=p.log))


def describe_space(exp: Experiment) -> dict[str, Any]:
    """A JSON-able fingerprint of the search space, compared on resume."""
    out: dict[str, Any] = {}
    for p in exp.parameters:
        out[p.name] = {"env": p.env_var, "type": p.type}
        if p.values is not None:
            out[p.name]["values"] = list(p.values)
        else:
            out[p.name].update(low=p.low, high=p.high, step=p.step, log=p.log)
    return out


def grid(exp: Experiment) -> dict[str, list[Any]]:
    """Every value of every parameter, for the grid sampler (checks guarantee it is finite)."""
    space: dict[str, list[Any]] = {}
    for p in exp.parameters:
        if p.values is not None:
            space[p.name] = list(p.values)
            continue
        assert p.low is not None and p.high is not None
        step = p.step or 1.0
        n = math.floor((p.high - p.low) / step + 1e-9) + 1
        values = [p.low + i * step for i in range(n)]
        space[p.name] = [int(v) for v in values] if p.type == "int" else values
    return space


def to_env(exp: Experiment, settings: dict[str, Setting]) -> dict[str, str | None]:
    """Parameter values to environment variables; ``None`` means "leave unset"."""
    env: dict[str, str | None] = {}
    for p in exp.parameters:
        value = settings.get(p.name)
        env[p.env_var] = None if value is None else p.format(value)
    return env
