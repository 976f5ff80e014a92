"""Issue 15.2 on the real control plane: the CronJob's exact command line as PID 1 of a new PID
namespace (``unshare --pid --fork --mount-proc``), SIGTERM to that PID 1 from outside as the
kubelet sends it, in the middle of a stressed window: autotune removes the StressChaos, puts the
Deployment's env back byte for byte, lets the Lease go and exits 130 within the CronJob's
grace period."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.faults.pid1_support import (
    Pid1Job,
    caught_signals,
    cronjob_command,
    cronjob_env,
    grace_period,
    wait_for,
)
from tests.kubernetes.conftest import World
from tests.kubernetes.fake_prometheus import TOKEN, FakePrometheus


@pytest.mark.faults
def test_sigterm_to_the_cronjobs_pid1_restores_the_deployment(
        world: World, prometheus: FakePrometheus, tmp_path: Path) -> None:
    prometheus.state.pods = [p["metadata"]["name"] for p in world.pods()]
    exp = tmp_path / "api.yaml"
    exp.write_text(world.experiment_text(trials=2, stop_after=2, prometheus=prometheus.url,
                                         token_env="PROM_TOKEN", rollout_timeout="60s"))
    argv = cronjob_command(exp)
    assert argv[:2] == ["autotune", "nightly"], "the manifest runs autotune itself"
    job = Pid1Job(argv, cwd=tmp_path, env=cronjob_env({
        "PROM_TOKEN": TOKEN, "AUTOTUNE_PROMOTE_DIR": str(tmp_path / "promote"),
        "HOME": str(tmp_path)}))
    try:
        wait_for(lambda: bool(world.chaos_left()), job, "a StressChaos in the namespace")
        pid1 = job.init_pid()
        assert signal.SIGTERM in caught_signals(pid1), "PID 1 must handle SIGTERM"
        sent = job.signal(signal.SIGTERM)
        code = job.wait(timeout=grace_period())
        took = time.monotonic() - sent
    finally:
        job.kill()
    assert code == 130, job.output(40)
    assert took < grace_period()
    assert "interrupted (SIGTERM)" in job.output()
    world.assert_pristine()  # no StressChaos, the env as found, no annotation, no Lease
