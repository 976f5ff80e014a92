"""How a command ends when something could not be undone: the error, then what to do."""

from __future__ import annotations

import pytest

from autotune.commands.outcome import guarded
from autotune.errors import ExitCode, NotUndone, StudyError


def test_what_could_not_be_undone_comes_with_the_command_that_undoes_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    def run() -> int:
        raise NotUndone(["cleanup incomplete: target: rollout of the original did not finish"])

    assert guarded(run) == ExitCode.CONFIG
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "error: cleanup incomplete: target: rollout of the original did not finish"
    assert "`autotune cleanup <experiment file>`" in err[1]


def test_other_errors_get_no_cleanup_advice(capsys: pytest.CaptureFixture[str]) -> None:
    def run() -> int:
        raise StudyError(["3 trials in a row failed"])

    assert guarded(run) == ExitCode.CONFIG
    assert "cleanup" not in capsys.readouterr().err
