"""Which target, injector and metric source an experiment gets: an explicit registry.

Backends are imported only when chosen, so a laptop run never needs the Kubernetes client
configured and a cluster run never needs the Go toolchain.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autotune.clock import Clock
from autotune.experiment.models import Experiment
from autotune.study.trial import Backends


def _simulated(exp: Experiment, results: Path, clock: Clock, context: str | None,
               preflight: bool) -> Backends:
    from autotune.platforms import simulated

    world = simulated.World(simulated.world_path(exp, results))
    world.load()  # a state_file that is not a world's is refused before its lock is made
    return Backends(
        target=simulated.SimulatedService(exp, world, clock),
        injector=simulated.SimulatedInjector(world, clock),
        source=simulated.SimulatedMetrics(exp, world, seed=exp.study.seed),
        blocker=simulated.SimulatedBlocker(world, clock),
    )


def _replay(exp: Experiment, results: Path, clock: Clock, context: str | None,
            preflight: bool) -> Backends:
    from autotune.platforms.replay import Replay, ReplayGrid
    from autotune.runlock import RunLock

    assert exp.target.replay is not None
    # Two runs of one replayed experiment would both enqueue its baseline and design.
    lock = RunLock(results / "replay.lock",
                   why=f"One run (or cleanup) of the replayed experiment {exp.name} at a time")
    return Replay(exp, ReplayGrid.load(exp.target.replay.grid), clock,
                  seed=exp.study.seed).backends(lock)


def _local(exp: Experiment, results: Path, clock: Clock, context: str | None,
           preflight: bool) -> Backends:
    from autotune.platforms.local.doctor import require
    from autotune.platforms.local.stack import build

    if preflight:  # a run or a confirmation; cleanup must work on a machine missing a program
        require(exp)
    return build(exp, results, clock)


def _kubernetes(exp: Experiment, results: Path, clock: Clock, context: str | None,
                preflight: bool) -> Backends:
    from autotune.platforms.kubernetes.stack import build

    return build(exp, results, clock, context=context, preflight=preflight)


REGISTRY: dict[str, Callable[[Experiment, Path, Clock, str | None, bool], Backends]] = {
    "simulated": _simulated,
    "local": _local,
    "kubernetes": _kubernetes,
    "replay": _replay,
}


def build(exp: Experiment, results: Path, clock: Clock, *, context: str | None = None,
          preflight: bool = True) -> Backends:
    """``context``: the kubeconfig context to use (kubernetes targets only). ``preflight``:
    refuse, before anything changes, a target that cannot be measured as asked (a run, a
    confirmation); ``autotune cleanup`` passes False: undoing must always be possible."""
    return REGISTRY[exp.target.kind](exp, results, clock, context, preflight)
