"""SIGTERM to the CronJob's container, with the real kernel: deploy/cronjob.yaml's exact command
line as PID 1 of a new PID namespace, a real local study (Go demo service in a cgroup, stress-ng,
Prometheus) in a stressed window, SIGTERM to that PID 1 from outside, as the kubelet sends it on
activeDeadlineSeconds, ``kubectl delete job`` or a node drain.

A PID 1 receives only the signals it has a handler for (pid_namespaces(7)). The CronJob used to
run ``/bin/sh -c SCRIPT``: sh was PID 1 with no handler, the SIGTERM was discarded, and the
SIGKILL after the grace period left everything autotune had changed. The second test keeps that
old form, to show the loss this fixes.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.errors import ExitCode
from tests.faults import kill_support as ks
from tests.faults import pid1_support as pid1

pytestmark = [pytest.mark.faults, pytest.mark.integration]

TOKEN = uuid.uuid4().hex[:6]

OLD_COMMAND = ["/bin/sh", "-c", """\
experiment="$2"
autotune "$@"
status=$?
if [ "$status" -eq 0 ]; then
  autotune export "$experiment" --format "$AUTOTUNE_PROMOTE_FORMAT" \\
    --write-to "$AUTOTUNE_PROMOTE_DIR"
  exported=$?
  if [ "$exported" -gt 1 ]; then status=$exported; fi
fi
autotune report "$experiment" > /dev/null
autotune history "$experiment"
exit "$status"
""", "autotune-nightly"]
OLD_ARGS = ["run", "/etc/autotune/api.yaml", "--plain", "--fail-on-drift"]
"""deploy/cronjob.yaml's container before autotune became its PID 1, verbatim."""


