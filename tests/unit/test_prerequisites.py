"""A local run refuses before anything starts when a program it needs is missing, naming it and
how to install it (it used to start and fail trial after trial: "apply: prometheus not found")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from autotune import cli
from autotune.errors import ExitCode
from autotune.study import samplers
from tests.support.simulated import document

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(("variable", "program"), [("AUTOTUNE_STRESS_NG", "stress-ng"),
                                                  ("AUTOTUNE_PROMETHEUS", "prometheus")])
def test_a_missing_program_refuses_the_run_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        variable: str, program: str) -> None:
    if shutil.which("go") is None:
        monkeypatch.setenv("AUTOTUNE_GO", "/bin/true")  # never run: the refusal comes first
    experiment = tmp_path / "local.yaml"
    shutil.copy(ROOT / "experiments" / "local.yaml", experiment)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, str(tmp_path / "missing" / program))
    code = cli.main(["run", str(experiment), "--plain"])
    err = capsys.readouterr().err
    assert code == ExitCode.CONFIG, err
    assert program in err and "apt-get install" in err, err
    # Nothing started, nothing recorded: no study, no process registry, no logs.
    results = tmp_path / "results"
    left = sorted(str(p.relative_to(results)) for p in results.rglob("*") if p.is_file()) \
        if results.exists() else []
    assert left == [], left


def test_cleanup_works_without_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    experiment = tmp_path / "local.yaml"
    shutil.copy(ROOT / "experiments" / "local.yaml", experiment)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNE_STRESS_NG", str(tmp_path / "missing" / "stress-ng"))
    monkeypatch.setenv("AUTOTUNE_PROMETHEUS", str(tmp_path / "missing" / "prometheus"))
    assert cli.main(["cleanup", str(experiment)]) == ExitCode.OK, capsys.readouterr().err


def test_sampler_gp_without_torch_refuses_the_run_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # It was refused at the first sampler trial, after the baseline and the design had run.
    monkeypatch.setattr(samplers, "gp_available", lambda: False)
    experiment = tmp_path / "gp.yaml"
    experiment.write_text(yaml.safe_dump(document(
        tmp_path, **{"study.sampler": "gp", "measure.warmup": "10ms", "measure.window": "20ms"})))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    code = cli.main(["run", str(experiment), "--plain", "--no-confirm"])
    err = capsys.readouterr().err
    assert code == ExitCode.CONFIG, err
    assert "pip install 'autotune[gp]'" in err, err
    results = tmp_path / "results"
    left = sorted(str(p.relative_to(results)) for p in results.rglob("*") if p.is_file()) \
        if results.exists() else []
    assert left == [], left
