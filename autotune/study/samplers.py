"""Sampler choice: an explicit registry, the choice recorded in the study."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from importlib.util import find_spec

import optuna

from autotune.errors import StudyError
from autotune.experiment.models import Experiment
from autotune.study.space import grid


def gp_available() -> bool:
    return find_spec("torch") is not None and find_spec("scipy") is not None


def derive_seed(seed: int | None, trials_so_far: int) -> int | None:
    """A fixed seed would replay the same suggestions after a resume; mix in the trial count."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}:{trials_so_far}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def resolve(name: str) -> str:
    if name == "auto":
        return "gp" if gp_available() else "tpe"
    if name == "gp" and not gp_available():
        raise StudyError(["study.sampler: gp needs torch and scipy: pip install 'autotune[gp]'"])
    return name


def make_sampler(exp: Experiment, trials_so_far: int) -> tuple[str, optuna.samplers.BaseSampler]:
    name = resolve(exp.study.sampler)
    seed = derive_seed(exp.study.seed, trials_so_far)
    # Optuna 5 samplers read the values set with trial.set_constraint themselves.
    registry: dict[str, Callable[[], optuna.samplers.BaseSampler]] = {
        "gp": lambda: optuna.samplers.GPSampler(
            seed=seed, n_startup_trials=min(10, exp.study.trials // 2 + 1)),
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        "grid": lambda: optuna.samplers.GridSampler(grid(exp), seed=seed),
    }
    return name, registry[name]()
