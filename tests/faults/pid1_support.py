"""The CronJob's container, as the kernel runs it: its exact command line (deploy/cronjob.yaml's
``command`` + ``args``) as PID 1 of a new PID namespace (``unshare --pid --fork --mount-proc``),
signalled from outside the way the kubelet signals a container: its PID 1 only.

Nothing here knows the target: a test gives the command line (``cronjob_command`` with its own
experiment file), the environment, and the condition it waits for (a stressed window of the
local stack, a StressChaos object in a cluster, ...).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRONJOB = ROOT / "deploy" / "cronjob.yaml"
EXPERIMENT_MOUNT = "/etc/autotune/"
"""Where the CronJob mounts the experiment: args under it are replaced by the test's file."""


# --- deploy/cronjob.yaml --------------------------------------------------------------------

def cronjob_pod(path: Path = CRONJOB) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    [cron] = [d for d in docs if d["kind"] == "CronJob"]
    return dict(cron["spec"]["jobTemplate"]["spec"]["template"]["spec"])


def cronjob_container(path: Path = CRONJOB) -> dict[str, Any]:
    [container] = cronjob_pod(path)["containers"]
    return dict(container)


def cronjob_command(experiment: Path, path: Path = CRONJOB) -> list[str]:
    """The container's ``command`` + ``args``, only the experiment file replaced."""
    c = cronjob_container(path)
    argv = [*c.get("command", []), *c.get("args", [])]
    return [str(experiment) if a.startswith(EXPERIMENT_MOUNT) else a for a in argv]


def cronjob_env(overrides: Mapping[str, str], path: Path = CRONJOB) -> dict[str, str]:
    """This environment plus the container's literal ``env`` values, then ``overrides`` (the
    promote directory, the storage...); autotune and its Python first on PATH, as in the image."""
    literal = {e["name"]: e["value"] for e in cronjob_container(path).get("env", [])
               if "value" in e}
    literal.pop("AUTOTUNE_STORAGE", None)
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_STORAGE"}
    bin_dir = str(Path(sys.executable).parent)
    return {**env, **literal, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1", **overrides}


def grace_period(path: Path = CRONJOB) -> float:
    return float(cronjob_pod(path)["terminationGracePeriodSeconds"])


# --- a command line as PID 1 of its own PID namespace ---------------------------------------

def caught_signals(pid: int) -> set[int]:
    """The signals ``pid`` has a handler for (SigCgt in /proc/PID/status). The kernel discards
    any other signal sent to the PID 1 of a PID namespace (pid_namespaces(7))."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask & (1 << (n - 1))}
    raise AssertionError(f"no SigCgt in /proc/{pid}/status")


class Pid1Job:
    """``argv`` as PID 1 of a new PID namespace, in ``cwd`` with ``env``. Output (stdout and
    stderr) is read by a thread. ``init_pid`` is that PID 1 as this namespace sees it: the one
    process a test signals, as the kubelet does."""

    def __init__(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> None:
        self.argv = list(argv)
        self.popen = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", *self.argv], cwd=cwd, env=dict(env),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._init: int | None = None

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            with self._lock:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def output(self, last: int | None = None) -> str:
        with self._lock:
            return "\n".join(self.lines if last is None else self.lines[-last:])

    def running(self) -> bool:
        return self.popen.poll() is None

    def init_pid(self, timeout: float = 10.0) -> int:
        """unshare's forked child: the namespace's PID 1 (its NSpid ends in 1)."""
        deadline = time.monotonic() + timeout
        while self._init is None:
            for task in Path(f"/proc/{self.popen.pid}/task").glob("*"):
                with contextlib.suppress(OSError):
                    children = (task / "children").read_text().split()
                    if children:
                        self._init = int(children[0])
            if self._init is None:
                assert self.running(), f"unshare ended first:\n{self.output()}"
                assert time.monotonic() < deadline, "unshare forked no child"
                time.sleep(0.01)
        status = Path(f"/proc/{self._init}/status").read_text()
        [nspid] = [line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")]
        assert nspid[-1] == "1", f"{self._init} is not a PID 1: NSpid {nspid}"
        return self._init

    def signal(self, sig: int) -> float:
        """Send ``sig`` to the namespace's PID 1 from outside; when (monotonic)."""
        pid = self.init_pid()
        sent = time.monotonic()
        os.kill(pid, sig)
        return sent

    def wait(self, timeout: float) -> int:
        """unshare's exit status: its child's (a signal that killed it: negative)."""
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.argv[:3]} did not end within {timeout:g}s; last "
                                 f"output:\n{self.output(40)}") from None
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        """SIGKILL to the namespace's PID 1 (the kernel then kills every process in the
        namespace), then to unshare itself; reaps it."""
        if self._init is not None or self.running():
            with contextlib.suppress(AssertionError, ProcessLookupError, OSError):
                if self.running():
                    os.kill(self.init_pid(timeout=1), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            if self.running():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(timeout=10)
            if self.running():
                self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)


def wait_for(condition: Callable[[], bool], job: Pid1Job, what: str,
             timeout: float = 120.0) -> None:
    """Poll ``condition`` until it holds; fail if the job ends first or the timeout passes."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert job.running(), f"ended before {what}:\n{job.output(40)}"
        assert time.monotonic() < deadline, f"no {what} in {timeout:g}s:\n{job.output(40)}"
        time.sleep(0.05)
