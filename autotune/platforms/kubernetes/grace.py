"""Does a stopped night's undo fit in the CronJob's grace period?

When Kubernetes stops the nightly Job (``activeDeadlineSeconds``, a node drain, ``kubectl delete
job``), the pod gets SIGTERM and, ``terminationGracePeriodSeconds`` later, SIGKILL. In between
autotune removes the stress and puts the env back: the StressChaos's removal may be waited for
twice (the trial's, then the run's cleanup: ``stresschaos.RECOVER_TIMEOUT`` each) before the
restore's rollout, which waits up to ``rollout_timeout``. A SIGKILL in that rollout's wait
leaves the env patch sent but the run's record and Lease for the next night, and the night's
record and message unwritten: ``validate`` and ``nightly`` warn when the budget exceeds the
shipped CronJob's grace period.
"""

from __future__ import annotations

from autotune.experiment import Experiment
from autotune.platforms.kubernetes.stresschaos import RECOVER_TIMEOUT

SHIPPED_GRACE_PERIOD = 600.0
"""deploy/base/cronjob.yaml's ``terminationGracePeriodSeconds`` (a test checks they agree)."""


def undo_budget(rollout_timeout: float) -> float:
    """The longest a stopped run may take to undo itself: two stress removals and a rollout."""
    return 2 * RECOVER_TIMEOUT + rollout_timeout


def grace_warnings(exp: Experiment) -> list[str]:
    """A warning when a stopped run's undo may outlast the shipped grace period. Pure."""
    k8s = exp.target.kubernetes
    if k8s is None:
        return []
    budget = undo_budget(k8s.rollout_timeout)
    if budget <= SHIPPED_GRACE_PERIOD:
        return []
    return [f"target.kubernetes.rollout_timeout: {k8s.rollout_timeout:g} s: a stopped run may "
            f"need {budget:g} s to undo itself (2 x {RECOVER_TIMEOUT:g} s for a stuck stress's "
            f"removal, then the restore's rollout), more than the {SHIPPED_GRACE_PERIOD:g} s "
            "the shipped CronJob grants (deploy/base/cronjob.yaml): raise its "
            f"terminationGracePeriodSeconds to at least {budget:g}, or the SIGKILL may come "
            "before the env is back"]
