"""`autotune nightly`: the CronJob's night in one process (run; on ADOPT the export into the
promote directory; report; history) and its exit code rule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune import cli
from autotune.commands import (
    PROMOTE_DIR_VAR,
    PROMOTE_FORMAT_VAR,
    export,
    history,
    report,
    session,
)
from autotune.errors import ExitCode, StudyError, TargetError
from tests.support.nightly import nightly_experiment

EXPERIMENT = nightly_experiment(repeats=2, trials=3)
# --repeats 3: a candidate is judged on its confirmation runs alone, and ADOPT needs 3 of them.
SHORT = ["--plain", "--top", "1", "--repeats", "3", "--extra", "0"]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "api.yaml").write_text(yaml.safe_dump(EXPERIMENT))
    monkeypatch.chdir(tmp_path)
    for var in ("AUTOTUNE_STORAGE", PROMOTE_DIR_VAR, PROMOTE_FORMAT_VAR):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_a_night_runs_promotes_on_adopt_reports_and_records(
        workdir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The directory and format as the CronJob passes them: its env.
    monkeypatch.setenv(PROMOTE_DIR_VAR, str(workdir / "promote"))
    monkeypatch.setenv(PROMOTE_FORMAT_VAR, "env")
    assert cli.main(["nightly", "api.yaml", "--fail-on-drift", *SHORT]) == 0
    out = capsys.readouterr().out
    assert "verdict: ADOPT" in out, out
    promoted = workdir / "promote" / "nightly.env"
    assert f"wrote {promoted}" in out
    # The verdict line names the settings it adopts, those the promoted file carries (the
    # run's "best" line may name another configuration: one search measurement).
    adopted = [line for line in out.splitlines() if line.startswith("verdict: ADOPT ")]
    assert adopted, out
    exported = {line for line in promoted.read_text().splitlines() if not line.startswith("#")}
    assert exported and all(setting in adopted[0] for setting in exported), (adopted, exported)
    assert "GOMAXPROCS=" in promoted.read_text()
    results = workdir / "results" / "nightly"
    assert (results / "report.md").exists() and (results / "nights.json").exists()
    assert "ADOPT" in out[out.index("night (UTC)"):], "the history table"


def test_a_night_without_adopt_promotes_nothing_and_is_no_failure(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load((workdir / "api.yaml").read_text())
    doc["target"]["simulated"]["optimum"] = {"GOMAXPROCS": 8, "gc": 0}  # production is best
    (workdir / "api.yaml").write_text(yaml.safe_dump(doc))
    promote = workdir / "promote"
    code = cli.main(["nightly", "api.yaml", *SHORT,
                     "--promote-dir", str(promote), "--promote-format", "json"])
    assert code == 0
    assert "promote: nothing exported: the verdict is" in capsys.readouterr().out
    assert not promote.exists()


def test_an_edited_experiment_is_a_new_study_at_night_and_refused_by_hand(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Review finding: after an edit of the CronJob's experiment every night failed, naming
    # --new-study, which a CronJob cannot pass; `autotune run` must still refuse it.
    assert cli.main(["nightly", "api.yaml", "--no-confirm", "--plain"]) == 0
    doc = yaml.safe_load((workdir / "api.yaml").read_text())
    doc["parameters"][0]["values"] = doc["parameters"][0]["values"][:3]
    (workdir / "api.yaml").write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert cli.main(["run", "api.yaml", "--no-confirm", "--plain"]) == ExitCode.CONFIG
    assert "--new-study" in capsys.readouterr().err
    assert cli.main(["nightly", "api.yaml", "--no-confirm", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "new environment" in out and "parameter GOMAXPROCS changed from" in out


def test_an_unknown_promote_format_in_the_environment_is_a_usage_error(
        workdir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(PROMOTE_FORMAT_VAR, "yaml")
    assert cli.main(["nightly", "api.yaml", "--plain"]) == ExitCode.USAGE
    assert "$AUTOTUNE_PROMOTE_FORMAT is 'yaml'" in capsys.readouterr().err
    assert not (workdir / "results").exists(), "nothing ran"


def test_promoting_a_kustomize_patch_of_a_target_that_is_no_deployment_is_a_usage_error(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Review finding: the default format (kustomize) of a local or simulated experiment's
    # promotion exported nothing, every night, and the night exited 0.
    assert cli.main(["nightly", "api.yaml", "--plain", "--promote-dir",
                     str(workdir / "promote")]) == ExitCode.USAGE
    assert "kustomize patches a Deployment" in capsys.readouterr().err
    assert not (workdir / "results").exists(), "nothing ran"


def test_promoting_without_the_confirmation_is_a_usage_error(
        workdir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Review finding: --no-confirm's ADOPT rests on single search measurements; a CronJob with
    # $AUTOTUNE_PROMOTE_DIR promoted it like a confirmed one.
    monkeypatch.setenv(PROMOTE_DIR_VAR, str(workdir / "promote"))
    assert cli.main(["nightly", "api.yaml", "--plain", "--no-confirm",
                     "--promote-format", "env"]) == ExitCode.USAGE
    assert "needs the confirmation's evidence" in capsys.readouterr().err
    assert not (workdir / "results").exists(), "nothing ran"


def test_export_overwrite_without_write_to_is_a_usage_error(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["export", "api.yaml", "--format", "env", "--overwrite"]) == ExitCode.USAGE
    assert "--overwrite is for --write-to DIR" in capsys.readouterr().err


# --- the exit code rule, each step replaced -------------------------------------------------

class Steps:
    """Stand-ins for the night's steps: each returns its code or raises; the calls are kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, **outcomes: Any) -> None:
        self.calls: list[str] = []
        self.outcomes = outcomes
        monkeypatch.setattr(session, "study_run",
                            lambda exp, digest, args, **_: self._do("run"))
        monkeypatch.setattr(export, "promote", lambda exp, storage, fmt, d: self._do("promote"))
        monkeypatch.setattr(report, "report_line", lambda exp, storage: self._do("report"))
        monkeypatch.setattr(history, "show", lambda exp, storage, out, as_json: self._do(
            "history"))

    def _do(self, step: str) -> int:
        self.calls.append(step)
        outcome = self.outcomes.get(step, ExitCode.OK)
        if isinstance(outcome, BaseException):
            raise outcome
        return int(outcome)


