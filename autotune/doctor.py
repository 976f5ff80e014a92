"""Is this machine ready to run an experiment? Each check says how to fix what is missing."""

from __future__ import annotations

from autotune.errors import AutotuneError
from autotune.experiment.models import Experiment
from autotune.platforms.kubernetes import stack as cluster
from autotune.platforms.local.doctor import command_runs, local_checks, memory_fits
from autotune.platforms.replay import ReplayGrid
from autotune.readiness import Check


def cluster_checks(exp: Experiment, context: str | None = None) -> list[Check]:
    try:
        problems = cluster.validate_cluster(exp, context=context)
    except AutotuneError as e:
        return [Check("cluster access", False, str(e), "check kubeconfig / --context")]
    if not problems:
        return [Check("cluster access", True, "access, Deployment, container, CRD, dry-runs ok")]
    return [Check("cluster", False, p) for p in problems]


def run(exp: Experiment | None, context: str | None = None) -> list[Check]:
    if exp is not None and exp.target.kubernetes is not None:
        return cluster_checks(exp, context)
    if exp is not None and exp.target.replay is not None:
        return [_replay_grid(exp.target.replay.grid)]
    if exp is not None and exp.target.kind == "simulated":
        return [Check("simulated target", True, "needs nothing beyond autotune itself")]
    checks = local_checks()
    if exp is None:
        return checks
    if exp.prometheus.url is not None:
        checks = [c for c in checks if c.name != "prometheus"]
    return checks + [c for c in (memory_fits(exp), command_runs(exp)) if c is not None]


def _replay_grid(grid: str) -> Check:
    """The recorded grid loads (review finding: doctor said ok, the run then failed on it)."""
    try:
        loaded = ReplayGrid.load(grid)
    except AutotuneError as e:
        return Check("replay target", False, str(e), "give target.replay.grid a recorded grid")
    return Check("replay target", True, f"{grid}: {len(loaded.rows)} configurations recorded")
