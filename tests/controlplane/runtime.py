"""What a container runtime writes for the kubelet, for kwok's pods: the containers' logs.

kwok runs no container, but it serves ``pods/log`` through its kubelet endpoint from a file named
by a ``Logs`` object (kwok.x-k8s.io/v1alpha1), read with the kubelet's own CRI log reader
(k8s.io/cri-client/pkg/logs ReadLogs: ``sinceSeconds``, ``limitBytes``, ``timestamps``, only
the current file). This module writes those files in the CRI format
(``<RFC3339Nano> <stream> F <line>``) for the pods of one namespace, as a Go service would
print: its own line every second on stdout and, when its env has ``GODEBUG=...schedtrace=<ms>``,
the runtime's ``SCHED <t>ms: ...`` lines on stderr every <ms>, taken from a real go1.25
recording. Lines are stamped on the test's clock and written as that clock advances
(``tick()``), so a fast-forwarded window has its lines when autotune reads them.

Knobs: ``runnable[pod]`` overwrites the global run queue of a pod's SCHED lines; ``chatter[pod]``
adds that many bytes of the program's own logging per second (a log larger than the kubelet's
``limitBytes``); ``rotate(pod)`` rotates the file as the kubelet does (the old one renamed, a
new one started: the kubelet then serves only the new one).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.controlplane.cluster import Admin, ApiFailure

Obj = dict[str, Any]
CHUNK = 8192  # bytes of one chatty line (the runtime splits lines over 16 KiB)
RECORDED = Path(__file__).resolve().parents[1] / "data" / "schedtrace" / "go1.25.5.txt"


@functools.cache
def recorded_sched() -> list[str]:
    """The bodies (after ``SCHED <t>ms: ``) of a real go1.25 schedtrace recording, its idle
    phases (empty global queue): a service at ease, until ``runnable`` says otherwise."""
    return [line.split(": ", 1)[1] for line in RECORDED.read_text().splitlines()
            if line.startswith("SCHED ") and " runqueue=0 " in line]


def _epoch(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def cri_stamp(at: float) -> str:
    """RFC3339Nano as the CRI log format writes it (trailing zeros of the fraction cut)."""
    seconds, nanos = divmod(round(at * 1e9), 1_000_000_000)
    fraction = f"{nanos:09d}".rstrip("0")
    head = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{head}{'.' + fraction if fraction else ''}Z"


def schedtrace_period(container: Obj) -> int | None:
    godebug = next((str(e.get("value", "")) for e in container.get("env") or []
                    if e.get("name") == "GODEBUG"), "")
    for item in godebug.split(","):
        key, _, value = item.partition("=")
        if key == "schedtrace" and value.isdigit() and int(value) > 0:
            return int(value)
    return None


class Logs:
    """The log files of the pods of ``namespace`` (see the module doc)."""

    def __init__(self, admin: Admin, namespace: str, directory: Path,
                 now: Callable[[], float]) -> None:
        self.admin, self.namespace, self.now = admin, namespace, now
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.runnable: dict[str, int] = {}
        self.chatter: dict[str, int] = {}
        self._started: dict[str, float] = {}
        self._written: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def path(self, pod: str, container: str) -> Path:
        return self.directory / f"{pod}_{container}.log"

    def tick(self) -> None:
        """Write every running container's lines up to the clock's now."""
        with self._lock:
            try:
                pods = self.admin.list(f"/api/v1/namespaces/{self.namespace}/pods")
            except ApiFailure:
                return
            now = self.now()
            for pod in pods:
                if pod.get("status", {}).get("phase") != "Running" or pod["metadata"].get(
                        "deletionTimestamp"):
                    continue
                name = pod["metadata"]["name"]
                started = self._started.setdefault(name, self._start_of(pod, now))
                if not any((name, c["name"]) in self._written
                           for c in pod["spec"]["containers"]):
                    self._register(pod)
                for container in pod["spec"]["containers"]:
                    self._write(name, container, started, now)

    def _start_of(self, pod: Obj, now: float) -> float:
        """When the container started, on the test's clock: it has been up as long (in real
        time) as kwok's startedAt says, counted back from the clock's now."""
        statuses = pod.get("status", {}).get("containerStatuses") or []
        stamps = [((s.get("state") or {}).get("running") or {}).get("startedAt")
                  for s in statuses]
        known = [_epoch(t) for t in stamps if t]
        if not known:
            return now
        return now - max(0.0, time.time() - min(known))

    def _register(self, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"logs": [{"containers": [c["name"]],
                                   "logsFile": str(self.path(name, c["name"]))}
                                  for c in pod["spec"]["containers"]]}}
        try:
            self.admin.create(f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{self.namespace}/logs",
                              body)
        except ApiFailure as e:
            if e.status != 409:
                raise
        for c in pod["spec"]["containers"]:
            self.path(name, c["name"]).touch()
            self._written.setdefault((name, c["name"]), self._started[name])
        # kwok learns of the Logs object through its watch: wait until it serves the log.
        first = pod["spec"]["containers"][0]["name"]
        self.admin.wait_for(lambda: self._served(name, first), 10, f"kwok to serve {name}'s log")

    def _served(self, pod: str, container: str) -> bool:
        try:
            self.admin.request("GET", f"/api/v1/namespaces/{self.namespace}/pods/{pod}/log",
                               params={"container": container, "limitBytes": "1"})
        except ApiFailure:
            return False
        return True

    def _write(self, pod: str, container: Obj, started: float, now: float) -> None:
        key = (pod, container["name"])
        since = self._written.get(key, started)
        if now <= since:
            return
        lines: list[tuple[float, str, str]] = []
        for k in range(int(since - started) + 1, int(now - started) + 1):
            at = started + k
            lines.append((at, "stdout", f'level=info msg="served" n={k}'))
            extra = self.chatter.get(pod, 0)
            for j in range(extra // CHUNK):  # a chatty program: many lines, none over 16 KiB
                lines.append((at + j * 1e-6, "stdout", "level=debug msg=" + "x" * CHUNK))
        period = schedtrace_period(container)
        if period is not None:
            recorded = recorded_sched()
            first = int((since - started) * 1000 // period) + 1
            last = int((now - started) * 1000 // period)
            for k in range(max(0, first), last + 1):
                body = recorded[k % len(recorded)]
                runnable = self.runnable.get(pod)
                if runnable is not None:
                    body = re.sub(r"runqueue=\d+", f"runqueue={runnable}", body)
                lines.append((started + k * period / 1000, "stderr",
                              f"SCHED {k * period}ms: {body}"))
        lines.sort()
        with self.path(pod, container["name"]).open("a") as out:
            out.writelines(f"{cri_stamp(at)} {stream} F {text}\n" for at, stream, text in lines)
        self._written[key] = now

    def rotate(self, pod: str, container: str) -> None:
        """As the kubelet's log rotation: the current file becomes .1, a new one starts."""
        with self._lock:
            path = self.path(pod, container)
            path.rename(path.with_suffix(".log.1"))
            path.touch()
