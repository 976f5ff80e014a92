"""The Chaos Mesh injector against the real API server (the real CRD, installed; Chaos Mesh's
controller simulated as v2.8.3 behaves, its webhooks served for real)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from autotune.errors import ChaosError
from autotune.experiment.models import Stress
from autotune.live import Live
from autotune.platforms.kubernetes.errors import ApiError
from autotune.platforms.kubernetes.objects import STRESSCHAOS, PodPlacement
from autotune.platforms.kubernetes.stresschaos import (
    CRD_MISSING,
    crd,
    manifest_problems,
    not_injected,
    render,
    tighten,
)
from tests.kubernetes.conftest import World
from tests.kubernetes.golden import check_golden

LABELS = {"app.kubernetes.io/managed-by": "autotune", "autotune/study": "api-test",
          "autotune/trial": "7"}
PLACEMENT = PodPlacement(namespace="shop", pod_labels={"app": "api", "tier": "web"},
                         pods=("api-1", "api-2"), container="api")
STRESS = Stress(workers=4, load=100)


def _live(world: World) -> Live:
    return world.target().apply({"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": None})


def _schema() -> dict[str, object]:
    return dict(crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def assert_valid(manifest: dict[str, object]) -> None:
    """Valid against the real CRD schema, and against it tightened (no field would be pruned)."""
    jsonschema.Draft7Validator(_schema()).validate(manifest)
    jsonschema.Draft7Validator(tighten(_schema())).validate(manifest)
    assert manifest_problems(manifest) == []


def test_render_golden() -> None:
    manifest = render(name="autotune-api-test-t7-0123abcd", placement=PLACEMENT, stress=STRESS,
                      duration=20, labels=LABELS)
    assert_valid(manifest)
    check_golden("stresschaos.yaml", manifest)


def test_tightened_schema_catches_what_the_server_would_prune() -> None:
    manifest = render(name="x", placement=PLACEMENT, stress=STRESS, duration=20, labels=LABELS)
    manifest["spec"]["stressors"]["cpu"]["cpuLoad"] = 50
    manifest["spec"]["selector"]["labelSelector"] = {"app": "api"}
    jsonschema.Draft7Validator(_schema()).validate(manifest)  # the CRD alone accepts it
    problems = manifest_problems(manifest)
    assert any("spec.stressors.cpu" in p and "cpuLoad" in p for p in problems)
    assert any("spec.selector" in p and "labelSelector" in p for p in problems)


def test_workers_must_be_1_to_8192() -> None:
    for workers in (0, 8193):
        manifest = render(name="x", placement=PLACEMENT, duration=20, labels=LABELS,
                          stress=Stress.model_construct(workers=workers, load=100))
        assert any("workers: must be 1..8192" in p for p in manifest_problems(manifest))


def test_zero_workers_are_refused_before_anything_is_created(world: World) -> None:
    live = _live(world)
    with pytest.raises(ChaosError, match=r"refusing .*workers: must be 1\.\.8192"):
        world.injector().inject(live, Stress.model_construct(workers=0, load=100), 20, LABELS)
    assert world.created_chaos() == [] and world.chaos_left() == []


def test_injected_means_records_injected_and_a_pid() -> None:
    base: dict[str, Any] = {"status": {"experiment": {"desiredPhase": "Run", "containerRecords": [
        {"id": "shop/api-1/api", "phase": "Injected"}]}, "instances": {}}}
    assert "no stress-ng process" in (not_injected(base) or "")
    base["status"]["instances"] = {"shop/api-1/api": {"uid": "123"}}
    assert not_injected(base) is None
    base["status"]["experiment"]["desiredPhase"] = "Stop"
    assert "desiredPhase" in (not_injected(base) or "")
    assert "no container records" in (not_injected({"status": {"experiment": {
        "desiredPhase": "Run", "containerRecords": []}}}) or "")


def test_inject_creates_one_valid_object_and_waits_until_injected(world: World) -> None:
    live = _live(world)
    injector = world.injector()
    injection = injector.inject(live, STRESS, 20, LABELS)
    [created] = world.created_chaos()
    assert_valid(created)
    spec = created["spec"]
    assert spec["mode"] == "all" and spec["containerNames"] == ["api"]
    assert isinstance(live.placement, PodPlacement) and live.placement.pod_template_hash
    assert spec["selector"] == {"pods": {world.namespace: sorted(live.placement.pods)}}
    assert spec["duration"] == "20s" and spec["stressors"] == {"cpu": {"workers": 4, "load": 100}}
    assert created["metadata"]["labels"] == LABELS
    [post] = world.proxy.seen("POST", "/stresschaos$")
    assert post.query.get("fieldValidation") == "Strict"
    assert injection.details["pods"] == sorted(live.placement["pods"])
    assert world.chaos.stressed_pods() == sorted(live.placement["pods"])
    stored = world.get("stresschaos", injection.id)
    assert stored is not None and stored["metadata"]["finalizers"] == ["chaos-mesh/records"]
    assert injector.active() == [injection.id]
    injector.recover(injection)
    assert world.chaos_left() == [] and injector.active() == []
    assert world.chaos.stressed_pods() == [], "recovered before the object went"
    injector.recover(injection)  # idempotent


def test_no_pod_selected_fails_at_once_and_removes_the_object(world: World) -> None:
    live = _live(world)
    world.chaos.select_nothing = True  # the controller's cache has not seen the pods
    with pytest.raises(ChaosError, match=r"selected no pod.*no pod is selected.*removed"):
        world.injector(timeout=30).inject(live, STRESS, 20, LABELS)
    assert world.chaos_left() == []


def test_injection_not_confirmed_in_time_removes_the_object(world: World) -> None:
    """chaos-daemon cannot be reached: Apply fails, Chaos Mesh retries and says so in events."""
    live = _live(world)
    world.chaos.daemon_unreachable = True
    with pytest.raises(ChaosError, match=r"not confirmed injected within 2s \(records not "
                                         r"Injected.*Failed to apply chaos: cannot find daemonIP"
                                         r".*chaos-daemon.*removed"):
        world.injector(timeout=2).inject(live, STRESS, 20, LABELS)
    assert world.chaos_left() == []
    assert world.chaos.injections == []


def test_deletion_not_confirmed_says_what_to_check_and_never_forces(world: World) -> None:
    live = _live(world)
    injector = world.injector()
    injection = injector.inject(live, STRESS, 20, LABELS)
    world.chaos.cancel_fails = True  # v2.8.3: the record stays Injected, silently
    with pytest.raises(ChaosError, match=r"still exists 5s after its deletion.*chaos-mesh/"
                                         "records.*chaos-daemon logs.*never removes"):
        injector.recover(injection)
    [left] = world.items("stresschaos")
    assert left["metadata"]["finalizers"] == ["chaos-mesh/records"]
    assert not world.proxy.seen("PATCH", "stresschaos") + world.proxy.seen("PUT", "stresschaos")
    assert "annotations" not in left["metadata"]
    assert world.chaos.stressed_pods() == sorted(live.placement["pods"])


def test_webhook_denial_is_reported_with_its_message(world: World) -> None:
    live = _live(world)
    world.webhook_denial(f"user cannot create chaos in namespace {world.namespace}")
    with pytest.raises(ChaosError, match=r'admission webhook "vauth.kb.io" denied the request: '
                                         "user cannot create chaos in namespace "
                                         f"{world.namespace}"):
        world.injector().inject(live, STRESS, 20, LABELS)
    assert world.chaos_left() == []


def test_forbidden_create_names_the_verb_and_resource(world: World) -> None:
    live = _live(world)
    world.deny("create", "stresschaos")
    with pytest.raises(ChaosError, match=r"forbidden \(403\): not allowed to create "
                                         r"stresschaos.chaos-mesh.org .*'create'.*rbac"):
        world.injector().inject(live, STRESS, 20, LABELS)


def test_crd_missing(world: World) -> None:
    live = _live(world)
    world.plane.cp.remove_crd("stresschaos.chaos-mesh.org")
    injector = world.injector()
    with pytest.raises(ChaosError, match=r"StressChaos CRD .* is not installed"):
        injector.inject(live, STRESS, 20, LABELS)
    assert injector.active() == [] and injector.cleanup() == []
    assert CRD_MISSING


def test_stray_pod_with_the_same_labels_is_not_stressed(world: World) -> None:
    """The selector carries the new ReplicaSet's pod-template-hash: a pod started by hand with
    the Deployment's labels is neither stressed nor mistaken for the candidate."""
    live = _live(world)
    world.add_pod("api-by-hand", {"app": "api"})
    injection = world.injector().inject(live, STRESS, 20, LABELS)
    assert injection.details["pods"] == sorted(live.placement["pods"])
    assert "api-by-hand" not in world.chaos.stressed_pods()


