"""Is this machine ready to run an experiment? Each check says how to fix what is missing."""

from __future__ import annotations

from autotune.errors import AutotuneError
from autotune.experiment.models import Experiment
from autotune.platforms.kubernetes import stack as cluster
from autotune.platforms.local.doctor import local_checks, memory_fits
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
    if exp is not None and exp.target.kind in ("simulated", "replay"):
        return [Check(f"{exp.target.kind} target", True,
                      "needs nothing beyond autotune itself")]
    checks = local_checks()
    if exp is not None and exp.prometheus.url is not None:
        checks = [c for c in checks if c.name != "prometheus"]
    memory = memory_fits(exp) if exp is not None else None
    return checks + ([memory] if memory is not None else [])
