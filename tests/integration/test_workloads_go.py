"""The Go side's own unit tests (autotune/workloads: the demo service, the load generator, and
what they share, e.g. the loopback rule) run with the rest: `make test` is the one command."""

from __future__ import annotations

import subprocess

import pytest

from autotune.platforms.local import gobuild

pytestmark = pytest.mark.integration


def test_go_unit_tests_pass() -> None:
    go = gobuild.find_go()
    done = subprocess.run([go, "test", "-count=1", "./..."], cwd=gobuild.WORKLOADS,
                          env=gobuild.go_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "internal/loopback" in done.stdout