@pytest.fixture(scope="module")
def built() -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("unshare --pid needs root (CI runs as root)")
    for tool in ("stress-ng", "prometheus", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (scripts/ensure-tools.sh)")
    from autotune.platforms.local import gobuild

    gobuild.build("demo")
    gobuild.build("loadgen")


class Night:
    """One round's files and names: the experiment, its results, its storage, its tag."""

    def __init__(self, tmp: Path, label: str) -> None:
        self.name = f"p1{TOKEN}{label}"
        self.tag = f"p1-{TOKEN}-{label}"
        self.tmp = tmp
        self.experiment = tmp / "api.yaml"
        self.experiment.write_text(yaml.safe_dump(ks.short_study(self.name, trials=2)))
        self.results = tmp / "results" / self.name
        self.url = f"sqlite:///{self.results}/study.db"
        self.promote = tmp / "promote"

    def env(self) -> dict[str, str]:
        # The CronJob's kustomize format patches a Deployment: this night's target is local.
        return pid1.cronjob_env({"AUTOTUNE_PROMOTE_DIR": str(self.promote),
                                 "AUTOTUNE_PROMOTE_FORMAT": "env", **ks.tag_env(self.tag)})

    def stressed(self) -> bool:
        return any(p.role == "stress-ng" for p in ks.tagged(self.tag))

    def journal(self) -> list[dict[str, Any]]:
        path = self.results / "trials.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def completed(self) -> int:
        return sum(1 for r in self.journal() if r["state"] == "COMPLETE")

    def registry(self) -> list[dict[str, Any]]:
        path = self.results / "processes.json"
        return json.loads(path.read_text()) if path.exists() else []

    def nights(self) -> list[dict[str, Any]]:
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        study = optuna.load_study(study_name=self.name, storage=self.url)
        return [v for k, v in study.user_attrs.items() if k.startswith("night:")]


def test_sigterm_to_the_cronjobs_pid1_undoes_the_running_trial(built: None,
                                                                tmp_path: Path) -> None:
    night = Night(tmp_path, "new")
    argv = pid1.cronjob_command(night.experiment)
    grace = pid1.grace_period()
    job = pid1.Pid1Job(argv, tmp_path, night.env())
    try:
        pid1.wait_for(night.stressed, job, "stressed window")
        before = ks.trial_states(night.url, night.name)
        init = job.init_pid()
        assert signal.SIGTERM in pid1.caught_signals(init), (
            f"PID 1 of the CronJob's container ({' '.join(argv[:3])} ...) has no SIGTERM "
            "handler: the kernel discards the kubelet's SIGTERM")
        sent = job.signal(signal.SIGTERM)
        code = job.wait(timeout=grace)
        seconds = time.monotonic() - sent
        out = job.output()
        print(f"SIGTERM -> exit {code} in {seconds:.1f}s (grace period {grace:g}s)")
        assert code == ExitCode.INTERRUPTED, out[-3000:]  # 130 for SIGTERM too
        assert seconds < grace
        assert "interrupted (SIGTERM); stress removed and target restored" in out

        # Undone by autotune itself, before it exited. (The namespace's other processes die
        # with its PID 1 anyway: the registry and the cgroups say who stopped them.)
        assert ks.wait_no_leftovers(night.tag, night.name, night.results).processes == []
        assert ks.our_cgroups(night.name) == [], "the service's cgroup was not removed"
        assert night.registry() == [], f"processes not stopped by autotune: {night.registry()}"

        # The journal records the interrupted trial; the results are intact.
        last = night.journal()[-1]
        assert (last["state"], last["failure"]) == ("FAIL", "interrupted (SIGTERM)"), last
        after = ks.trial_states(night.url, night.name)
        assert ks.count(after, "RUNNING") == 0, after
        complete_before = {k for k, (s, _) in before.items() if s == "COMPLETE"}
        assert {k for k in complete_before if after[k][0] == "COMPLETE"} == complete_before
        journal_complete = ks.journal_complete(night.results)
        assert all(after[k][0] == "COMPLETE" for k in journal_complete), (journal_complete, after)
        assert [n["status"] for n in night.nights()] == ["interrupted"]
        assert not night.promote.exists(), "an interrupted night promotes nothing"
    finally:
        job.kill()
        ks.force_cleanup(night.tag, night.name)


def test_the_old_shell_form_loses_the_sigterm(built: None, tmp_path: Path) -> None:
    """The defect, reproduced: sh as PID 1 has no SIGTERM handler, so the kernel discards the
    signal, autotune measures on, and only the SIGKILL after the grace period ends the pod,
    leaving what autotune had set up to the next night's `autotune cleanup`."""
    night = Night(tmp_path, "old")
    argv = [*OLD_COMMAND, *(str(night.experiment) if a.startswith(pid1.EXPERIMENT_MOUNT) else a
                            for a in OLD_ARGS)]
    job = pid1.Pid1Job(argv, tmp_path, night.env())
    try:
        pid1.wait_for(night.stressed, job, "stressed window")
        assert signal.SIGTERM not in pid1.caught_signals(job.init_pid())
        completed = night.completed()
        job.signal(signal.SIGTERM)
        # Had autotune got it, this trial would end as FAIL "interrupted" and the run with 130.
        # It carries on instead: the trial completes, and the next one is stressed in turn.
        pid1.wait_for(lambda: night.completed() > completed, job, "trial completed after it")
        pid1.wait_for(night.stressed, job, "next stressed window")
        assert job.running()
        assert "interrupted" not in job.output()
        assert all(r["state"] == "COMPLETE" for r in night.journal()), night.journal()

        job.kill()  # what the kubelet does once the grace period is over
        assert job.wait(timeout=30) != 0
        # The kernel killed every process of the namespace with its PID 1; what autotune had
        # set up stays: its cgroups, its registry of processes, and the trial RUNNING.
        assert ks.wait_no_leftovers(night.tag, night.name, night.results).processes == []
        assert ks.our_cgroups(night.name), "a SIGKILLed run leaves its cgroups"
        assert night.registry(), "a SIGKILLed run leaves its registry of processes"
        assert ks.count(ks.trial_states(night.url, night.name), "RUNNING") == 1

        # The next night's pod runs `autotune cleanup`, in a PID namespace of its own.
        cleanup = pid1.Pid1Job(["autotune", "cleanup", str(night.experiment)], tmp_path,
                               night.env())
        try:
            assert cleanup.wait(timeout=60) == 0, cleanup.output()
        finally:
            cleanup.kill()
        assert night.registry() == [], cleanup.output()
        assert ks.tagged(night.tag) == []
        # The cgroups too: their names end in the dead run's PID in its own namespace (2 here),
        # a live thread in this one; what says the run is dead is its run lock, which cleanup
        # now holds (the owner recorded on each group: autotune/platforms/local/cgroups.py stale()).
        assert ks.our_cgroups(night.name) == [], cleanup.output()
    finally:
        job.kill()
        ks.force_cleanup(night.tag, night.name)
