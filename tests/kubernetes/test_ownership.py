"""Who owns the tuned env after a study: the restore gives it back, on the real API server.

A write that changes a field moves its ownership to the writer (structured-merge-diff's
Updater, apimachinery pkg/util/managedfields/internal/structuredmerge.go): every candidate and
the restore itself are autotune's writes, so after a study autotune's field manager owned the
restored entries and whoever declared them (a ``kubectl apply --server-side``, a GitOps tool)
no longer did. Their next apply that drops a variable then left it in place, where it would
have been deleted had autotune never run (the Kubernetes review's finding). These tests declare
the env by server-side apply, run candidates and the restore through the target, and check
what a later apply does.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.kubernetes.conftest import ORIGINAL_ENV, World, deployment_manifest

Obj = dict[str, Any]
GITOPS = "gitops"


def _declare(world: World, env: list[Obj], manager: str = GITOPS) -> None:
    """The Deployment as a server-side applier declares it (forced, as GitOps tools do)."""
    dep = deployment_manifest(world.namespace, world.node, env=env)
    world.admin.patch(world.path("deployments", "api"), dep, "apply", manager=manager)


def _managers(world: World) -> dict[str, Obj]:
    return {e["manager"]: e for e in world.deployment()["metadata"].get("managedFields") or []}


def _env_fields(entry: Obj | None) -> Obj:
    fields = (entry or {}).get("fieldsV1") or {}
    for step in ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"api"}', "f:env"):
        fields = fields.get(step) or {}
    return dict(fields)


def test_after_the_restore_the_declaring_applier_owns_the_env_again(world: World) -> None:
    before = _declared_by_gitops(world, ORIGINAL_ENV)
    assert 'k:{"name":"GOMAXPROCS"}' in before
    target = world.target()
    # One candidate changes GOMAXPROCS, the next deletes it (the unset baseline), one adds
    # FORCEGC: every kind of change to the entries moves them to autotune's field manager.
    target.apply({"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": "500"})
    target.apply({"GOMAXPROCS": None, "FORCEGC_INTERVAL_MS": None})
    target.restore()
    assert world.template_env() == ORIGINAL_ENV
    assert _env_fields(_managers(world).get(GITOPS)) == before
    assert _env_fields(_managers(world).get("autotune")) == {}

    # Their next apply stops declaring GOMAXPROCS: it goes, as it would had autotune not run.
    _declare(world, [{"name": "LOG_LEVEL", "value": "info"}])
    assert world.template_env() == [{"name": "LOG_LEVEL", "value": "info"}]


def _declared_by_gitops(world: World, env: list[Obj]) -> Obj:
    """The Deployment as if the applier had created it, and its env fields as it owns them."""
    _declare(world, env)
    # The test world's creation co-owns every field (as "before-first-apply" once the applier
    # came), which would keep a dropped variable whatever autotune did.
    world.patch("deployments", "api", {"metadata": {"managedFields": [
        e for e in _managers(world).values() if e["manager"] == GITOPS]}}, "merge")
    world.settled()
    return copy.deepcopy(_env_fields(_managers(world).get(GITOPS)))


def test_the_cleanup_of_a_dead_run_gives_the_ownership_back_too(world: World) -> None:
    before = _declared_by_gitops(world, ORIGINAL_ENV)
    world.target().apply({"GOMAXPROCS": None, "FORCEGC_INTERVAL_MS": "500"})
    world.dies()
    fresh = world.target()
    assert len(fresh.cleanup()) == 1  # the record it finds is the annotation the dead run left
    fresh.restore()
    world.assert_pristine()
    assert _env_fields(_managers(world).get(GITOPS)) == before
    _declare(world, [{"name": "LOG_LEVEL", "value": "info"}])
    assert world.template_env() == [{"name": "LOG_LEVEL", "value": "info"}]


def _night_shift_applies_during_a_study(world: World, before: list[dict[str, Any]]) -> None:
    """Declared by GitOps; the candidates ``before``; a person's forced apply of GOMAXPROCS=2
    (adopted as the original); one more candidate; the restore, which puts theirs back."""
    _declared_by_gitops(world, ORIGINAL_ENV)
    target = world.target()
    for candidate in before:
        target.apply(candidate)
    theirs = [{"name": "LOG_LEVEL", "value": "info"}, {"name": "GOMAXPROCS", "value": "2"}]
    _declare(world, theirs, manager="night-shift")
    target.apply({"GOMAXPROCS": "1", "FORCEGC_INTERVAL_MS": None})
    target.restore()
    assert world.template_env() == theirs


def test_whoever_changed_a_variable_in_the_night_owns_it_after(world: World) -> None:
    # A person applies production's new GOMAXPROCS during the study: adopted as the original,
    # and theirs after the restore (not the GitOps tool's, whose record is older).
    _night_shift_applies_during_a_study(world, [{"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": None}])
    # As had autotune not run: their forced apply took the value from the GitOps tool, which
    # still shares the entry itself.
    owners = _managers(world)
    key = 'k:{"name":"GOMAXPROCS"}'
    assert _env_fields(owners.get("night-shift"))[key] == {".": {}, "f:name": {}, "f:value": {}}
    assert _env_fields(owners.get(GITOPS))[key] == {".": {}, "f:name": {}}
    assert _env_fields(owners.get("autotune")) == {}


def test_autotunes_share_of_an_entry_it_re_added_is_not_given_back(world: World) -> None:
    # Review finding: the unset baseline deleted GOMAXPROCS, a candidate re-added it (autotune
    # owned it whole), and a person's forced apply of it in the night shared its name with
    # autotune; recorded at adoption with that share, autotune kept {name: GOMAXPROCS} after
    # the person stopped declaring it.
    _night_shift_applies_during_a_study(world, [{"GOMAXPROCS": None, "FORCEGC_INTERVAL_MS": None},
                                                {"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": None}])
    assert _env_fields(_managers(world).get("autotune")) == {}
    _declare(world, [{"name": "LOG_LEVEL", "value": "info"}], manager="night-shift")
    assert world.template_env() == [{"name": "LOG_LEVEL", "value": "info"}]


def test_ownership_comes_back_after_a_burst_longer_than_the_retries(world: World) -> None:
    # A fresh CI run on a slower machine: the Deployment controller's status writes during the
    # restore's rollout outlasted the five give-back attempts (the test clock does not wait
    # between them), and autotune kept its share of the env (test above, flaky). Here every
    # attempt before the rollout meets another writer's change first; once the rollout is over
    # the give-back is tried once more, and takes.
    before = _declared_by_gitops(world, ORIGINAL_ENV)
    target = world.target()
    target.apply({"GOMAXPROCS": "4"})
    seen: list[float] = []

    def another_writer() -> None:
        seen.append(world.clock.monotonic())
        world.patch("deployments", "api",
                    {"metadata": {"annotations": {"example.com/touched": str(len(seen))}}},
                    "merge")

    world.proxy.on("PATCH", r"/deployments/api$", another_writer, times=5,
                   body_contains="managedFields")
    target.restore()
    assert len(seen) == 5, "every attempt before the rollout met a change"
    assert world.template_env() == ORIGINAL_ENV
    assert _env_fields(_managers(world).get(GITOPS)) == before
    _declare(world, [{"name": "LOG_LEVEL", "value": "info"}])
    assert world.template_env() == [{"name": "LOG_LEVEL", "value": "info"}]


def test_ownership_comes_back_after_a_burst_of_writes_to_the_deployment(world: World) -> None:
    # Review finding (2026-12-06): a conflict was retried at once, 5 times, so a burst of
    # other writes (the Deployment controller's status updates during the restore's rollout)
    # longer than 5 round trips left the ownership with autotune. Here every give-back patch in
    # the first 0.5 s of the clock meets another writer's change first (a real 409 from the
    # API server: the patch carries the resourceVersion it read); the retries wait 0.1 s,
    # doubling, and the fourth comes after the burst.
    before = _declared_by_gitops(world, ORIGINAL_ENV)
    target = world.target()
    target.apply({"GOMAXPROCS": "4"})
    burst: list[float] = []

    def another_writer() -> None:
        now = world.clock.monotonic()
        burst.append(now)
        if now < burst[0] + 0.5:
            world.patch("deployments", "api",
                        {"metadata": {"annotations": {"example.com/touched": str(now)}}},
                        "merge")

    world.proxy.on("PATCH", r"/deployments/api$", another_writer, times=10**9,
                   body_contains="managedFields")
    target.restore()
    assert world.template_env() == ORIGINAL_ENV
    assert len(burst) > 1  # it met the burst, and tried again
    assert _env_fields(_managers(world).get(GITOPS)) == before
    _declare(world, [{"name": "LOG_LEVEL", "value": "info"}])
    assert world.template_env() == [{"name": "LOG_LEVEL", "value": "info"}]