@pytest.mark.parametrize(("outcomes", "code", "calls"), [
    ({}, ExitCode.OK, ["run", "promote", "report", "history"]),
    ({"run": ExitCode.DRIFT}, ExitCode.DRIFT, ["run", "report", "history"]),
    ({"run": TargetError("the rollout did not complete")}, ExitCode.CONFIG,
     ["run", "report", "history"]),
    ({"run": RuntimeError("a bug")}, ExitCode.INTERNAL, ["run", "report", "history"]),
    ({"promote": StudyError("database is locked")}, ExitCode.CONFIG,
     ["run", "promote", "report", "history"]),
    ({"report": RuntimeError("a bug in a plot")}, ExitCode.INTERNAL,
     ["run", "promote", "report", "history"]),
    ({"run": ExitCode.DRIFT, "report": RuntimeError("a bug in a plot")}, ExitCode.DRIFT,
     ["run", "report", "history"]),
], ids=["ok", "drift", "target-error", "bug-in-run", "promote-fails", "bug-in-report",
        "drift-wins"])
def test_the_nights_exit_code_is_the_runs_else_the_first_failing_steps(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, outcomes: dict[str, Any],
        code: ExitCode, calls: list[str]) -> None:
    steps = Steps(monkeypatch, **outcomes)
    assert cli.main(["nightly", "api.yaml", "--plain", "--promote-dir", "p",
                     "--promote-format", "env"]) == code
    assert steps.calls == calls


def test_no_promote_directory_no_promotion(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = Steps(monkeypatch)
    assert cli.main(["nightly", "api.yaml", "--plain"]) == 0
    assert steps.calls == ["run", "report", "history"]


# A SIGTERM between the run and the history (the report step here) ends the night at once.
SIGTERM_IN_REPORT = """
import os, signal, sys
from autotune import cli
from autotune.commands import history, report, session

def report_line(exp, storage):
    os.kill(os.getpid(), signal.SIGTERM)
    print("report went on after SIGTERM")
    return 0

session.study_run = lambda exp, digest, args, **_: 0
report.report_line = report_line
history.show = lambda *args, **kwargs: print("history ran") or 0
sys.exit(cli.main(["nightly", "api.yaml", "--plain"]))
"""


def test_sigterm_between_the_steps_ends_the_night_with_130(workdir: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SIGTERM_IN_REPORT], cwd=workdir,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == ExitCode.INTERRUPTED, (done.returncode, done.stderr)
    assert "report went on" not in done.stdout and "history ran" not in done.stdout
    assert "interrupted (SIGTERM); stress removed and target restored" in done.stderr

