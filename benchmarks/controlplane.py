"""What the Kubernetes tests' control plane costs: its build, its start, a test's namespace.

    python benchmarks/controlplane.py [--starts 3] [--worlds 10] [--fresh-build DIR]

- ``--fresh-build DIR``: build the binaries with empty Go caches under DIR (GOPATH, GOCACHE and
  the cache scripts/controlplane.sh writes to), as on a fresh machine: module downloads plus
  compilation; prints the seconds (the binaries are kept in DIR, not in the user's cache);
- ``--starts N``: start and stop the control plane N times (etcd, kube-apiserver, the
  controller manager, the scheduler, kwok, two nodes Ready): the per-session cost;
- ``--worlds N``: set up N test namespaces as tests/kubernetes does (RBAC, token, the api
  Deployment rolled out by the controllers) and tear them down: the per-test cost.
- ``--pool N``: a 12-trial study (``tests/kubernetes/test_pool.py``'s experiment: 4 s windows
  fast-forwarded by each member's clock, rollouts and StressChaos in real time) on one Deployment,
  then on a pool of N Deployments in N namespaces; prints each run's time to the end of the
  search (the slowest member's clock: real time plus its fast-forwarded waits), the sum of the
  trials' own times, what each member measured, and whether every namespace ends pristine.

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
from collections import Counter
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


def namespaces(plane: Plane, tmp: Path, n: int) -> None:
    setups = []
    for j in range(n):
        here = tmp / f"w{j}"
        here.mkdir()
        began = time.monotonic()
        _, stop = start_world(plane, here)
        setups.append(time.monotonic() - began)
        stop()
        print(f"namespace {j + 1}: {setups[-1]:.2f} s")
    print(summary("a test's namespace (RBAC, token, rollout)", setups))


def pool_runs(plane: Plane, tmp: Path, members: int) -> None:
    from autotune.study.loop import RunResult
    from tests.kubernetes.test_pool import pool_experiment, run_pool
    from tests.kubernetes.test_study import run

    worlds, stops = [], []
    try:
        for i in range(members):
            (tmp / f"p{i}").mkdir()
            w, stop = start_world(plane, tmp / f"p{i}")
            worlds.append(w)
            stops.append(stop)
        single = pool_experiment(worlds[:1], trials=12)  # the same experiment, no pool
        began = worlds[0].clock.monotonic()
        outcome, records = run(worlds[0], single, worlds[0].backends(single))
        assert isinstance(outcome, RunResult), outcome
        print(f"1 Deployment: {worlds[0].clock.monotonic() - began:.1f} s to the end of the "
              f"search; {len(records)} trials, their own times sum to "
              f"{sum(r['seconds'] for r in records):.1f} s")
        worlds[0].assert_pristine()
        exp = pool_experiment(worlds, trials=12)
        starts = [w.clock.monotonic() for w in worlds]
        outcome, records, _ = run_pool(worlds, exp, tmp / "pool.db")
        assert isinstance(outcome, RunResult), outcome
        spans = [w.clock.monotonic() - s for w, s in zip(worlds, starts, strict=True)]
        total = sum(r["seconds"] for r in records)
        per = Counter(r["member"].split("/")[0] for r in records
                                 if r["kind"] == "search" and r["state"] == "COMPLETE")
        print(f"pool of {members}: {max(spans):.1f} s to the end of the search (members "
              f"{', '.join(f'{x:.1f}' for x in spans)} s); {len(records)} trials "
              f"({sum(r['kind'] == 'baseline' for r in records)} baseline), their own times "
              f"sum to {total:.1f} s: {max(spans) / total:.2f} of it; search trials per member "
              f"{sorted(per.values())}; failed {sum(r['state'] == 'FAIL' for r in records)}")
        for w in worlds:
            w.assert_pristine()
        print("every namespace pristine: no StressChaos, env as found, no annotation, no Lease")
    finally:
        for stop in stops:
            stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--worlds", type=int, default=10)
    parser.add_argument("--fresh-build", type=Path)
    parser.add_argument("--pool", type=int, default=0)
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
                if i == args.starts - 1 and (args.worlds or args.pool):
                    hooks = Webhooks(cp.workdir).start(cp.admin)
                    try:
                        cp.admin.apply(_cluster_role())
                        plane = Plane(cp, hooks)
                        if args.worlds:
                            namespaces(plane, Path(tmp), args.worlds)
                        if args.pool:
                            pool_runs(plane, Path(tmp), args.pool)
                    finally:
                        hooks.stop()
            finally:
                cp.stop()
    if starts:
        print(summary("control plane start", starts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
