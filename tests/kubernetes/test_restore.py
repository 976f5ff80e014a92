"""Issue 15.1: the restore patch against the real API server's strategic merge.

apimachinery's ``validatePatchWithSetOrderList`` (pkg/util/strategicpatch/patch.go) rejects a
patch whose entries are not in the order of its ``$setElementOrder/env`` list (500). A restore
that sends the parameters' entries in parameter order is rejected as soon as the container's
env lists them in another order, and the Deployment stays on the candidate. Proven here on the
real API server: the issue's example through the target (real rollouts), and a property over
random env lists and parameter subsets through the very patches the target sends.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.errors import TargetError
from autotune.platforms.kubernetes import stack
from autotune.platforms.kubernetes.envpatch import Original, env_names, env_patch, restore_patch
from autotune.platforms.kubernetes.objects import DEPLOYMENTS
from tests.kubernetes.conftest import Plane, World, deployment_manifest, start_world

Obj = dict[str, Any]


def _with_env(world: World, env: list[Obj]) -> None:
    world.set_env(env)
    world.settled()


def test_restore_with_the_parameters_in_another_order_than_the_env(world: World) -> None:
    """The issue's reproduction: env [GOGC, LOG, GOMAXPROCS], parameters [GOMAXPROCS, GOGC]."""
    original = [{"name": "GOGC", "value": "100"}, {"name": "LOG", "value": "x"},
                {"name": "GOMAXPROCS", "value": "8"}]
    _with_env(world, original)
    target = world.target(variables=["GOMAXPROCS", "GOGC"])
    target.apply({"GOMAXPROCS": "2", "GOGC": None})
    target.restore()
    assert world.template_env() == original
    world.settled()
    assert all(env == original for env in world.pod_envs())
    assert world.annotations() == {}


def test_schedtraces_godebug_appended_last_comes_back_in_its_place(world: World) -> None:
    original = [{"name": "GODEBUG", "value": "madvdontneed=1"},
                {"name": "GOMAXPROCS", "value": "8"}, {"name": "LOG_LEVEL", "value": "info"}]
    _with_env(world, original)
    target = world.target(world.experiment(measure=", schedtrace: 100ms"))
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "500"})
    target.restore()
    assert world.template_env() == original and world.annotations() == {}


def test_validate_dry_runs_the_restore_too(world: World) -> None:
    """The env [FORCEGC_INTERVAL_MS, LOG_LEVEL, GOMAXPROCS] against parameters [GOMAXPROCS,
    FORCEGC_INTERVAL_MS]: the restore is judged by the API server before any run, and a
    restore it would refuse is a problem that stops validation."""
    _with_env(world, [{"name": "FORCEGC_INTERVAL_MS", "value": "0"},
                      {"name": "LOG_LEVEL", "value": "info"}, {"name": "GOMAXPROCS", "value": "8"}])
    assert stack.validate_cluster(world.experiment()) == []
    restores = [r for r in world.proxy.seen("PATCH", "/deployments/api$")
                if r.query.get("dryRun") == "All" and "$setElementOrder/env" in str(r.body)]
    assert len(restores) == 2, "after the baseline's and after a candidate's env"
    world.proxy.fail("PATCH", "/deployments/api$", 422, times=10, body_contains="setElementOrder",
                     message="denied by policy: env order changes are reviewed")
    problems = stack.validate_cluster(world.experiment())
    assert problems and all("restoring the env afterwards would fail" in p and
                            "denied by policy" in p for p in problems), problems


# --- the property ----------------------------------------------------------------------------

NAMES = ["GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GODEBUG", "FORCEGC_INTERVAL_MS", "LOG_LEVEL",
         "HOME", "A", "Z_LAST"]
SOURCES: list[Obj] = [
    {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
    {"resourceFieldRef": {"containerName": "api", "resource": "limits.cpu", "divisor": "1"}},
    {"configMapKeyRef": {"name": "api-config", "key": "gogc"}},
    {"secretKeyRef": {"name": "api-secret", "key": "token", "optional": True}},
]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Obj], list[str], dict[str, str | None]]:
    """(original env, the parameters' variables, a candidate for them)."""
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=len(NAMES)))
    env: list[Obj] = []
    for name in names:
        if draw(st.booleans()):
            env.append({"name": name, "value": draw(st.sampled_from(["0", "1", "8", "", "x y"]))})
        else:
            env.append({"name": name, "valueFrom": draw(st.sampled_from(SOURCES))})
    variables = draw(st.lists(st.sampled_from(NAMES[:5]), unique=True, min_size=1))
    candidate = {v: draw(st.one_of(st.none(), st.sampled_from(["2", "400", "off"])))
                 for v in variables}
    return env, variables, candidate


