"""Exit codes: one ``ExitCode`` table; errors autotune raises on purpose (the environment, the
user) exit 1, and 3 is left for bugs; `autotune --help` lists the table."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
import yaml

import autotune
from autotune.cli import EXPORT_FORMATS, main
from autotune.errors import (
    EXIT_CODE_MEANINGS,
    AutotuneError,
    ChaosError,
    ExitCode,
    MetricsError,
    StressNotRecovered,
    StudyError,
    TargetError,
)
from autotune.platforms.kubernetes.errors import NotFound, ServerError, reraise_as
from autotune.platforms.simulated import SimulatedService

ROLLOUT_TIMEOUT = ("the rollout of Deployment shop/api did not complete within 300s (it "
                   "restores the original env of a run that died)")
"""What autotune/platforms/kubernetes/deployment.py raises (a plain TargetError) when a rollout
times out."""

EXPERIMENT = {
    "name": "codes",
    "target": {"simulated": {"optimum": {"GOMAXPROCS": 2}, "unset": {"GOMAXPROCS": 8},
                             "state_file": "world.json"}},
    "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 16}],
    "baseline": {"repeats": 1},
    "chaos": {"stress": {"workers": 1, "load": 50}},
    "measure": {"warmup": "10ms", "window": "20ms"},
    "metrics": {"p99": "surface"},
    "objective": {"minimize": "p99"},
    "study": {"trials": 2, "sampler": "random", "seed": 1},
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(EXPERIMENT))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    return tmp_path


@pytest.mark.parametrize("error", [
    TargetError(ROLLOUT_TIMEOUT),
    ChaosError("the StressChaos of a dead run could not be deleted"),
    MetricsError("Prometheus answered 503"),
    StressNotRecovered("stress-ng 1234 still runs"),
], ids=lambda e: type(e).__name__)
def test_an_environment_error_while_a_dead_run_is_cleaned_up_exits_1(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, error: AutotuneError) -> None:
    """`run` first removes what a dead run left (the target's cleanup: a rollout in a cluster);
    that failing is the cluster's problem, not a bug (it exited 3 before)."""
    def cleanup(self: SimulatedService) -> list[str]:
        raise error

    monkeypatch.setattr(SimulatedService, "cleanup", cleanup)
    assert main(["run", "exp.yaml", "--plain", "--no-confirm"]) == 1
    assert f"error: {error}" in capsys.readouterr().err
    assert "internal error" not in caplog.text


def test_cleanup_namespace_whose_rollout_times_out_exits_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.platforms.kubernetes import stack

    def cleanup_namespace(namespace: str, **kwargs: object) -> list[str]:
        raise TargetError(ROLLOUT_TIMEOUT)

    monkeypatch.setattr(stack, "cleanup_namespace", cleanup_namespace)
    assert main(["cleanup", "--namespace", "shop"]) == 1
    assert f"error: {ROLLOUT_TIMEOUT}" in capsys.readouterr().err


def test_an_api_error_reraised_as_a_family_exits_1_by_its_type() -> None:
    for api_error in (NotFound("deployments/api not found", 404),
                      ServerError("etcdserver: request timed out", 500)):
        with pytest.raises(TargetError) as raised, reraise_as(TargetError):
            raise api_error
        assert raised.value.exit_code == ExitCode.CONFIG
        assert "exit_code" not in vars(raised.value), "the code follows from the type alone"


def test_an_unexpected_exception_is_a_bug_and_exits_3(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def cleanup(self: SimulatedService) -> list[str]:
        raise KeyError("applied")

    monkeypatch.setattr(SimulatedService, "cleanup", cleanup)
    assert main(["run", "exp.yaml", "--plain", "--no-confirm"]) == 3
    assert "internal error (a bug in autotune" in caplog.text


def test_a_storage_failure_is_the_environment_and_exits_1(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """The database really fails mid-run (a table gone under the writer): the storage says so
    as a StorageError in the database's words, and the run exits 1, not 3 with a trace."""
    import sqlite3

    applied = SimulatedService.apply

    def apply(self: SimulatedService, env: dict[str, str]) -> object:
        with sqlite3.connect(workdir / "results" / "codes" / "study.db") as db:
            db.execute("DROP TABLE trial_user_attributes")
        return applied(self, env)

    monkeypatch.setattr(SimulatedService, "apply", apply)
    assert main(["run", "exp.yaml", "--plain", "--no-confirm"]) == 1
    err = capsys.readouterr().err
    assert "the study storage failed: no such table: trial_user_attributes" in err, err
    assert "trials completed so far are kept" in err
    assert "internal error" not in caplog.text


def _all_subclasses(cls: type[AutotuneError]) -> set[type[AutotuneError]]:
    out: set[type[AutotuneError]] = set(cls.__subclasses__())
    for sub in list(out):
        out |= _all_subclasses(sub)
    return out


def test_every_error_autotune_raises_on_purpose_exits_1() -> None:
    for module in pkgutil.walk_packages(autotune.__path__, "autotune."):
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional dependency (gp, report) that is not installed
            continue
    classes = _all_subclasses(AutotuneError) | {AutotuneError}
    assert {TargetError, ChaosError, MetricsError, StudyError, NotFound} <= classes
    internal = sorted(c.__qualname__ for c in classes if c.exit_code != ExitCode.CONFIG)
    assert internal == [], "3 is for bugs: these would read 'internal error' in an alert"


def test_help_lists_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("exit codes:"):]
    for code in ExitCode:
        first_words = " ".join(EXIT_CODE_MEANINGS[code].split()[:3])
        assert f"\n  {int(code):<4d}{first_words}" in table, (code, table)
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 130], "documented values (README)"
    assert "SIGTERM" in EXIT_CODE_MEANINGS[ExitCode.INTERRUPTED]


def test_export_formats_are_the_exporters() -> None:
    from autotune.report.export import FORMATS

    assert tuple(FORMATS) == EXPORT_FORMATS


def test_a_sigterm_while_the_restore_fails_exits_1_with_what_is_left(
        workdir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The operator deletes the Job as the final restore hangs; the restore then fails. The
    command said "interrupted (SIGTERM); stress removed and target restored" and exited 130,
    the candidate still applied: the held-back signal was raised in the error's place, first as
    the restore's shield ended, then (review of that fix) as the night's record was saved."""
    import os
    import signal

    def restore(self: SimulatedService, best: object = None) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # held back: the restore is shielded
        raise TargetError("rollout of the original did not finish within 300s")

    monkeypatch.setattr(SimulatedService, "restore", restore)
    assert main(["run", "exp.yaml", "--plain", "--no-confirm"]) == 1
    err = capsys.readouterr().err
    assert "error: cleanup incomplete: target: rollout of the original" in err, err
    assert "autotune cleanup <experiment file>" in err
    assert "target restored" not in err
    assert yaml.safe_load((workdir / "world.json").read_text())["applied"] is not None
