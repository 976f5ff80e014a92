"""Child processes: the only module that imports ``subprocess``.

Every process we start gets its own process group, is recorded (PID, process start time, role)
in a registry file under the results directory, and is stopped by PID: SIGTERM to its group,
then SIGKILL after a grace period. The registry lets a later run or ``autotune cleanup`` stop
what a killed run (SIGKILL, OOM, power loss of the terminal) left behind, without ever touching
a process that merely reuses an old PID.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from autotune import files, redaction
from autotune.clock import Clock, SystemClock, wait_until
from autotune.errors import PrerequisiteError, TargetError
from autotune.pids import alive, start_time
from autotune.study.interrupts import deliver_pending, shielded

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    pid: int
    started: str | None
    role: str
    argv: tuple[str, ...]
    """For people (messages, processes.json): as ``redaction.argv`` shows it, never a secret."""
    owner: int = 0
    owner_started: str | None = None
    mark: str | None = None
    """The ``MARK_VAR`` value its process (and every process it forked) has in its environment;
    None in a record of a version before it."""

    def orphaned(self) -> bool:
        """The autotune process that started it is gone (so nobody will stop it but us)."""
        return not alive(self.owner, self.owner_started)


class Registry:
    """A JSON file of the processes a study started and has not yet stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> list[Entry]:
        try:
            raw = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return []
        return [Entry(e["pid"], e["started"], e["role"], tuple(e["argv"]), e.get("owner", 0),
                      e.get("owner_started"), e.get("mark")) for e in raw]

    def _save(self, entries: list[Entry]) -> None:
        # One writer per experiment (the run lock, autotune.runlock); through a temporary file
        # of a random name, never through a link planted there (review finding: the name was
        # .processes.json.<pid>.tmp, written through a link to any file root can write).
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            files.replace(self.path, json.dumps([e.__dict__ for e in entries], indent=1))
        except OSError as e:
            raise TargetError(f"cannot record the processes autotune started in {self.path}: "
                              f"{e.strerror or e} (a full disk?)") from e

    def add(self, entry: Entry) -> None:
        self._save([*self._load(), entry])

    def remove(self, pid: int) -> None:
        self._save([e for e in self._load() if e.pid != pid])

    def entries(self) -> list[Entry]:
        return self._load()

    def stop_leftovers(self, grace: float = 5.0, roles: Sequence[str] | None = None,
                       clock: Clock | None = None) -> list[str]:
        """Stop the recorded process groups (of ``roles``, or all) whose autotune owner died;
        forget those gone. One still running after SIGKILL stays recorded, and is said; so is
        one whose members lack its mark (``_judged``): neither killed nor forgotten."""
        done = []
        for e in self._load():
            if (roles is not None and e.role not in roles) or not e.orphaned():
                continue  # a live run (perhaps another worker) still owns it
            judged = _judged(e)
            what = f"{e.role} (pid {e.pid}: {' '.join(e.argv[:3])} ...)"
            if judged == "unsure":
                done.append(f"{what} not stopped: process group {e.pid} has members, none with "
                            f"this run's mark ({MARK_VAR}): a process of ours that cleared its "
                            "environment, or a stranger's group that took the number since. "
                            f"Check `ps -o pid,stat,cmd -g {e.pid}`; it stays recorded")
                continue
            if judged == "ours":
                if stop_pids([e.pid], grace, clock):
                    done.append(f"{what} still running after SIGKILL: stop it by hand, "
                                f"`ps -o pid,stat,cmd -g {e.pid}`")
                    continue
                done.append(what)
            self.remove(e.pid)
        return done


MARK_VAR = "AUTOTUNE_PROCESS_GROUP"
"""Set, to a random value of its own, in the environment of every process ``start`` starts; its
children inherit it. A dead run's group whose leader is gone is ours if a member carries it."""


