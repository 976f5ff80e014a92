"""One run at a time on a local experiment or a simulated world: an exclusive ``flock(2)``.

Two runs of one local experiment share ``results/<name>/`` - schedtrace would read the other
run's SCHED lines in ``logs/service.log``, both would rewrite ``processes.json``, and both would
check-then-enqueue the baseline and the design into the study - and two runs of one simulated
world apply settings under each other. A cluster's Deployment has its run Lease for this
(``autotune.platforms.kubernetes.lease``); here the kernel plays the API server, with the same
semantics:

- The backends take the lock when they are built, before the study is opened, and hold it as
  long as they exist: the whole command, its final cleanup included. ``autotune cleanup``
  builds them too, so it is refused while a run holds the lock, as a live run's Lease refuses
  it on a cluster.
- A second holder is refused at once, naming the holder: PID, host, PID namespace, start time
  (UTC) and command, which the holder writes into the file once it has the lock.
- Released by the kernel when the holder exits, however it exits: a SIGKILLed run never blocks
  the next one (nothing to expire, unlike a Lease). The descriptor is close-on-exec, so what a
  killed run left running (service, load generator, stress-ng) does not keep it.
- A lock on the file, not on a PID: it holds across PID namespaces (a run as PID 1 of a
  container and one on the host sharing the results directory) and, through the NFS lock
  manager, across hosts. ``autotune.platforms.local.cgroups`` uses it as the liveness signal of
  a group made from another PID namespace.
- One process may take it again (a second ``build()`` of the same backends, ``cleanup`` after
  ``run`` in one test process); it goes when the last ``RunLock`` of the process on that file is
  released or garbage-collected.

The file is never removed: removing a lock file that another process is about to lock is the
classic way to two holders. If someone removes it between our ``open`` and our ``flock``, the
lock is taken again on the new file.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from autotune import files, redaction
from autotune.errors import TargetError

log = logging.getLogger(__name__)

Identity = tuple[int, int]
"""(st_dev, st_ino) of a lock file: the same file, whatever path names it."""


def pid_namespace() -> int | None:
    """The inode of this process's PID namespace (equal for two processes in the same one)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _command() -> str:
    """This process's command line for people, URLs cut to their scheme and the rest as
    ``redaction.argv`` shows it: ``--storage`` may carry a password (also in a malformed URL),
    and the lock file is readable by all."""
    prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if prog in ("cli.py", "__main__.py"):
        prog = "autotune"
    words = [prog, *(w.split("://", 1)[0] + "://..." if "://" in w else w
                     for w in redaction.argv(["autotune", *sys.argv[1:]])[1:])]
    return " ".join(words)[:300]


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: what it writes into the file."""

    pid: int
    host: str
    started: str
    """UTC, ISO 8601 with a Z."""
    command: str = ""
    pidns: int | None = None
    boot_id: str | None = None

    @classmethod
    def me(cls) -> Holder:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return cls(pid=os.getpid(), host=socket.gethostname(), started=now,
                   command=_command(), pidns=pid_namespace(), boot_id=boot_id())

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        try:
            raw = json.loads(text)
            return cls(pid=int(raw["pid"]), host=str(raw["host"]), started=str(raw["started"]),
                       command=str(raw.get("command") or ""), pidns=raw.get("pidns"),
                       boot_id=raw.get("boot_id"))
        except (ValueError, KeyError, TypeError):
            return None

    def text(self) -> str:
        where = f"pid {self.pid} on host {self.host}"
        if (self.boot_id is not None and self.boot_id == boot_id()
                and self.pidns not in (None, pid_namespace())):
            where += " (a pid of another PID namespace on this machine)"
        command = f": {self.command}" if self.command else ""
        return f"{where}, started {self.started}{command}"


class RunLockHeld(TargetError):
    """Another process holds the lock (exit 1, like another run's Lease on a cluster)."""

    def __init__(self, path: Path, holder: Holder | None, why: str) -> None:
        self.path, self.holder = path, holder
        who = holder.text() if holder is not None else "it has not written its name yet"
        because = f" {why}." if why else ""
        super().__init__(
            f"another autotune process holds {path} ({who}).{because} Nothing was changed: "
            "wait for it to end. A process that died let go already (the kernel releases "
            "the lock of a process that exits, even SIGKILLed), so a refusal means it is "
            "alive")


@dataclass
class _Handle:
    fd: int
    identity: Identity
    key: str
    users: int = 0


_HELD: dict[str, _Handle] = {}
"""The lock files this process holds, by real path."""


def holds(identity: Identity) -> bool:
    """This process holds the lock on the file with this identity."""
    return any(h.identity == identity for h in _HELD.values())


def _take(path: Path, why: str) -> tuple[int, Identity]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TargetError(f"cannot create {path.parent} for the run lock: "
                          f"{e.strerror or e}") from None
    for _ in range(5):
        try:
            # Never through a link planted there: the holder's line replaces the file's
            # content (review finding: a link to any file root can write was overwritten).
            fd = files.open_no_link(path, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            raise TargetError(f"cannot open the run lock {path}: {e.strerror or e}"
                              f"{files.link_hint(path)}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunLockHeld(path, Holder.parse(_read(fd)), why) from None
            except OSError as e:  # ENOLCK: a file system without locks (NFS without lockd)
                raise TargetError(f"cannot lock {path}: {e.strerror or e}") from None
            st = os.fstat(fd)
            try:
                now = os.lstat(path)
                same = (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                data = json.dumps(asdict(Holder.me()), indent=1).encode() + b"\n"
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
                return fd, (st.st_dev, st.st_ino)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # removed or replaced between open and flock: lock the file there now
    raise TargetError(f"cannot lock {path}: the file keeps being replaced")


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode(errors="replace")
    except OSError:
        return ""


class RunLock:
    """An exclusive lock on ``path`` for this process (see the module docstring).

    ``why``: the sentence a refused process reads after the holder's name (what the lock
    protects)."""

    def __init__(self, path: Path, why: str = "") -> None:
        self.path, self.why = Path(path), why
        self._handle: _Handle | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    @property
    def identity(self) -> Identity | None:
        """The locked file's (st_dev, st_ino) while held."""
        return self._handle.identity if self._handle is not None else None

    def acquire(self) -> None:
        """Take the lock (again, in the same process: no-op); ``RunLockHeld`` (exit 1) when
        another process holds it."""
        if self._handle is not None:
            return
        key = os.path.realpath(self.path)
        handle = _HELD.get(key)
        if handle is None:
            fd, identity = _take(self.path, self.why)
            handle = _HELD[key] = _Handle(fd, identity, key)
            log.debug("holding %s", self.path)
        handle.users += 1
        self._handle = handle

    def release(self) -> None:
        """Let go; the file is unlocked when no other ``RunLock`` of this process holds it."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        handle.users -= 1
        if handle.users <= 0 and _HELD.get(handle.key) is handle:
            del _HELD[handle.key]
            os.close(handle.fd)  # closing the last descriptor of the open file unlocks it

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __del__(self) -> None:
        # Not contextlib.suppress: at interpreter exit the module's globals may already be None
        # (a traceback on stderr at every exit); the kernel releases the lock then anyway.
        try:  # noqa: SIM105
            self.release()
        except Exception:
            pass