def test_a_foreign_pod_with_the_same_labels_is_never_stressed(world: World) -> None:
    live = _live(world)
    [pod] = world.pods()[:1]
    world.add_pod("api-by-hand", dict(pod["metadata"]["labels"]))
    injection = world.injector().inject(live, STRESS, 20, LABELS)
    assert isinstance(live.placement, PodPlacement)
    assert world.chaos.stressed_pods() == sorted(live.placement.pods)
    world.injector().recover(injection)
    assert world.chaos_left() == []


def test_a_stress_whose_state_cannot_be_read_is_deleted_all_the_same(world: World) -> None:
    # Review finding: recover read the object (did the stress last?) before deleting it, and a
    # read failing past its retries skipped the delete: the stress ran on to its duration.
    live = _live(world)
    injector = world.injector()
    injection = injector.inject(live, STRESS, 60, LABELS)
    world.proxy.fail("GET", f"/stresschaos/{injection.id}$", 503, times=20)
    with pytest.raises(ChaosError):
        injector.recover(injection)
    assert world.chaos_left() == []
    assert world.chaos.stressed_pods() == []


def test_create_is_retried_after_server_errors(world: World) -> None:
    live = _live(world)
    world.proxy.fail("POST", "/stresschaos$", 503, times=2)
    injection = world.injector().inject(live, STRESS, 20, LABELS)
    assert world.chaos_left() == [injection.id]


