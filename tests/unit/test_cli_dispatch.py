"""The CLI only parses and dispatches (issue 17): every command of the parser has a module in
autotune.commands with ``main(args)``, and importing autotune.cli loads none of them (nor the
heavy libraries they need), so the signal handlers are in place before any of that runs."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_of_the_parser_has_a_module_with_main() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    for name, module in COMMANDS.items():
        assert callable(importlib.import_module(module).main), name


def test_importing_the_cli_loads_no_command_and_no_heavy_library() -> None:
    code = ("import sys, autotune.cli; "
            "print(sorted(m for m in sys.modules if m.startswith(('autotune.commands.', "
            "'optuna', 'kubernetes', 'pydantic', 'matplotlib'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_confirmation_options_refuse_negative_counts(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "x.yaml", "--extra", "0", "--fixed"])
    assert (args.extra, args.fixed) == (0, True)
    with pytest.raises(SystemExit):
        parser.parse_args(["confirm", "x.yaml", "--extra", "-1"])
    assert "--extra: must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "nightly"])
def test_fail_on_drift_with_no_confirm_is_refused(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Review finding: the pair was accepted, and the drift check it skips is the only way to
    exit 4: a CronJob carrying both stayed green through any drift."""
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([command, "x.yaml", "--no-confirm", "--fail-on-drift"])
    assert stopped.value.code == 2
    assert "not allowed with argument --no-confirm" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["doctor", "--context", "prod"], "give an experiment with a kubernetes target"),
    (["doctor", str(ROOT / "experiments" / "local.yaml"), "--context", "prod"],
     "has no kubernetes target"),
])
def test_an_option_nothing_would_use_is_a_usage_error(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Review finding (a first-time user): `doctor --context` without a cluster experiment was
    ignored, as if the context had been checked."""
    from autotune.cli import main

    assert main(argv) == 2
    assert message in capsys.readouterr().err
