"""Issue 18 ("messages that teach"): every query is parsed by Prometheus's own parser
(promtool, from the prometheus package the local stack installs) before anything starts, and
the problem names the metric; without promtool the check is said to be skipped."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.experiment import load_experiment
from autotune.platforms.local.promtool import check_queries

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]


def _broken(tmp_path: Path) -> tuple[Path, str]:
    doc = yaml.safe_load((ROOT / "experiments" / "local.yaml").read_text())
    name = next(n for n, m in doc["metrics"].items()
                if (m["query"] if isinstance(m, dict) else m).rstrip().endswith(")"))
    spec = doc["metrics"][name]
    if isinstance(spec, dict):
        spec["query"] = spec["query"].rstrip()[:-1]  # the closing parenthesis forgotten
    else:
        doc["metrics"][name] = spec.rstrip()[:-1]
    doc["name"] = "promql-broken"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, name


EXPERIMENTS = sorted(p for p in (ROOT / "experiments").glob("*.yaml")
                     if "apiVersion" not in yaml.safe_load(p.read_text()))  # not a manifest


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_every_shipped_experiments_queries_parse(path: Path) -> None:
    assert check_queries(load_experiment(path)[0]) == []


def test_validate_and_run_refuse_a_query_that_does_not_parse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path, name = _broken(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"metrics.{name}: PromQL does not parse: unclosed left parenthesis" in err, err
    assert main(["run", str(path), "--plain"]) == 1
    assert "unclosed left parenthesis" in capsys.readouterr().err
    assert not (tmp_path / "results").exists(), "nothing started"


def test_without_promtool_the_check_is_said_to_be_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = _broken(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no promtool here
    assert main(["validate", str(path)]) == 0
    assert "note: PromQL not checked: promtool not found" in capsys.readouterr().err
