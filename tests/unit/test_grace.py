"""A stopped night's undo against the CronJob's grace period (platforms/kubernetes/grace.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.experiment import parse_experiment
from autotune.platforms.kubernetes.grace import SHIPPED_GRACE_PERIOD, grace_warnings, undo_budget

REPO = Path(__file__).resolve().parents[2]
API = REPO / "experiments" / "api.yaml"


def test_the_shipped_grace_period_is_the_cronjobs() -> None:
    [job] = [d for d in yaml.safe_load_all((REPO / "deploy/base/cronjob.yaml").read_text())
             if d and d.get("kind") == "CronJob"]
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == SHIPPED_GRACE_PERIOD


def test_the_shipped_experiment_fits() -> None:
    assert grace_warnings(parse_experiment(API.read_text())) == []
    assert undo_budget(300) <= SHIPPED_GRACE_PERIOD


def test_a_rollout_timeout_past_the_grace_period_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = API.read_text()
    assert "rollout_timeout: 5m" in text
    slow = tmp_path / "slow.yaml"
    slow.write_text(text.replace("rollout_timeout: 5m", "rollout_timeout: 10m"))
    [warning] = grace_warnings(parse_experiment(slow.read_text()))
    assert "target.kubernetes.rollout_timeout" in warning and "at least 900" in warning
    assert main(["validate", str(slow)]) == 0  # a warning: a run by hand has no grace period
    assert "terminationGracePeriodSeconds to at least 900" in capsys.readouterr().err
