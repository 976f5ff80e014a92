"""Helpers for the kill matrix and the storage faults: run the real CLI as a child process, watch
its progress lines, find what it left behind, and clean up after it without touching anything
that is not ours.

Ours = processes whose environment carries ``TMPDIR=<TAG_ROOT>/<tag>`` (every process autotune
starts inherits it: the service, the load generator, stress-ng, Prometheus) and cgroups named
after the round's unique experiment name (``autotune-<name>-<pid>``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TAG_VAR = "TMPDIR"
"""How a round's processes are told apart: their TMPDIR is a directory named after the round.
Not a variable of our own: autotune gives its tools (stress-ng, Prometheus, the load
generator) only PATH, HOME, TMPDIR, the locale and Go's variables, and the service everything
but AUTOTUNE_*; TMPDIR reaches every process it starts."""
TAG_ROOT = Path("/tmp/autotune-fault-tags")


def tag_env(tag: str) -> dict[str, str]:
    """The environment entry that tags a round's processes (its directory is created)."""
    directory = TAG_ROOT / tag
    directory.mkdir(parents=True, exist_ok=True)
    return {TAG_VAR: str(directory)}
CGROUP_ROOT = Path("/sys/fs/cgroup")
AUTOTUNE = [sys.executable, "-m", "autotune.cli"]

PHASE_RE = re.compile(r"DEBUG\s+phase (\w+)")
TRIAL_RE = re.compile(r"INFO trial (\d+) \[(\w+)\]")
FINISHED_RE = re.compile(r"(?:INFO|WARNING) trial (\d+) (COMPLETE|FAIL)")
NOISE = ("DEBUG http://", "DEBUG Starting new HTTP", "DEBUG Resetting dropped")


# --- processes and cgroups of ours ----------------------------------------------------------

@dataclass(frozen=True)
class Proc:
    pid: int
    role: str
    cmd: str

    def __str__(self) -> str:
        return f"{self.role}:{self.pid}"


def _role(argv: Sequence[str]) -> str:
    if not argv:
        return "?"
    exe = Path(argv[0]).name
    joined = " ".join(argv[:4])
    if exe == "stress-ng" or exe.startswith("stress-ng"):
        # `stress-ng --version` is the run's preflight (local doctor), before any trial: not
        # stress. CI caught the SIGTERM test taking it for a stressed window.
        return "stress-ng-probe" if "--version" in argv else "stress-ng"
    if exe.startswith("demo-"):
        return "service"
    if exe.startswith("loadgen-"):
        return "loadgen"
    if exe == "prometheus":
        return "prometheus"
    if "autotune" in joined:
        return "autotune"
    return exe


