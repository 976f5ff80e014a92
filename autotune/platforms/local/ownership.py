"""Who made something a run leaves on the host, and whether that run is still alive: the
owner record of a cgroup (``cgroups``) and of a private Prometheus' directory
(``prometheus``), so that a killed run's leftovers are removed by the next run and a live
run's never are.

The record: the maker's PID, its process start time, its PID namespace and host, and the run
lock it held (``autotune.runlock``), if any. A PID is only meaningful in its own PID namespace:
a run as PID 7 of a container makes ``...-7``, and on the host ``/proc/7`` is someone else or
nobody. So a maker in this PID namespace is alive while that very process is (PID and start
time); one in another is alive unless this process holds the run lock it held (it took the
lock before making anything and kept it until it died, and flock works across namespaces), so
the next run of that experiment, wherever it runs, removes its leftovers, and nobody else
does. Without a record (an older autotune, a lost file) the PID in the leftover's name decides.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from autotune import pids, runlock


def record(lock: runlock.RunLock | None = None, **extra: Any) -> dict[str, Any]:
    """This process's owner record (``extra``: what the caller records with it)."""
    me = os.getpid()
    identity = lock.identity if lock is not None else None
    return {"pid": me, "start": pids.start_time(me), "pidns": runlock.pid_namespace(),
            "host": socket.gethostname(), "lock": list(identity) if identity else None,
            "lock_path": str(lock.path.resolve()) if lock is not None else None, **extra}


def alive(owner: Mapping[str, Any] | None, name_pid: int) -> bool:
    """Whether the run that made a leftover is alive, from its owner record; without one,
    from ``name_pid``, the PID in the leftover's name."""
    if owner is None:
        return pids.alive(name_pid, None)
    if owner.get("pidns") == runlock.pid_namespace():
        start = owner.get("start")
        return pids.alive(int(owner.get("pid") or name_pid),
                          start if isinstance(start, str) else None)
    lock = owner.get("lock")
    return not (isinstance(lock, list) and len(lock) == 2
                and runlock.holds((int(lock[0]), int(lock[1]))))


def foreign(owner: Mapping[str, Any] | None) -> bool:
    """Made in another PID namespace (a container's run)."""
    return owner is not None and owner.get("pidns") != runlock.pid_namespace()
