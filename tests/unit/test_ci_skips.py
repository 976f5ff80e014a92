"""In CI a skipped test fails the run (tests/conftest.py): a fault test that did not run must not
leave CI green."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).parents[1] / "conftest.py"


def _pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_tool.py").write_text(
        "import pytest\n\n"
        "def test_needs_a_tool():\n    pytest.skip('stress-ng not installed')\n\n"
        "@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert False\n\n"
        "def test_runs():\n    assert True\n")
    env = {"PATH": "/usr/bin:/bin"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_skip_in_ci_fails_naming_the_reason(tmp_path: Path, ci: str) -> None:
    result = _pytest(tmp_path, ci)
    assert result.returncode == 1, result.stdout
    assert "1 failed, 1 passed, 1 xfailed" in result.stdout, result.stdout
    assert "stress-ng not installed" in result.stdout


def test_a_skip_outside_ci_is_a_skip(tmp_path: Path) -> None:
    result = _pytest(tmp_path, None)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 1 skipped, 1 xfailed" in result.stdout, result.stdout