def _stat_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def tagged(tag: str) -> list[Proc]:
    """Live (non-zombie) processes whose environment has ``TMPDIR=<TAG_ROOT>/<tag>``; a tag
    ending in ``*`` matches every tag with that prefix."""
    prefix = tag.endswith("*")
    needle = f"{TAG_VAR}={TAG_ROOT / tag.rstrip('*')}".encode()
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            argv = [a.decode(errors="replace")
                    for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if not any(v == needle or (prefix and v.startswith(needle)) for v in env):
            continue
        if _stat_state(int(entry.name)) in (None, "Z", "X"):
            continue
        found.append(Proc(int(entry.name), _role(argv), " ".join(argv)[:160]))
    return sorted(found, key=lambda p: p.pid)


def cgroup_roots() -> list[Path]:
    roots = [p for p in CGROUP_ROOT.iterdir() if p.is_dir()] if CGROUP_ROOT.is_dir() else []
    return [CGROUP_ROOT, *roots]


def our_cgroups(exp_name: str) -> list[Path]:
    """Directories ``autotune-<exp_name>-<pid>`` in every cgroup hierarchy (v1 and v2)."""
    out: list[Path] = []
    pattern = re.compile(rf"^autotune-{re.escape(exp_name)}-\d+$")
    for root in cgroup_roots():
        with contextlib.suppress(OSError):
            out += [p for p in root.iterdir() if p.is_dir() and pattern.match(p.name)]
    return sorted(out)


def registry_alive(results: Path) -> list[str]:
    """Entries of ``processes.json`` whose process still runs (same PID and start time)."""
    from autotune.pids import alive

    path = results / "processes.json"
    try:
        entries = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return []
    return [f"{e['role']}:{e['pid']}" for e in entries if alive(e["pid"], e.get("started"))]


@dataclass
class Leftovers:
    processes: list[Proc] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)
    registry: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.cgroups or self.registry)

    def by_role(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.processes:
            out[p.role] = out.get(p.role, 0) + 1
        if self.cgroups:
            out["cgroup"] = len(self.cgroups)
        return out

    def __str__(self) -> str:
        if not self:
            return "none"
        parts = [", ".join(str(p) for p in self.processes)]
        parts += [", ".join(str(c) for c in self.cgroups)]
        if self.registry:
            parts.append("registry " + ", ".join(self.registry))
        return "; ".join(x for x in parts if x)


def leftovers(tag: str, exp_name: str, results: Path) -> Leftovers:
    return Leftovers(tagged(tag), our_cgroups(exp_name), registry_alive(results))


def wait_no_leftovers(tag: str, exp_name: str, results: Path, timeout: float = 5.0) -> Leftovers:
    """Leftovers, allowing processes a moment to finish exiting (SIGTERM already sent)."""
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(tag, exp_name, results)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def force_cleanup(tag: str, exp_name: str) -> list[str]:
    """Last resort, in ``finally``: SIGKILL every process carrying our tag (checked again just
    before the kill) and remove our cgroups. Returns what it had to do."""
    done = []
    for p in tagged(tag):
        if p in tagged(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
            done.append(f"killed {p}")
    deadline = time.monotonic() + 5
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    for group in our_cgroups(exp_name):
        children = sorted((c for c in group.rglob("*") if c.is_dir()),
                          key=lambda c: -len(c.parts))
        for path in [*children, group]:
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
        done.append(f"removed cgroup {group}")
    return done


# --- the CLI as a child process, with its output watched ------------------------------------

class Run:
    """``autotune <args>`` in ``cwd``, tagged, output (stdout+stderr) read by a thread and
    time-stamped (monotonic) so the phase at any moment can be told afterwards."""

    def __init__(self, args: Sequence[str], cwd: Path, tag: str,
                 env: dict[str, str] | None = None) -> None:
        full = dict(os.environ if env is None else env)
        full.update(tag_env(tag))
        full["PYTHONUNBUFFERED"] = "1"
        full.pop("AUTOTUNE_STORAGE", None)
        self.args = list(args)
        self.started = time.monotonic()
        self.popen = subprocess.Popen([*AUTOTUNE, *args], cwd=cwd, env=full,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.popen.pid
        self.caught: bool | None = None
        self.lines: list[tuple[float, str]] = []
        self.tail: deque[str] = deque(maxlen=60)
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if any(n in line for n in NOISE):
                continue
            with self._cond:
                self.lines.append((time.monotonic(), line))
                self.tail.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, pred: Callable[[str], bool], start: int = 0,
                  timeout: float = 60.0) -> int | None:
        """Index of the first line at or after ``start`` matching ``pred``; None if the
        process ended (or the timeout passed) first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(start, len(self.lines)):
                    if pred(self.lines[i][1]):
                        return i
                start = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (not self._reader.is_alive() and start == len(self.lines)):
                    return None
                self._cond.wait(min(left, 0.2))

    def send(self, sig: int) -> float:
        """Signal the autotune process itself (its children have their own groups). Whether it
        had a handler for ``sig`` installed the moment before, or had exited (None), is kept in
        ``caught``: the phase read from its output cannot say, since lines reach the reader
        thread late (a run that had finished and exited looked killed in its last "read")."""
        self.caught = catches(self.pid, sig)
        t = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        return t

    def wait(self, timeout: float = 120.0) -> int:
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)
            raise AssertionError(f"autotune {' '.join(self.args)} did not end in {timeout:g}s; "
                                 f"last output:\n{self.output()}") from None
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=10)

    def phase_at(self, t: float) -> str:
        """``<kind>#<number>/<phase>`` at monotonic time ``t`` (from the lines read by then):
        ``startup`` before the first trial, ``.../done`` after a trial's end line."""
        where, phase = "", "startup"
        for when, line in self.lines:
            if when > t:
                break
            if m := TRIAL_RE.search(line):
                where, phase = f"{m.group(2)}#{m.group(1)}", "start"
            elif m := PHASE_RE.search(line):
                phase = m.group(1)
            elif FINISHED_RE.search(line):
                phase = "done"
        return f"{where}/{phase}" if where else phase

    def output(self, lines: int = 40) -> str:
        return "\n".join(list(self.tail)[-lines:])


def catches(pid: int, sig: int) -> bool | None:
    """Whether process ``pid`` runs a handler of its own for ``sig`` now (the kernel's
    /proc/<pid>/status SigCgt mask, proc(5)); None once it has exited (a zombie not yet reaped,
    or gone): a signal then changes nothing."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields.get("State", "").strip().startswith(("Z", "X")):
        return None
    return bool(int(fields["SigCgt"].strip(), 16) >> (sig - 1) & 1)


def run_cli(args: Sequence[str], cwd: Path, tag: str, timeout: float = 120.0,
            env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """Run ``autotune <args>`` to completion: (exit code, output, seconds)."""
    r = Run(args, cwd, tag, env)
    code = r.wait(timeout)
    return code, "\n".join(line for _, line in r.lines), time.monotonic() - r.started


# --- the study as stored --------------------------------------------------------------------

def trial_states(url: str, name: str) -> dict[tuple[str, int], tuple[str, Any]]:
    """(study, number) -> (state, values) for the search study and its reference study;
    empty if the storage or the study does not exist yet."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return {}
    out: dict[tuple[str, int], tuple[str, Any]] = {}
    for study_name, key in ((name, "search"), (name + ":reference", "reference")):
        try:
            study = optuna.load_study(study_name=study_name, storage=url)
        except KeyError:
            continue
        for t in study.get_trials(deepcopy=False):
            out[(key, t.number)] = (t.state.name, t.values)
    return out


def journal_complete(results: Path) -> set[tuple[str, int]]:
    """(study, number) of the journal's COMPLETE records (baseline -> reference study)."""
    path = results / "trials.jsonl"
    out: set[tuple[str, int]] = set()
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            rec = json.loads(line)
            if rec.get("state") == "COMPLETE":
                key = "search" if rec.get("kind", "search") == "search" else "reference"
                out.add((key, int(rec["number"])))
    return out


def count(states: dict[tuple[str, int], tuple[str, Any]], state: str,
          study: str | None = None) -> int:
    return sum(1 for (s, _), (st, _) in states.items()
               if st == state and (study is None or s == study))


# --- mounts (storage faults) ----------------------------------------------------------------

def mount_tmpfs(path: Path, options: str) -> str | None:
    """Mount a tmpfs with ``options`` on ``path``; None if done, else why not."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"mount not possible: {e}"
    if done.returncode != 0:
        return f"mount -t tmpfs -o {options} not permitted: {done.stderr.strip()}"
    return None


def remount(path: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True,
                   capture_output=True, timeout=20)


def unmount(path: Path) -> None:
    for _ in range(20):
        done = subprocess.run(["umount", str(path)], capture_output=True, text=True, timeout=20)
        if done.returncode == 0 or "not mounted" in done.stderr:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=20)


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs on ``path`` for the block (skips the test if mounting is not permitted)."""
    import pytest

    why = mount_tmpfs(path, options)
    if why is not None:
        pytest.skip(why)
    try:
        yield path
    finally:
        unmount(path)


def short_study(name: str, trials: int = 1) -> dict[str, Any]:
    """A short local study of the demo (the first stressed window ~8 s after the start): the
    kill matrix's and the PID 1 test's."""
    return {
        "name": name,
        "target": {"local": {"workload": "demo", "cpus": 1.0,
                             "load": {"rate": 100, "connections": 8}}},
        "parameters": [{"name": "GOMAXPROCS", "type": "int", "values": [1, 2, 4]},
                       {"name": "GOGC", "type": "int", "values": [100, 400]}],
        "baseline": {"repeats": 1, "params": {"GOMAXPROCS": None, "GOGC": None}},
        "chaos": {"stress": {"workers": 1, "load": 25}},
        "measure": {"warmup": "1s", "window": "2s", "noise_guard": {"enabled": False}},
        "prometheus": {"scrape_interval": "500ms"},
        "metrics": {
            "p99_latency": {"query": "histogram_quantile(0.99, sum by (le) (rate("
                            "loadgen_request_duration_seconds_bucket{ {{selector}} }"
                            "[{{window}}])))"},
            "error_rate": {"query": 'sum(rate(loadgen_requests_total{ {{selector}}, '
                           'outcome!="ok" }[{{window}}])) / sum(rate(loadgen_requests_total{ '
                           "{{selector}} }[{{window}}]))"},
        },
        "objective": {"minimize": "p99_latency"},
        "constraints": ["error_rate <= 0.5"],
        "study": {"trials": trials, "sampler": "random", "seed": 3},
    }
