"""measure.capture on a Kubernetes target (issue 10): a runtime trace and a CPU profile of the
baseline and the recommendation, each under its own StressChaos, fetched from the pod's
net/http/pprof through the API server's pod proxy (``pods/proxy``, granted only by
deploy/rbac-capture.yaml). End state as after a study: no StressChaos, the env as found."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ExperimentError
from autotune.experiment import Experiment
from autotune.kubernetes import stack
from autotune.study.capture import capture_pair
from autotune.study.storage import open_for_run
from tests.kubernetes.fake_world import World, fake_world

CAPTURED = ", capture: [trace, cpu]"
PORT = "\n    pprof_port: 6060"
BEST = {"GOMAXPROCS": 2, "forcegc_interval_ms": 500}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The fake API server: pods/proxy needs a process behind the pod's IP (see fake_world)."""
    yield from fake_world(tmp_path, monkeypatch)


def _capture(world: World, monkeypatch: pytest.MonkeyPatch,
             exp: Experiment) -> list[dict[str, Any]]:
    monkeypatch.chdir(world.tmp)
    studies = open_for_run(exp, f"sqlite:///{world.tmp}/study.db")
    return capture_pair(exp, studies, world.backends(exp), world.clock, BEST)


def test_baseline_and_recommendation_are_captured_under_stress_through_the_pod_proxy(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.fake.pprof_port = 6060
    exp = world.experiment(measure=CAPTURED, target=PORT)
    done = _capture(world, monkeypatch, exp)
    assert [c["name"] for c in done] == ["baseline", "recommended"]
    for c in done:
        assert "failure" not in c, c
        files = {f["kind"]: Path(f["path"]) for f in c["files"]}
        assert set(files) == {"trace", "cpu"}
        assert files["trace"].read_bytes().startswith(b"go 1.25 trace\x00")
        # min(5 s, the 0.4 s window), in whole seconds for pprof.Profile
        assert gzip.decompress(files["cpu"].read_bytes()).endswith(b"/debug/pprof/profile 1s")
        assert c["files"][0]["open_with"].startswith("go tool ")
    # four fetches, each while the configuration's StressChaos existed; none left after
    assert len(world.fake.proxied) == 4
    assert all(":6060/proxy/debug/pprof/" in path and chaos for path, chaos in world.fake.proxied)
    stressed = sorted({c.rsplit("-", 1)[0] for _, chaos in world.fake.proxied for c in chaos})
    assert stressed == ["autotune-api-test-tcapture-baseline",
                        "autotune-api-test-tcapture-recommended"]
    assert ("get", "pods/proxy") in world.fake.verbs
    world.assert_pristine()


def test_a_pod_without_pprof_on_that_port_fails_the_capture_with_the_reason(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = world.experiment(measure=CAPTURED, target=PORT)  # the pods serve no pprof
    done = _capture(world, monkeypatch, exp)
    assert all("connection refused" in c["failure"] for c in done), done
    assert all(":6060/proxy/debug/pprof/" in c["failure"] for c in done)
    world.assert_pristine()


def test_without_the_proxy_permission_validate_and_the_capture_name_the_rbac_file(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.fake.pprof_port = 6060
    world.fake.denied = {("get", "pods/proxy")}
    exp = world.experiment(measure=CAPTURED, target=PORT)
    assert stack.validate_cluster(exp) == [
        "not allowed to get pods/proxy in namespace 'shop' (no RBAC rule): see "
        "deploy/rbac-capture.yaml"]
    done = _capture(world, monkeypatch, exp)
    assert all("deploy/rbac-capture.yaml" in c["failure"] for c in done), done
    world.assert_pristine()


def test_capture_on_a_cluster_needs_the_pprof_port(world: World) -> None:
    with pytest.raises(ExperimentError, match=r"target.kubernetes.pprof_port: required with "
                                              r"measure.capture"):
        world.experiment(measure=CAPTURED)
