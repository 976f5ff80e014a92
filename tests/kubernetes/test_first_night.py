"""Issue 9, "survive a real cluster's first night", against the real control plane: each
defect reproduced, then the end state asserted (no StressChaos left, the env restored byte for
byte, the trial FAIL with its reason, the study stopped where it must)."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest

from autotune.cli import main
from autotune.errors import StressNotRecovered, StudyError, TargetError
from autotune.platforms.kubernetes import stack
from autotune.platforms.kubernetes.objects import PODS, Selection
from autotune.platforms.kubernetes.permissions import CLUSTER_NEEDED, NEEDED
from autotune.study.loop import RunResult
from tests.kubernetes.conftest import ORIGINAL_ENV, StressedMetrics, World
from tests.kubernetes.fake_prometheus import TOKEN, FakePrometheus
from tests.kubernetes.test_study import run
from tests.support.rbac import assert_used_exactly_granted

CANDIDATE = {"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": "500"}


def _hashes(world: World) -> set[str]:
    return {p["metadata"]["labels"]["pod-template-hash"] for p in world.pods()}


# --- 2. pods that are not the new ReplicaSet's active pods ------------------------------------

def test_evicted_and_foreign_pods_do_not_block_rollout_or_restore(world: World) -> None:
    evicted = world.pods()[0]["metadata"]["name"]
    world.evict(evicted)  # the kubelet ends it (phase Failed) and keeps it; the RS replaces it
    world.admin.wait_for(lambda: len(world.pods()) == 2 and evicted not in {
        p["metadata"]["name"] for p in world.pods()}, 30, "the eviction and its replacement")
    world.add_pod("api-by-hand", {"app": "api"})
    exp = world.experiment(trials=1, stop_after=1, rollout_timeout="20s")
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert [r["state"] for r in records] == ["COMPLETE", "COMPLETE"]
    for r in records:
        assert evicted not in str(r["live"]) and "api-by-hand" not in str(r["live"])
    world.assert_pristine()
    assert world.get("pods", evicted) is not None, "the evicted pod is still there"


# --- 5. scaled to 0, paused, a stale Progressing condition --------------------------------------

def test_restore_at_zero_replicas_restores_and_forgets(world: World) -> None:
    target = world.target()
    target.apply(CANDIDATE)
    world.scale(0)
    target.restore()
    assert world.template_env() == ORIGINAL_ENV
    assert world.annotations() == {}
    assert target.state_file is not None and not target.state_file.exists()


def test_a_dead_runs_leftovers_at_zero_replicas_are_cleaned_up(world: World) -> None:
    world.target().apply(CANDIDATE)
    world.dies()
    world.scale(0)
    [line] = world.target().cleanup()
    assert "restored the original env" in line
    assert world.template_env() == ORIGINAL_ENV and world.annotations() == {}


def test_a_paused_deployment_is_refused_by_validate_and_by_apply(world: World) -> None:
    world.pause()
    problems = stack.validate_cluster(world.experiment())
    assert any(f"Deployment {world.namespace}/api is paused" in p for p in problems), problems
    before = world.deployment()
    with pytest.raises(TargetError, match=r"is paused.*rollout resume"):
        world.target(world.experiment(rollout_timeout="30s")).apply(CANDIDATE)
    assert world.clock.offset < 1, "refused at once, not after the rollout timeout"
    after = world.deployment()
    assert world.annotations() == {}
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


def test_a_stale_progress_deadline_condition_is_not_our_rollouts(world: World) -> None:
    """An earlier rollout timed out (ProgressDeadlineExceeded) and the node came back: the
    condition says nothing about the rollout autotune starts now."""
    world.patch("deployments", "api", {"spec": {"progressDeadlineSeconds": 1}}, "merge")
    world.cordon()
    stuck = [{"name": "LOG_LEVEL", "value": "debug"}, *ORIGINAL_ENV[1:]]
    world.set_env(stuck)  # someone's change that never rolls out
    world.admin.wait_for(lambda: any(c.get("reason") == "ProgressDeadlineExceeded" for c in (
        world.deployment().get("status") or {}).get("conditions") or []), 60,
        "the controller to mark the rollout timed out")
    world.cordon(False)
    world.patch("deployments", "api", {"spec": {"progressDeadlineSeconds": 600}}, "merge")
    target = world.target()
    live = target.apply(CANDIDATE)
    assert live.env == CANDIDATE
    target.restore()
    assert world.template_env() == stuck, "the env as found, the stuck change included"


# --- 8. the env order on restore ---------------------------------------------------------------

def test_restore_brings_back_the_env_list_exactly(world: World) -> None:
    original: list[dict[str, Any]] = [{"name": "GOMAXPROCS", "valueFrom": {"resourceFieldRef": {
                    "containerName": "api", "resource": "limits.cpu", "divisor": "1"}}},
                {"name": "LOG_LEVEL", "value": "info"},
                {"name": "FORCEGC_INTERVAL_MS", "value": "0"}]
    world.set_env(original)
    world.settled()
    hashes = _hashes(world)
    target = world.target()
    target.apply({"GOMAXPROCS": None, "FORCEGC_INTERVAL_MS": None})  # both deleted
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": "2000"})  # both appended
    target.restore()
    assert world.template_env() == original
    assert all(env == original for env in world.pod_envs())
    assert _hashes(world) == hashes, "the pod template hash is the original one again"
    assert world.annotations() == {}


# --- 7. Chaos Mesh's Failed events ----------------------------------------------------------

def test_a_failed_event_for_an_update_conflict_is_not_no_pod_selected(world: World) -> None:
    world.chaos.conflict_once = True
    exp = world.experiment(trials=1, stop_after=1)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert all(r["state"] == "COMPLETE" for r in records)
    world.assert_pristine()


def test_only_the_selection_message_means_no_pod_selected(world: World) -> None:
    world.chaos.select_nothing = True
    exp = world.experiment(trials=1, stop_after=1)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, StudyError)
    assert re.search(r"selected no pod .*Failed to select targets: no pod is selected",
                     records[-1]["failure"])
    world.assert_pristine()


# --- 6. watch stream errors other than 410 -----------------------------------------------------

def _break_watches(world: World, plural: str, fault: str) -> Any:
    """A watch of ``plural`` answered with 500 or 504 (an API server behind its etcd), or cut
    in the middle of an event line."""
    if fault == "cut":
        return world.proxy.cut_watch(f"/{plural}$", after=0)
    return world.proxy.fail("GET", f"/{plural}$", int(fault), watch_only=True)


@pytest.mark.parametrize("fault", ["500", "504", "cut"])
def test_a_broken_watch_stream_is_listed_again_and_resumed(world: World, fault: str) -> None:
    world.grant("rbac-load.yaml")  # watching pods (the load generator's permissions)
    kube = world.kube()
    broken = _break_watches(world, "pods", fault)
    # The pod appears once the client *watches* (the request the fault breaks), not at its first
    # list: added right after the list request, it could land before the list's answer and be
    # found without any watch (CI, 2026-12-03: the fault was never hit).
    added = world.when(lambda: any(r.query.get("watch") in ("true", "1")
                                   for r in world.proxy.seen("GET", "/pods$")),
                       lambda: world.add_pod("late", {"app": "late"}))
    found = kube.wait(Selection(PODS, world.namespace, labels="app=late"),
                      lambda s: s.get("late"), timeout=10)
    added.stop()
    assert found is not None and found["metadata"]["name"] == "late"
    assert broken.hits == 1, "the fault happened"


@pytest.mark.parametrize("fault", ["500", "504", "cut"])
def test_a_trial_survives_broken_watches(world: World, fault: str) -> None:
    for plural in ("deployments", "pods", "stresschaos"):
        _break_watches(world, plural, fault)
    exp = world.experiment(trials=1, stop_after=1)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert all(r["state"] == "COMPLETE" for r in records)
    world.assert_pristine()


# --- 12. exit codes ----------------------------------------------------------------------------

def _cli_run(world: World, monkeypatch: pytest.MonkeyPatch, prometheus: FakePrometheus) -> int:
    monkeypatch.chdir(world.tmp)
    monkeypatch.setenv("PROM_TOKEN", TOKEN)
    path = Path(world.tmp / "exp.yaml")
    path.write_text(world.experiment_text(trials=1, stop_after=1, prometheus=prometheus.url,
                                          token_env="PROM_TOKEN"))
    return main(["run", str(path), "--plain", "--no-confirm"])


@pytest.mark.parametrize("broken, message", [
    ("deployment", r"Deployment t-\w+/api not found"),
    ("rbac", r"forbidden \(403\): not allowed to list stresschaos"),
    ("chaos-mesh", r"StressChaos CRD .* is not installed"),
])
def test_environment_problems_exit_1_with_the_message(
        world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        prometheus: FakePrometheus, broken: str, message: str) -> None:
    if broken == "deployment":
        world.admin.delete(world.path("deployments", "api"))
    elif broken == "rbac":
        world.deny("list", "stresschaos")
    else:
        world.plane.cp.remove_crd("stresschaos.chaos-mesh.org")
    assert _cli_run(world, monkeypatch, prometheus) == 1
    out = capsys.readouterr()
    assert re.search(message, out.out + out.err), out
    assert "internal error" not in out.out + out.err


# --- 11. RBAC: the table is what the code uses, and what deploy/rbac.yaml grants ---------------

def test_the_code_uses_exactly_the_permissions_table(world: World) -> None:
    # an envFrom ConfigMap (which sets none of the tuned variables) makes the target read it
    world.admin.create(world.path("configmaps"), {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "api-config"},
                                                  "data": {"LOG_FORMAT": "json"}})
    world.patch("deployments", "api", {"spec": {"template": {"spec": {"containers": [
        {"name": "api", "envFrom": [{"configMapRef": {"name": "api-config"}}]}]}}}})
    world.settled()
    exp = world.experiment(trials=1, stop_after=1)
    assert stack.validate_cluster(exp) == []
    world.proxy.fail("POST", "/stresschaos$", 500, after=True)  # an answer lost: retry, 409, get
    outcome, _ = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    world.target().apply(CANDIDATE)  # a run that dies; then `autotune cleanup --namespace`
    world.dies()
    stack.cleanup_namespace(world.namespace, kubeconfig=str(world.kubeconfig), clock=world.clock)
    assert_used_exactly_granted(world.verbs(), (*NEEDED, *CLUSTER_NEEDED))


# --- 4. recovery that does not happen ---------------------------------------------------------

def _stress_fails_to_recover(world: World) -> None:
    def switch(seconds: float) -> None:
        if world.chaos_left():
            world.chaos.cancel_fails = True
    world.clock.on_sleep = switch


def test_a_recovery_that_does_not_happen_fails_the_trial_and_no_trial_follows(
        world: World) -> None:
    _stress_fails_to_recover(world)
    exp = world.experiment(trials=3, stop_after=5)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, StudyError), outcome
    first = next(r for r in records if r["state"] == "FAIL")
    # v2.8.3 says nothing when cancelling stress-ng fails (no event): the records say it all
    assert re.search(r"^recover: StressChaos .* still exists 5s after its deletion .*records: "
                     rf"{world.namespace}/api-[^ ]+/api: Injected.*stress-ng may still "
                     r"run in pods api-", first["failure"]), first["failure"]
    assert "Chaos Mesh said" not in first["failure"]
    stressed = re.findall(r"delete pod ([^)]+)\)", first["failure"])[0].split()
    assert stressed and all(p.startswith("api-") for p in stressed)
    later = records[records.index(first) + 1:]
    assert all(r["state"] == "FAIL" and "still exists" in r["failure"] for r in later)
    assert all("injections" not in r and "live" not in r for r in later), \
        "no candidate is applied and nothing injected after a stress that did not go"
    assert len(world.created_chaos()) == len(first["injections"])
    # the env is restored all the same (the new pods have no stress-ng); the object stays
    assert world.template_env() == ORIGINAL_ENV and world.annotations() == {}
    assert world.chaos_left(), "never forced: a human must look (the message says how)"


def test_the_study_stops_at_the_first_recovery_that_does_not_happen(world: World) -> None:
    _stress_fails_to_recover(world)
    exp = world.experiment(trials=3, stop_after=5)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, StressNotRecovered | StudyError)
    assert records[-1]["state"] == "FAIL" and "recover:" in records[-1]["failure"]


def test_the_next_start_explains_what_to_do_instead_of_crashing(world: World) -> None:
    _stress_fails_to_recover(world)
    exp = world.experiment(trials=1, stop_after=1)
    _, before = run(world, exp, world.backends(exp))
    world.clock.on_sleep = None
    outcome: Any
    outcome, records = run(world, exp, world.backends(exp))
    # the loop's own cleanup (finally) reports it again, as a StudyError: exit 1 either way
    assert isinstance(outcome, StressNotRecovered | StudyError), outcome
    assert outcome.exit_code == 1 and records == before, "no trial started"
    assert f"kubectl -n {world.namespace} delete pod api-" in str(outcome)
    assert "chaos-mesh.chaos-mesh.org/cleanFinalizer=forced" in str(outcome)


# --- 3. an HPA scales the Deployment up under the stress ---------------------------------------

def test_an_hpa_scale_up_is_measured_per_pod_and_reported(world: World) -> None:
    world.add_hpa(min_replicas=2, max_replicas=4)
    exp = world.experiment(trials=1, stop_after=1)
    warnings: list[str] = []
    assert stack.validate_cluster(exp, warnings=warnings) == []
    [hpa] = [w for w in warnings if w.startswith("HorizontalPodAutoscaler")]
    assert hpa.startswith(
        f"HorizontalPodAutoscaler api scales Deployment {world.namespace}/api (2..4 replicas on "
        "cpu)")
    assert "measured per pod" in hpa

    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert [r["state"] for r in records] == ["COMPLETE", "COMPLETE"], records[-1].get("failure")
    first, second = records
    [change] = first["changes"]  # each burst of the pattern made the HPA add a pod
    measured = [p["name"] for p in first["live"]["pods"]]
    assert change["measured_pods"] == measured and len(change["scaled_up"]) == 2
    assert not set(change["scaled_up"]) & set(measured)
    query = first["queries"]["p99_latency"]
    assert all(p in query for p in measured)
    assert not any(p in query for p in change["scaled_up"])
    assert {i.pod for i in world.chaos.injections
            if i.name in {j["name"] for j in first["injections"]}} == set(measured), \
        "new pods are never stressed"
    assert "changes" not in second and len(second["live"]["pods"]) == 4  # at maxReplicas
    world.assert_pristine()
    described = world.target(exp).describe()
    assert described["autoscaler"] == {"name": "api", "min_replicas": 2, "max_replicas": 4,
                                       "metrics": ["cpu"]}


# --- 10. comparable load ------------------------------------------------------------------------

def test_a_window_under_another_load_is_discarded_with_the_figures(world: World) -> None:
    exp = world.experiment(trials=1, stop_after=5)
    backends = world.backends(exp)
    assert isinstance(backends.source, StressedMetrics)
    source = backends.source
    rates = [100.0, 80.0]  # the baseline; a search trial under 20% less load; then 104/s
    original = source.read

    def read(queries: Any, window: Any, live: Any) -> Any:
        source.rate = rates.pop(0) if rates else 104.0
        return original(queries, window, live)

    source.read = read  # type: ignore[method-assign]
    outcome, records = run(world, exp, backends)
    assert isinstance(outcome, RunResult), outcome
    assert [r["state"] for r in records] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert records[1]["failure"] == (
        "load not comparable: request_rate was 80/s against the baseline's median 100/s "
        "(-20.0%; measure.load.tolerance 10%), so the window is discarded")
    assert records[2]["load"] == {"metric": "request_rate", "rate": 104.0, "baseline": 100.0,
                                  "deviation": 0.04}
    world.assert_pristine()


def test_a_kubernetes_experiment_without_a_load_check_is_rejected(world: World) -> None:
    from autotune.errors import ExperimentError
    from autotune.experiment import parse_experiment

    text = world.experiment_text(trials=1, stop_after=1).replace(
        ", load: {metric: request_rate, tolerance: 0.1}", "")
    with pytest.raises(ExperimentError, match=r"measure.load: required for a kubernetes target"):
        parse_experiment(text)


# --- 11. a second run of the same Deployment (kubectl create job --from=cronjob/...) ----------

def _other_run(world: World) -> Any:
    """A target whose run is another process (the CronJob's pod); same study, same Deployment."""
    target = world.target()
    assert target.lease is not None
    target.lease.holder = "autotune-api-28912345-abcde pid 1 study api-test"
    return target


def test_a_second_run_stops_before_touching_the_deployment(world: World) -> None:
    nightly = _other_run(world)
    nightly.apply(CANDIDATE)  # alive, mid-study
    saved = world.annotations()
    exp = world.experiment(trials=1, stop_after=1)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, TargetError) and outcome.exit_code == 1, outcome
    assert str(outcome).startswith(f"another autotune run holds Lease {world.namespace}/"
                                   "autotune-api "
                                   "(autotune-api-28912345-abcde pid 1 study api-test")
    assert records == [], "no trial ran"
    assert world.annotations() == saved, "the running study's saved original is untouched"
    assert {e["value"] for e in world.template_env() if e["name"] == "GOMAXPROCS"} == {"4"}
    nightly.restore()
    world.assert_pristine()


def test_a_dead_runs_lease_expires_and_the_next_run_takes_over(world: World) -> None:
    dead = _other_run(world)
    dead.apply(CANDIDATE)  # then killed: nothing restores, nothing releases
    assert dead.lease is not None
    world.age_leases(dead.lease.duration + 1)
    exp = world.experiment(trials=1, stop_after=1)
    outcome, _ = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    world.assert_pristine()


def test_two_runs_racing_for_the_lease_one_wins(world: World) -> None:
    first, second = _other_run(world), world.target()
    assert first.lease is not None and second.lease is not None
    dead = _other_run(world)
    assert dead.lease is not None
    dead.lease.holder = "a dead run"
    dead.lease.acquire()
    world.age_leases(dead.lease.duration + 1)  # expired: both may try to take it over
    results: list[str] = []

    def take(lease: Any) -> None:
        try:
            lease.acquire()
            results.append("won")
        except TargetError as e:
            results.append(str(e))

    threads = [threading.Thread(target=take, args=(t.lease,)) for t in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r == "won" for r in results) == [False, True], results
    [lease] = world.items("leases")
    assert lease["spec"]["leaseTransitions"] == 1
