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


AFTER_ROLLOUT = 60.0
"""What comes after the restore's rollout wait, for which a stopped run keeps a minute: the
watch's grace past its deadline (``client.WATCH_GRACE``), the lists and patches that remove the
run's record, the Lease's release, the failed trial's and the night's records."""


def undo_budget(rollout_timeout: float) -> float:
    """What a stopped run budgets to undo itself: two stress removals, the restore's rollout and
    a minute after it. Requests retried against a degraded API server come on top: no budget
    bounds those."""
    return 2 * RECOVER_TIMEOUT + rollout_timeout + AFTER_ROLLOUT


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
            f"removal, the restore's rollout, {AFTER_ROLLOUT:g} s after it), more than the "
            f"{SHIPPED_GRACE_PERIOD:g} s the shipped CronJob grants (deploy/base/cronjob.yaml): "
            f"raise its terminationGracePeriodSeconds to at least {budget:g} (if yours grants "
            "that already, nothing to do), or the SIGKILL may come before the env is back"]
