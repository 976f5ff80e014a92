"""Issue 9.10: comparable load in a cluster, against the real control plane. ``target.kubernetes.load`` runs autotune's load
generator as a pod in the namespace for every measured candidate; its client-side histogram,
selected by ``{{load_selector}}``, is the objective. End state: no generator pod, no
StressChaos, the env as found."""

from __future__ import annotations

import re
from typing import Any

import pytest

from autotune.errors import ExperimentError, TargetError
from autotune.experiment import parse_experiment
from autotune.kubernetes import stack
from autotune.kubernetes.loadgen import BINARY, load_pods
from autotune.kubernetes.permissions import CLUSTER_NEEDED, needed
from autotune.study.capture import capture_pair
from autotune.study.loop import RunResult
from autotune.study.storage import open_for_run
from tests.kubernetes.conftest import ORIGINAL_ENV, World
from tests.kubernetes.fake_prometheus import TOKEN, FakePrometheus
from tests.kubernetes.test_study import run

LOAD = ('\n    load: {url: "http://api.shop.svc:8080/", rate: 50, image: "example/autotune:0.1", '
        'ready_timeout: 3s}')
CLIENT_P99 = ("\n  client_p99: 'histogram_quantile(0.99, sum by (le) (rate("
              "loadgen_request_duration_seconds_bucket{ {{load_selector}} }[{{window}}])))'")


def _generators(world: World) -> list[dict[str, Any]]:
    return [p for p in world.items("pods")
            if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "load"
            and not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(autouse=True)
def _may_create_pods(world: World) -> None:
    world.grant("rbac-load.yaml")


def test_every_measured_candidate_gets_the_same_load_and_none_is_left(world: World) -> None:
    exp = world.experiment(trials=2, target=LOAD, metrics=CLIENT_P99)
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert [r["state"] for r in records] == ["COMPLETE"] * 3
    created = [r.body for r in world.proxy.seen("POST", "/pods$")]
    assert len(created) == len(records), "one generator per measured candidate"
    for record, pod in zip(records, created, strict=True):
        name = pod["metadata"]["name"]
        assert record["live"]["load_pod"] == name
        assert f'pod="{name}"' in record["queries"]["client_p99"]
        assert record["metrics"]["client_p99"] == 0.004
        [container] = pod["spec"]["containers"]
        assert container["command"] == [BINARY]
        assert container["args"][:5] == ["-in-cluster", "-target", "http://api.shop.svc:8080/",
                                         "-rate", "50"]
        assert pod["spec"]["activeDeadlineSeconds"] > 0  # ends even if nobody deletes it
        # preferably not on the candidate's nodes (its CPU would add to their stress)
        term = pod["spec"]["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        assert term == {"labelSelector": {"matchLabels": {"app": "api"}},
                        "topologyKey": "kubernetes.io/hostname"}
    deleted = [r.path.rsplit("/", 1)[1] for r in world.proxy.seen("DELETE", "/pods/")]
    assert deleted == [p["metadata"]["name"] for p in created]
    assert _generators(world) == []
    world.assert_pristine()


def test_a_generator_that_cannot_start_fails_the_trial_with_the_reason(world: World) -> None:
    exp = world.experiment(trials=1, stop_after=1, metrics=CLIENT_P99,
                           target=LOAD.replace("example/autotune:0.1",
                                               "registry.invalid/missing:1.0"))
    _, records = run(world, exp, world.backends(exp))
    assert records[0]["state"] == "FAIL"
    assert re.search(r"the load generator pod autotune-api-test-tload-1-\w+ cannot start: "
                     r"ErrImagePull", records[0]["failure"]), records[0]["failure"]
    assert _generators(world) == []
    world.assert_pristine()


def test_a_dead_runs_generator_is_removed_by_the_next_start_and_by_cleanup(
        world: World) -> None:
    exp = world.experiment(target=LOAD, metrics=CLIENT_P99)
    dead = world.target(exp)
    dead.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})  # then the run dies
    assert len(_generators(world)) == 1
    starting = world.target(exp)  # the next run's start
    said = starting.cleanup()
    assert said[0].startswith(f"load generator pod {world.namespace}/autotune-api-test-tload-1-")
    assert _generators(world) == []
    starting.restore()
    world.assert_pristine()
    # `autotune cleanup --namespace` finds them for any study
    alive = world.target(exp)
    alive.apply({"GOMAXPROCS": "4", "FORCEGC_INTERVAL_MS": None})
    done = stack.cleanup_namespace(world.namespace, kubeconfig=str(world.kubeconfig),
                                   clock=world.clock)
    assert any(line.startswith(f"load generator pod {world.namespace}/") for line in done), done
    assert _generators(world) == []
    alive.restore()
    world.assert_pristine()


