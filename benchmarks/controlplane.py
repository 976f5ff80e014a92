"""What the Kubernetes tests' control plane costs: its build, its start, a test's namespace.

    python benchmarks/controlplane.py [--starts 3] [--worlds 10] [--fresh-build DIR]

- ``--fresh-build DIR``: build the binaries with empty Go caches under DIR (GOPATH, GOCACHE and
  the cache scripts/controlplane.sh writes to), as on a fresh machine: module downloads plus
  compilation; prints the seconds (the binaries are kept in DIR, not in the user's cache);
- ``--starts N``: start and stop the control plane N times (etcd, kube-apiserver, the
  controller manager, the scheduler, kwok, two nodes Ready): the per-session cost;
- ``--worlds N``: set up N test namespaces as tests/kubernetes does (RBAC, token, the api
  Deployment rolled out by the controllers) and tear them down: the per-test cost.

Prints one line per measurement and a summary; the numbers go to docs/measurements/.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.controlplane.chaos_controller import Webhooks  # noqa: E402
from tests.controlplane.cluster import ControlPlane, binaries, build  # noqa: E402
from tests.kubernetes.conftest import Plane, _cluster_role, start_world  # noqa: E402


def fresh_build(directory: Path) -> float:
    env = {**os.environ, "GOPATH": str(directory / "gopath"), "GOCACHE": str(directory / "gocache"),
           "AUTOTUNE_CACHE": str(directory / "cache"), "GOFLAGS": "-buildvcs=false"}
    started = time.monotonic()
    subprocess.run([str(ROOT / "scripts" / "controlplane.sh")], env=env, check=True)
    return time.monotonic() - started


def summary(name: str, values: list[float]) -> str:
    return (f"{name}: n={len(values)} median {statistics.median(values):.2f} s, "
            f"min {min(values):.2f} s, max {max(values):.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--worlds", type=int, default=10)
    parser.add_argument("--fresh-build", type=Path)
    args = parser.parse_args()
    if args.fresh_build is not None:
        print(f"fresh build: {fresh_build(args.fresh_build):.0f} s")
    bins = binaries() or build()
    starts = []
    for i in range(args.starts):
        with tempfile.TemporaryDirectory(prefix="autotune-cp-bench-") as tmp:
            cp = ControlPlane(bins, Path(tmp))
            try:
                cp.start()
                starts.append(cp.started_seconds)
                print(f"start {i + 1}: {cp.started_seconds:.2f} s")
                if i == args.starts - 1 and args.worlds:
                    hooks = Webhooks(cp.workdir).start(cp.admin)
                    cp.admin.apply(_cluster_role())
                    plane = Plane(cp, hooks)
                    setups = []
                    for j in range(args.worlds):
                        here = Path(tmp) / f"w{j}"
                        here.mkdir()
                        began = time.monotonic()
                        _, stop = start_world(plane, here)
                        setups.append(time.monotonic() - began)
                        stop()
                        print(f"namespace {j + 1}: {setups[-1]:.2f} s")
                    hooks.stop()
                    print(summary("a test's namespace (RBAC, token, rollout)", setups))
            finally:
                cp.stop()
    if starts:
        print(summary("control plane start", starts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