def _judged(e: Entry) -> str:
    """A dead run's recorded group: "ours" (its leader alive, the same process by its start
    time; or gone, with members of which one carries the entry's mark), "gone" (no member, or
    a stranger leads a group of that number), or "unsure" (members, none with the mark).

    Once the leader is gone the group's ID stays reserved only while a member lives; once none
    does, the kernel may give the number to a new process, which leads a group of that number
    if it starts one (a member that *is* the number is such a stranger), or, if it called
    setsid(), forked and exited (a daemon), leaves a group whose leader is gone: review
    finding, taken for the dead run's orphans and killed. Hence the mark; a member without it
    may still be ours (``env -i``, a process title written over its environment), so such a
    group is said, not killed nor forgotten. A record without a mark (an older version's) is
    judged as before: ours."""
    if alive(e.pid, e.started):
        return "ours"
    members = group_members(e.pid)
    if not members or e.pid in members:
        return "gone"
    if e.mark is None or any(_carries(pid, e.mark) for pid in members):
        return "ours"
    return "unsure"


def _orphans_left(pgid: int) -> bool:
    """Within a live run: the group's leader, reaped by us, is gone and members of its group
    are left. They keep the number reserved, and only processes of our session could have
    joined it: ours (a member that *is* the number leads a new group: a stranger's)."""
    members = group_members(pgid)
    return bool(members) and pgid not in members


def _carries(pid: int, mark: str) -> bool:
    """``pid``'s environment (as it was at its exec) holds ``MARK_VAR=mark``; False when it
    cannot be read (another user's process)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARK_VAR}={mark}".encode() in environ.split(b"\0")


POLL = 0.01
"""Seconds between checks while waiting for a process group to end."""


def stop_pid(pid: int, grace: float = 5.0, clock: Clock | None = None) -> bool:
    """SIGTERM the process group led by ``pid``, SIGKILL after ``grace``. True if it stopped."""
    return not stop_pids([pid], grace, clock)


def stop_pids(pids: Sequence[int], grace: float = 5.0, clock: Clock | None = None) -> list[int]:
    """Stop several process groups at once (SIGTERM to all, wait, SIGKILL to those left).

    Returns the groups still alive afterwards (empty when all stopped).
    """
    clock = clock or SystemClock()
    left = list(pids)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in left:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass
            except PermissionError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

        def gone() -> bool:
            nonlocal left
            for pid in left:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            left = [pid for pid in left if _group_exists(pid)]
            return not left

        if wait_until(clock, gone, wait, POLL):
            return []
    return left


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A group whose only members are zombies still answers; look for a live member.
    return bool(group_members(pgid))


def group_members(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


class Process:
    """A started child process, tracked in a registry until stopped."""

    def __init__(self, popen: subprocess.Popen[bytes], role: str, registry: Registry | None,
                 log_path: Path | None) -> None:
        self.popen, self.role, self.registry, self.log_path = popen, role, registry, log_path
        self.pid = popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        # Shown in errors, recorded as a trial's failure: a service that prints its database
        # URL or a password= at start must not put it there.
        return redaction.output("\n".join(text[-lines:]))

    def stop(self, grace: float = 5.0, clock: Clock | None = None) -> None:
        stop_all([self], grace, clock)


def group_is_ours(p: Process) -> bool:
    """Whether ``p``'s process group may still be signalled: its leader not reaped yet (the PID
    cannot be anyone else's), or, reaped (``running()`` collects it), members of it left."""
    return p.popen.poll() is None or _orphans_left(p.pid)


def stop_all(processes: Sequence[Process], grace: float = 5.0, clock: Clock | None = None) -> None:
    """Stop these processes' groups together (one grace period for all, not one each), reap
    them and forget them in their registry; one that survives a SIGKILL (not ours to kill: a
    ``sudo`` inside the command; stuck in the kernel) stays in the registry, for the next
    run's or ``autotune cleanup``'s start-up cleanup, and is logged."""
    left = set(stop_pids([p.pid for p in processes if group_is_ours(p)], grace, clock))
    for p in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.popen.wait(timeout=1)
        if p.pid in left:
            log.error("%s (process group %d) is still running after SIGTERM and SIGKILL; "
                      "it stays recorded for the next cleanup", p.role, p.pid)
        elif p.registry is not None:
            try:
                p.registry.remove(p.pid)
            except TargetError as e:  # stopped all the same: the next cleanup drops its entry
                log.warning("%s stopped; %s", p.role, e)


