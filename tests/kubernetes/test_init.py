"""`autotune init --deployment` against the real control plane: it reads the container's CPU
limit from the Deployment the API server holds and proposes the Go-aware space for it; it asks
which container when there are several, and changes nothing in the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.cli import main
from autotune.experiment import load_experiment
from tests.kubernetes.conftest import CONTAINER, DEPLOYMENT, World


def _init(world: World, out: Path, *extra: str) -> int:
    return main(["init", "--deployment", f"{world.namespace}/{DEPLOYMENT}", "--kubeconfig",
                 str(world.kubeconfig), "--prometheus", "http://prometheus.monitoring:9090",
                 "-o", str(out), *extra])


def test_init_proposes_the_space_for_the_containers_cpu_limit(
        world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    world.patch("deployments", DEPLOYMENT, {"spec": {"template": {"spec": {"containers": [
        {"name": CONTAINER, "resources": {"limits": {"cpu": "2500m"}}}]}}}})
    before = world.deployment()

    out = tmp_path / "api.yaml"
    assert _init(world, out, "--container", CONTAINER) == 0, capsys.readouterr().err
    exp, _ = load_experiment(out)
    spec = exp.target.kubernetes
    assert spec is not None
    assert (spec.namespace, spec.deployment, spec.container) == (
        world.namespace, DEPLOYMENT, CONTAINER)
    # 2.5 CPUs: Go's default is 3 Ps; from 1 to twice the limit rounded up.
    assert exp.parameters[0].values == (1, 2, 3, 4, 6)
    assert "CPU limit 2.5" in out.read_text()
    after = world.deployment()
    assert (after["spec"], after["metadata"]["generation"]) == (
        before["spec"], before["metadata"]["generation"]), "init changes nothing"


def test_init_asks_which_container_when_there_are_several(
        world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _init(world, tmp_path / "x.yaml") == 1
    err = capsys.readouterr().err
    assert "--container" in err and "'sidecar'" in err
    assert not (tmp_path / "x.yaml").exists()


def test_init_says_when_the_deployment_is_not_there(
        world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["init", "--deployment", f"{world.namespace}/nope", "--kubeconfig",
                 str(world.kubeconfig), "--prometheus", "http://127.0.0.1:9", "-o",
                 str(tmp_path / "x.yaml")])
    assert code == 1
    assert f"Deployment {world.namespace}/nope not found" in capsys.readouterr().err