def test_server_rejects_unknown_fields_only_with_strict(world: World) -> None:
    kube = world.kube()
    placement = PodPlacement(namespace=world.namespace, pod_labels={"app": "api"},
                             pods=("api-1",), container="api")
    manifest = render(name="with-extra", placement=placement, stress=STRESS, duration=20,
                      labels=LABELS)
    manifest["spec"]["stressors"]["cpu"]["cpuLoad"] = 5
    with pytest.raises(ApiError, match=r"strict decoding error: unknown field") as e:
        kube.create(STRESSCHAOS, world.namespace, manifest)
    assert e.value.status == 400


def test_cleanup_removes_only_this_studys_objects(world: World) -> None:
    live = _live(world)
    ours, other = world.injector(), world.injector(study="another-study")
    ours.inject(live, STRESS, 20, LABELS)
    ours.inject(live, STRESS, 20, {**LABELS, "autotune/trial": "8"})
    theirs = other.inject(live, STRESS, 20, LABELS)
    removed = ours.cleanup()
    assert len(removed) == 2 and all("trial" in line for line in removed)
    assert world.chaos_left() == [theirs.id]
    assert ours.cleanup() == []
    assert other.active() == [theirs.id]


def test_a_memory_stressor_is_injected_when_memstress_runs() -> None:
    obj: dict[str, Any] = {"spec": {"stressors": {"memory": {"workers": 1, "size": "64MB"}}},
                           "status": {"experiment": {"desiredPhase": "Run", "containerRecords": [
                               {"id": "shop/api-1/api", "phase": "Injected"}]},
                               "instances": {"shop/api-1/api": {"uid": "123"}}}}
    assert "no memStress process" in (not_injected(obj) or "")
    obj["status"]["instances"] = {"shop/api-1/api": {"memoryUid": "124"}}  # memory only: no uid
    assert not_injected(obj) is None
    manifest = render(name="x", placement=PLACEMENT, duration=20, labels=LABELS,
                      stress=Stress.model_validate({"workers": 0, "memory": {
                          "workers": 1, "size": "64MB"}}))
    assert manifest["spec"]["stressors"] == {"memory": {"workers": 1, "size": "64MB"}}
    assert_valid(manifest)