@pytest.fixture(scope="module")
def prop_world(plane: Plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One namespace for every example of the property, with a 0-replica Deployment ``prop``."""
    world, stop = start_world(plane, tmp_path_factory.mktemp("prop"))
    manifest = deployment_manifest(world.namespace, world.node, replicas=0)
    manifest["metadata"]["name"] = "prop"
    manifest["spec"]["selector"] = {"matchLabels": {"app": "prop"}}
    manifest["spec"]["template"]["metadata"]["labels"] = {"app": "prop"}
    world.admin.create(world.path("deployments"), manifest)
    try:
        yield world
    finally:
        stop()


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_apply_then_restore_gives_back_the_env_list_byte_for_byte(
        prop_world: World, scenario: tuple[list[Obj], list[str], dict[str, str | None]]) -> None:
    """Any env list (order, unrelated names, GODEBUG or not, valueFrom entries) x any subset of
    parameters: the target's apply patch, then its restore patch, through the real API server's
    strategic merge, give back the original list exactly (a 0-replica Deployment: the patches
    are what is under test, not the rollout)."""
    original, variables, candidate = scenario
    world = prop_world
    dep = world.admin.patch(world.path("deployments", "prop"), [
        {"op": "replace", "path": "/spec/template/spec/containers/0/env",
         "value": copy.deepcopy(original)}], "json")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    stored = container.get("env") or []  # as the API server keeps it ("value": "" is omitted)
    saved = Original(container="api", study="prop", saved_at="now",
                     env={v: next((e for e in container.get("env") or [] if e["name"] == v),
                                  None) for v in variables},
                     order=tuple(env_names(container)))
    kube = world.kube()
    patched = kube.patch(DEPLOYMENTS, world.namespace, "prop", env_patch("api", candidate))
    current = env_names(patched["spec"]["template"]["spec"]["containers"][0])
    restored = kube.patch(DEPLOYMENTS, world.namespace, "prop", restore_patch(saved, current))
    assert (restored["spec"]["template"]["spec"]["containers"][0].get("env") or []) == stored


def test_a_change_another_writer_made_during_the_run_is_what_the_restore_keeps(
        world: World) -> None:
    # Review finding: a `kubectl apply` at 2 a.m. set GOMAXPROCS from 8 to 2 (production's new
    # value); the next trial overwrote it and the restore then wrote back the 8 saved before
    # the run, silently undoing their change.
    original = [{"name": "GOMAXPROCS", "value": "8"}, {"name": "LOG_LEVEL", "value": "info"}]
    _with_env(world, original)
    target = world.target()
    target.apply({"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": "500"})
    theirs = [{"name": "GOMAXPROCS", "value": "2"}, {"name": "LOG_LEVEL", "value": "debug"}]
    world.set_env(theirs)  # their apply replaces the whole env: our candidate is gone too
    target.apply({"GOMAXPROCS": "1", "FORCEGC_INTERVAL_MS": None})
    target.restore()
    assert world.template_env() == theirs, "their GOMAXPROCS=2 stays, FORCEGC stays unset"
    assert world.annotations() == {}


def test_a_tuned_variable_listed_twice_is_refused_before_anything_changes(
        world: World) -> None:
    # Review finding: [GOMAXPROCS=4, X, GOMAXPROCS=8]: a candidate's patch changed the first
    # entry, the kubelet used the last (every candidate failed its env check), and the
    # restore wrote one entry over the other, so the template never came back.
    env = [{"name": "GOMAXPROCS", "value": "4"}, {"name": "LOG_LEVEL", "value": "info"},
           {"name": "GOMAXPROCS", "value": "8"}]
    _with_env(world, env)
    target = world.target()
    assert "lists GOMAXPROCS more than once" in (target.usable() or "")
    with pytest.raises(TargetError, match="lists GOMAXPROCS more than once in its env"):
        target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    target.restore()
    assert world.template_env() == env and world.annotations() == {}