def _join_cgroups(procs_files: Sequence[str]) -> Callable[[], None]:
    def join() -> None:
        # Runs in the child between fork and exec, so every process it forks stays inside.
        for path in procs_files:
            with open(path, "w") as f:
                f.write(str(os.getpid()))

    return join


def _popen(argv: Sequence[str], role: str, env: Mapping[str, str] | None,
           cwd: str | Path | None, out: IO[bytes] | int,
           preexec: Callable[[], None] | None) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            list(argv), env=dict(env) if env is not None else None, cwd=cwd,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=preexec,
        )
    except FileNotFoundError:
        raise PrerequisiteError(f"{role}: program not found: {argv[0]}") from None
    except (PermissionError, subprocess.SubprocessError, OSError) as e:
        raise PrerequisiteError(f"{role}: cannot start {argv[0]}: {e}") from None
    finally:
        if not isinstance(out, int):
            out.close()


def _discard(popen: subprocess.Popen[bytes]) -> None:
    stop_pids([popen.pid], grace=1.0)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=1)


def start(
    argv: Sequence[str],
    *,
    role: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    registry: Registry | None = None,
    log_path: Path | None = None,
    cgroup_procs: Sequence[str] = (),
    cpus: set[int] | None = None,
) -> Process:
    """Start ``argv`` (no shell) in a new process group, optionally inside cgroups or pinned."""
    out: IO[bytes] | int = subprocess.DEVNULL
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:  # appended to, never through a link planted in the results directory
            out = os.fdopen(files.open_no_link(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                                               0o666), "ab")
        except OSError as e:
            raise PrerequisiteError(f"{role}: cannot open its log {log_path}: "
                                    f"{e.strerror or e}{files.link_hint(log_path)}") from None
    preexec: Callable[[], None] | None = None
    if cgroup_procs:
        preexec = _join_cgroups(cgroup_procs)
    elif cpus:
        pinned = set(cpus)

        def preexec() -> None:
            os.sched_setaffinity(0, pinned)

    # A signal while the child starts (Popen waits for its exec while it joins the cgroups)
    # or before it is recorded would leave a process nobody knows of: it waits until both are
    # done, then the process is stopped and the interrupt raised.
    mark = secrets.token_hex(8)
    marked = {**(os.environ if env is None else env), MARK_VAR: mark}
    with shielded(deliver=False):
        popen = _popen(argv, role, marked, cwd, out, preexec)
        if registry is not None:
            me = os.getpid()
            try:
                registry.add(Entry(popen.pid, start_time(popen.pid), role,
                                   tuple(redaction.argv(argv)), me, start_time(me), mark))
            except BaseException:
                # The registry cannot be written: a process nobody recorded could not be
                # stopped by a later run or `autotune cleanup`, so it does not stay.
                _discard(popen)
                raise
    try:
        deliver_pending()
    except BaseException:
        _discard(popen)
        if registry is not None:
            with contextlib.suppress(TargetError):
                registry.remove(popen.pid)
        raise
    log.debug("started %s pid %d: %s", role, popen.pid, " ".join(redaction.argv(argv)))
    return Process(popen, role, registry, log_path)


def find_binary(name: str, env_var: str, package: str) -> str:
    """``$env_var`` if set, else ``name`` on PATH; else say how to install it."""
    import shutil

    found = os.environ.get(env_var) or shutil.which(name)
    if not found:
        raise PrerequisiteError(f"{name} not found: apt-get install {package} "
                                f"(or set {env_var} to the binary)")
    return found


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None, timeout: float = 600.0) -> tuple[int, str]:
    """Run a short command to completion; return (exit code, combined output)."""
    try:
        done = subprocess.run(
            list(argv), env=dict(env) if env is not None else None, cwd=cwd,
            stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False,
        )
    except FileNotFoundError:
        raise PrerequisiteError(f"program not found: {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise PrerequisiteError(f"{argv[0]} did not finish in {timeout:g}s") from None
    return done.returncode, (done.stdout + done.stderr).decode(errors="replace")


def describe(entries: list[Entry]) -> list[dict[str, Any]]:
    return [{"pid": e.pid, "role": e.role} for e in entries]
