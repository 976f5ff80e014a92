"""The two commands of the README, as make would run them (its dry run: nothing executed):
`make demo` installs only what a run needs, `make test` what the tests need."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _dry_run(target: str, tmp: Path) -> str:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed: README's two commands need it")
    # A venv path that does not exist: make plans every step from scratch.
    done = subprocess.run([make, "-n", target, f"VENV={tmp / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_demo_installs_no_test_or_lint_tools(tmp_path: Path) -> None:
    plan = _dry_run("demo", tmp_path)
    assert "pip install -q -e '.[local,report]'" in plan
    assert "dev]" not in plan and "controlplane" not in plan
    assert "scripts/ensure-tools.sh\n" in plan, "the local stack's tools, not the tests'"
    assert "autotune run experiments/local.yaml" in plan


def test_make_test_installs_what_the_tests_need(tmp_path: Path) -> None:
    plan = _dry_run("test", tmp_path)
    assert "'.[local,report,dev]'" in plan
    assert "scripts/ensure-tools.sh test" in plan, "PostgreSQL and the test tools"
    assert "scripts/controlplane.sh" in plan
