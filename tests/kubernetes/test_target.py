"""The Deployment target against the real control plane: what ends up in the cluster."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from autotune.errors import TargetError
from autotune.experiment import Experiment
from autotune.platforms.kubernetes import stack
from autotune.platforms.kubernetes.deployment import REPLICA_CHANGES
from autotune.platforms.kubernetes.envpatch import (
    Original,
    any_of,
    cpu_cores,
    env_patch,
    gomaxprocs_note,
    restore_patch,
)
from autotune.platforms.kubernetes.objects import ORIGINAL_ENV_ANNOTATION
from autotune.report import build_report, export
from tests.kubernetes.conftest import ORIGINAL_ENV, World
from tests.kubernetes.golden import check_golden
from tests.report.builder import golden_study

CANDIDATE = {"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": "500"}


def _values(env: list[dict[str, str]]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in env}


def test_env_patch_golden() -> None:
    check_golden("env-patch.json", env_patch("api", {"GOMAXPROCS": "4",
                                                     "FORCEGC_INTERVAL_MS": None}))


def test_restore_patch_golden() -> None:
    original = Original(container="api", study="api-test", saved_at="2026-11-29T00:00:00Z",
                        env={"GOMAXPROCS": {"name": "GOMAXPROCS", "value": "8"},
                             "FORCEGC_INTERVAL_MS": None,
                             "GOMEMLIMIT": {"name": "GOMEMLIMIT", "valueFrom": {
                                 "resourceFieldRef": {"resource": "limits.memory"}}}})
    check_golden("restore-patch.json", restore_patch(original))


def test_apply_patches_only_the_parameters_and_waits_for_new_pods(world: World) -> None:
    old_pods = {p["metadata"]["name"] for p in world.pods()}
    live = world.target().apply(CANDIDATE)
    assert _values(world.template_env()) == {"LOG_LEVEL": "info", **CANDIDATE}
    pods = world.pods()
    assert {p["metadata"]["name"] for p in pods}.isdisjoint(old_pods), "only new pods are live"
    assert all(_values(env) == {"LOG_LEVEL": "info", **CANDIDATE} for env in world.pod_envs())
    assert sorted(live.placement["pods"]) == sorted(p["metadata"]["name"] for p in pods)
    assert live.placement["pod_labels"] == {"app": "api"}
    assert live.placement["container"] == "api"
    assert live.scope[0].label == "namespace" and live.scope[0].value == world.namespace
    assert live.scope[1].regex and live.scope[1].value == any_of(live.placement["pods"])
    assert {p["name"] for p in live.details["pods"]} == set(live.placement["pods"])
    assert all(p["containerID"].startswith("containerd://") for p in live.details["pods"])


def test_patches_use_strategic_merge_and_strict_validation(world: World) -> None:
    world.target().apply(CANDIDATE)
    patches = world.proxy.seen("PATCH")
    assert patches and all(r.content_type == "application/strategic-merge-patch+json"
                           for r in patches)
    assert all(r.query.get("fieldValidation") == "Strict" for r in patches)


def test_original_is_saved_before_the_first_change(world: World) -> None:
    target = world.target()
    target.apply(CANDIDATE)
    patches = [r.body for r in world.proxy.seen("PATCH")]
    assert ORIGINAL_ENV_ANNOTATION in patches[0]["metadata"]["annotations"], "saved first"
    saved = Original.from_json(world.annotations()[ORIGINAL_ENV_ANNOTATION])
    assert saved.env == {"GOMAXPROCS": {"name": "GOMAXPROCS", "value": "8"},
                         "FORCEGC_INTERVAL_MS": None}
    assert target.state_file is not None
    on_disk = json.loads(target.state_file.read_text())
    assert on_disk["env"] == saved.env
    assert on_disk["deployment"] == f"Deployment {world.namespace}/api"
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "2000"})
    again = Original.from_json(world.annotations()[ORIGINAL_ENV_ANNOTATION])
    assert again.env == saved.env, "a second candidate must not overwrite the original"


def test_null_removes_the_variable(world: World) -> None:
    target = world.target()
    target.apply(CANDIDATE)
    target.apply({"GOMAXPROCS": None, "FORCEGC_INTERVAL_MS": None})
    assert _values(world.template_env()) == {"LOG_LEVEL": "info"}
    assert all(_values(env) == {"LOG_LEVEL": "info"} for env in world.pod_envs())


def test_restore_brings_back_the_original_and_forgets_it(world: World) -> None:
    target = world.target()
    target.apply(CANDIDATE)
    target.restore()
    world.assert_pristine()
    assert target.state_file is not None and not target.state_file.exists()
    patches = len(world.proxy.seen("PATCH"))
    target.restore()
    assert len(world.proxy.seen("PATCH")) == patches


def test_cleanup_restores_what_a_dead_run_left(world: World) -> None:
    world.target().apply(CANDIDATE)
    world.dies()
    fresh = world.target()
    done = fresh.cleanup()
    assert len(done) == 1 and "unfinished run" in done[0] and "api-test" in done[0]
    fresh.restore()  # the run that cleaned up ends: its Lease goes
    world.assert_pristine()
    assert fresh.cleanup() == []


def test_a_new_run_adopts_a_dead_runs_original(world: World) -> None:
    world.target().apply(CANDIDATE)
    world.dies()
    second = world.target()
    second.apply({"GOMAXPROCS": "16", "FORCEGC_INTERVAL_MS": "2000"})
    second.restore()
    world.assert_pristine()


def test_finish_with_keeps_the_choice(world: World) -> None:
    target = world.target()
    target.apply(CANDIDATE)
    target.finish_with({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "2000"})
    target.restore()
    assert _values(world.template_env()) == {"LOG_LEVEL": "info", "GOMAXPROCS": "2",
                                             "FORCEGC_INTERVAL_MS": "2000"}
    assert world.annotations() == {}
    assert world.target().cleanup() == []


def test_on_finish_leave_keeps_the_candidate_and_the_file(world: World) -> None:
    exp = world.experiment()
    assert exp.target.kubernetes is not None
    spec = exp.target.kubernetes.model_copy(update={"on_finish": "leave"})
    exp = exp.model_copy(update={"target": exp.target.model_copy(update={"kubernetes": spec})})
    target = world.target(exp)
    target.apply(CANDIDATE)
    target.restore()
    assert _values(world.template_env()) == {"LOG_LEVEL": "info", **CANDIDATE}
    assert world.annotations() == {}
    assert target.state_file is not None and target.state_file.exists()


def _on_finish(world: World, how: str) -> Experiment:
    exp = world.experiment()
    assert exp.target.kubernetes is not None
    spec = exp.target.kubernetes.model_copy(update={"on_finish": how})
    return exp.model_copy(update={"target": exp.target.model_copy(update={"kubernetes": spec})})


@pytest.mark.parametrize("how", ["leave", "best"])
def test_measuring_again_after_on_finish_keeps_the_first_original(world: World, how: str) -> None:
    # `autotune run` and the nightly job measure again on the target after the search (the
    # confirmation, the drift check). The env the search left there is a candidate, not the
    # original: a run killed during the confirmation must be cleaned up to the env as found.
    target = world.target(_on_finish(world, how))
    target.apply(CANDIDATE)
    target.restore({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "2000"})
    target.apply({"GOMAXPROCS": "16", "FORCEGC_INTERVAL_MS": "100"})
    assert target.state_file is not None
    saved = json.loads(target.state_file.read_text())["env"]
    assert saved == {"GOMAXPROCS": {"name": "GOMAXPROCS", "value": "8"},
                     "FORCEGC_INTERVAL_MS": None}
    world.dies()
    fresh = world.target()
    assert len(fresh.cleanup()) == 1
    fresh.restore()
    world.assert_pristine()


def test_check_passes_then_fails_after_a_container_restart(world: World) -> None:
    target = world.target()
    live = target.apply(CANDIDATE)
    target.check(live)
    world.restart_container(live.placement["pods"][0])
    with pytest.raises(TargetError, match=r"restarted \(restartCount 0 -> 1\)"):
        target.check(live)


def test_rollout_timeout_fails_and_rolls_back(world: World) -> None:
    world.cordon()  # no new pod can be scheduled: the rollout never completes
    target = world.target(world.experiment(rollout_timeout="1s"))
    with pytest.raises(TargetError, match=r"did not complete within 1s.*re-applied the original"):
        target.apply(CANDIDATE)
    assert _values(world.template_env()) == _values(ORIGINAL_ENV)


def test_progress_deadline_exceeded_fails_at_once(world: World) -> None:
    world.cordon()
    world.patch("deployments", "api", {"spec": {"progressDeadlineSeconds": 1}}, "merge")
    world.settled()
    target = world.target(world.experiment(rollout_timeout="30s"))
    with pytest.raises(TargetError, match=r"progress deadline.*timed out progressing"):
        target.apply(CANDIDATE)
    assert world.clock.offset < 30


def test_deployment_and_container_not_found(world: World) -> None:
    exp = world.experiment()
    assert exp.target.kubernetes is not None
    for update, message in (({"deployment": "nope"}, f"Deployment {world.namespace}/nope not "
                                                      "found"),
                            ({"container": "nope"}, "no container 'nope'.*api, sidecar")):
        spec = exp.target.kubernetes.model_copy(update=update)
        bad = exp.model_copy(update={"target": exp.target.model_copy(update={"kubernetes": spec})})
        with pytest.raises(TargetError, match=message):
            world.target(bad).apply(CANDIDATE)
    assert world.annotations() == {}


def test_unknown_variable_is_refused(world: World) -> None:
    with pytest.raises(TargetError, match=r"not a parameter's variable: GOGC"):
        world.target().apply({"GOGC": "50"})


def test_describe(world: World) -> None:
    facts = world.target().describe()
    # The digest the pods pulled identifies the build (the nightly fingerprint): a tag can move.
    assert facts.pop("image_ids") == [  # what kwok reports as the kubelet would: tag and digest
        "docker.io/example/api:1.0@sha256:" + hashlib.sha256(b"example/api:1.0").hexdigest()]
    assert facts == {
        "kind": "kubernetes", "namespace": world.namespace, "deployment": "api", "container": "api",
        "replicas": 2, "image": "example/api:1.0", "cpu_limit": "1", "cpu_request": "500m",
        "memory_limit": None, "node_types": ["m5.large"],
        "env": {"GOMAXPROCS": "8", "FORCEGC_INTERVAL_MS": None},
        "gomaxprocs_default": "GOMAXPROCS=8 is set in the Deployment: the runtime uses it",
        "on_finish": "restore", "autoscaler": None, "replica_changes": REPLICA_CHANGES,
    }


def test_gomaxprocs_note_and_cpu_quantities() -> None:
    assert cpu_cores("500m") == 0.5 and cpu_cores("2") == 2.0 and cpu_cores(None) is None
    note = gomaxprocs_note("1500m", None)
    assert "max(2, ceil) = 2" in note and "max(1, floor) = 1" in note
    assert "node's CPU count" in gomaxprocs_note(None, None)


def test_without_get_nodes_the_node_types_are_unknown_not_a_failed_night(
        world: World) -> None:
    # Review finding: deploy/README.md said a cluster without the ClusterRole's `get nodes`
    # only loses node_types from the fingerprint; describe() raised and every night failed.
    world.admin.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"
                       f"autotune-access-review-{world.namespace}")
    target = world.target()
    facts = world.admin.wait_for(lambda: (lambda f: f if f["node_types"] is None else None)(
        target.describe()), 30, "RBAC to take get nodes away")
    assert facts["image"] == "example/api:1.0" and facts["cpu_limit"] == "1"


def test_any_of_escapes_regex_metacharacters() -> None:
    assert any_of(["b.x", "a"]) == "a|b\\.x"



def _set_env_as(world: World, manager: str, env: dict[str, str]) -> None:
    """Another tool's Update of the container's env (``kubectl set env``: "kubectl-set")."""
    world.admin.patch(world.path("deployments", "api"), {"spec": {"template": {"spec": {
        "containers": [{"name": "api", "env": [{"name": k, "value": v}
                                               for k, v in env.items()]}]}}}},
        "strategic", manager=manager)
    world.settled()


def test_the_undo_of_a_killed_run_keeps_a_value_someone_set_since(world: World) -> None:
    # Review finding: the next night's start-up cleanup put back the env from before the
    # killed run over `kubectl set env deploy/api GOMAXPROCS=3` made during the day.
    world.target().apply(CANDIDATE)
    world.dies()
    _set_env_as(world, "kubectl-set", {"GOMAXPROCS": "3"})
    fresh = world.target()
    [said] = fresh.cleanup()
    fresh.restore()
    assert "restored the original env" in said
    env = _values(world.template_env())
    assert env == {"LOG_LEVEL": "info", "GOMAXPROCS": "3"}  # theirs kept, the run's undone
    assert world.annotations() == {} and world.chaos_left() == []


def test_the_undo_of_a_killed_run_reverts_every_value_the_run_wrote(world: World) -> None:
    # Review of a first fix (which read managedFields): `kubectl rollout undo` brings back the
    # run's earlier candidate as an Update by another manager; it must not be kept.
    target = world.target()
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "100"})
    target.apply(CANDIDATE)
    world.dies()
    _set_env_as(world, "kubectl-rollout", {"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "100"})
    fresh = world.target()
    fresh.cleanup()
    fresh.restore()  # gives the run Lease back
    assert _values(world.template_env()) == _values(ORIGINAL_ENV)
    world.assert_pristine()


def test_the_undo_of_a_run_that_recorded_no_values_puts_the_original_back(
        world: World) -> None:
    # A run of an older autotune saved only the original: everything goes back, as it did.
    world.target().apply(CANDIDATE)
    world.dies()
    world.patch("deployments", "api", {"metadata": {"annotations": {
        "autotune/written-env": None}}}, "merge")
    _set_env_as(world, "kubectl-set", {"GOMAXPROCS": "3"})
    fresh = world.target()
    fresh.cleanup()
    fresh.restore()
    assert _values(world.template_env()) == _values(ORIGINAL_ENV)
    world.assert_pristine()


def test_the_undo_of_a_killed_run_keeps_a_value_set_since_that_the_run_had_tried(
        world: World) -> None:
    # Review: per variable, any value the search had tried was taken for the run's; the owner
    # who read "ADOPT GOMAXPROCS=2" and set it by hand saw it reverted the next night.
    target = world.target()
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "100"})
    target.apply(CANDIDATE)
    world.dies()
    _set_env_as(world, "kubectl-set", {"GOMAXPROCS": "2"})
    fresh = world.target()
    fresh.cleanup()
    fresh.restore()
    assert _values(world.template_env()) == {"LOG_LEVEL": "info", "GOMAXPROCS": "2"}


def test_a_rollout_undo_during_the_run_is_not_taken_for_the_original(world: World) -> None:
    # Review: the run's restore took its own earlier candidate, brought back by `kubectl
    # rollout undo` in the night, for another writer's change and put it back at the end.
    target = world.target()
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "100"})
    target.apply(CANDIDATE)
    _set_env_as(world, "kubectl-rollout", {"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "100"})
    target.restore()
    assert _values(world.template_env()) == _values(ORIGINAL_ENV)
    world.assert_pristine()



def test_a_rollout_undo_after_a_finished_run_brings_back_no_record(world: World) -> None:
    # Review finding: the Deployment controller copies the Deployment's annotations to its new
    # ReplicaSet (and never removes them), and `kubectl rollout undo` copies the ReplicaSet's
    # back. After a run that restored everything, an owner's rollout undo to one of the run's
    # ReplicaSets brought back its original-env record, and the next night's start-up cleanup
    # took it for a killed run's and put the env from before the run back over the owner's.
    target = world.target()
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "100"})
    target.apply(CANDIDATE)
    target.restore()
    world.assert_pristine()  # no ReplicaSet carries the record either
    world.rollout_undo()     # to the last candidate's ReplicaSet
    assert _values(world.template_env()) == {"LOG_LEVEL": "info", **CANDIDATE}
    assert world.annotations() == {}
    fresh = world.target()
    assert fresh.cleanup() == [], "nothing to undo: the owner chose this env"
    fresh.restore()
    assert _values(world.template_env()) == {"LOG_LEVEL": "info", **CANDIDATE}


def test_a_killed_runs_undo_leaves_no_record_on_its_replicasets(world: World) -> None:
    target = world.target()
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "100"})
    target.apply(CANDIDATE)
    world.dies()
    assert world.replicaset_records(), "the controller copied the record (what is undone)"
    fresh = world.target()
    fresh.cleanup()
    fresh.restore()
    world.assert_pristine()
    world.rollout_undo()
    assert world.annotations() == {}


def _left_on_replicasets(world: World) -> list[str]:
    """A finished run of an earlier version, which left its record on the ReplicaSets the
    Deployment controller copied it to: its real record, put back on every ReplicaSet."""
    target = world.target()
    target.apply(CANDIDATE)
    record = {k: v for k, v in world.annotations().items() if k.startswith("autotune/")}
    assert set(record) == {ORIGINAL_ENV_ANNOTATION, "autotune/written-env"}
    target.restore()
    names = sorted(rs["metadata"]["name"] for rs in world.items("replicasets"))
    for name in names:
        world.patch("replicasets", name, {"metadata": {"annotations": record}}, "merge")
    assert sorted(world.replicaset_records()) == names
    return names


def test_a_record_left_on_the_replicasets_is_removed_by_the_next_runs_start(
        world: World) -> None:
    # Review: once the Deployment had no record, nothing removed the ReplicaSets' (an earlier
    # version's runs, or a removal that failed at a run's end).
    left = _left_on_replicasets(world)
    fresh = world.target()
    [said] = fresh.cleanup()
    assert "removed a finished run's record" in said and all(n in said for n in left)
    fresh.restore()
    world.assert_pristine()
    world.rollout_undo()
    assert world.annotations() == {}


def test_namespace_cleanup_removes_a_record_left_on_the_replicasets(world: World) -> None:
    left = _left_on_replicasets(world)
    done = stack.cleanup_namespace(world.namespace, kubeconfig=str(world.kubeconfig),
                                   clock=world.clock)
    assert len(done) == 1 and all(n in done[0] for n in left)
    world.assert_pristine()


def test_the_exported_patch_applies_where_production_sets_gomaxprocs_by_reference(
        world: World, tmp_path: Path) -> None:
    # Review finding: `autotune export --format kustomize` wrote {name, value} entries; merged
    # by the API server into `GOMAXPROCS: valueFrom: resourceFieldRef: limits.cpu` (a common
    # way to set it), the entry had both, and the Deployment was refused: a failed GitOps sync.
    world.set_env([{"name": "LOG_LEVEL", "value": "info"}, {"name": "GOMAXPROCS", "valueFrom": {
        "resourceFieldRef": {"containerName": "api", "resource": "limits.cpu"}}}])
    world.settled()
    b = golden_study(tmp_path)
    text, code = export(build_report(b.exp, b.studies), "kustomize")
    assert code == 0, text
    patch = yaml.safe_load(text)
    del patch["metadata"]  # the golden study's namespace is not this test's
    world.admin.patch(world.path("deployments", "api"), patch, "strategic")
    world.settled()
    assert world.template_env() == [{"name": "LOG_LEVEL", "value": "info"},
                                    {"name": "GOMAXPROCS", "value": "2"},
                                    {"name": "GOGC", "value": "400"}]
    b.studies.storage.remove_session()