def test_validate_names_the_rbac_file_for_creating_pods(world: World) -> None:
    world.deny("create", "pods")
    exp = world.experiment(target=LOAD, metrics=CLIENT_P99)
    [problem] = stack.validate_cluster(exp)
    assert problem.startswith(f"not allowed to create pods in namespace '{world.namespace}'")
    assert problem.endswith("see deploy/rbac-load.yaml")


def test_load_selector_needs_the_generator_and_the_generator_replaces_measure_load(
        world: World) -> None:
    with pytest.raises(ExperimentError, match=r"metrics.client_p99: \{\{load_selector\}\} "
                                              r"selects the load generator's series: it needs "
                                              r"target.kubernetes.load"):
        world.experiment(metrics=CLIENT_P99)
    text = world.experiment_text(trials=1, stop_after=1, metrics=CLIENT_P99, target=LOAD).replace(", load: {metric: request_rate, tolerance: 0.1}", "")
    assert parse_experiment(text).target.kubernetes is not None
    assert load_pods("api-test") == ("app.kubernetes.io/component=load,"
                                     "app.kubernetes.io/managed-by=autotune,"
                                     "autotune/study=api-test")


def test_with_every_option_on_the_code_uses_exactly_the_tables(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:

    world.fake.pprof_port = 6060
    exp = world.experiment(trials=1, stop_after=1, target=LOAD + "\n    pprof_port: 6060",
                           measure=", schedtrace: 100ms, capture: [trace, cpu]",
                           metrics=CLIENT_P99)
    assert stack.validate_cluster(exp) == []
    world.fake.fail("POST", "/stresschaos", 500, after=True)  # an answer lost: retry, 409, get
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert all(r["state"] == "COMPLETE" for r in records)
    monkeypatch.chdir(world.tmp)
    studies = open_for_run(exp, f"sqlite:///{world.tmp}/study.db")
    done = capture_pair(exp, studies, world.backends(exp), world.clock, None)
    assert all("files" in c for c in done), done
    world.target(exp).apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})  # a run that dies
    stack.cleanup_namespace(NAMESPACE, kubeconfig=str(world.kubeconfig), clock=world.clock)
    assert world.fake.verbs == {(p.verb, p.kind.plural)
                                for p in (*needed(True, True, True), *CLUSTER_NEEDED)}


def test_validate_live_does_not_try_the_generators_series(
        world: World, prometheus: FakePrometheus, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROM_TOKEN", TOKEN)
    prometheus.state.pods = [p["metadata"]["name"] for p in world.pods()]
    exp = world.experiment(prometheus=prometheus.url, token_env="PROM_TOKEN", target=LOAD,
                           metrics=CLIENT_P99)
    problems = stack.validate_live(exp)  # no generator runs outside a trial: nothing to read
    assert len(problems) == 1 and problems[0].startswith("metrics.gc_pause_p99: nan"), problems
    assert not any("loadgen_" in q for q in prometheus.state.seen)


def test_a_generator_that_cannot_be_deleted_never_keeps_the_env_from_coming_back(
        world: World) -> None:

    exp = world.experiment(target=LOAD, metrics=CLIENT_P99)
    target = world.target(exp)
    target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    world.deny("delete", "pods")
    with pytest.raises(TargetError, match=r"forbidden.*cannot delete resource \"pods\""):
        target.restore()
    assert world.template_env() == ORIGINAL_ENV and world.annotations() == {}
    assert len(_generators(world)) == 1, "left for cleanup, which says so"
    world.grant("rbac-load.yaml")
    starting = world.target(exp)
    assert starting.cleanup()[0].startswith(f"load generator pod {world.namespace}/")
    starting.restore()
    assert _generators(world) == []
    world.assert_pristine()
