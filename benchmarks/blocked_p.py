"""Which P-blocking goroutine can a Go service survive by raising GOMAXPROCS?

    python benchmarks/blocked_p.py --repeats 3 --out docs/measurements/blocked-p-DATE.txt

Runs ``autotune/workloads/cmd/heldp`` (open-loop requests of ``--work`` CPU every ``--every``,
next to one goroutine of each mode: none; a ``LockOSThread`` tight loop; a held P, the
``blockedp`` package the demo's ``/debug/chaos/blocked-p`` injects) at each GOMAXPROCS, and
prints the median over repeats of the requests' p99 and of the runtime's scheduling-latency
p99. Each run is its own process; the cells run in a shuffled order (seeded) so a drift of the
host does not favour one mode.

What to read: a held P takes no CPU, only the P, so with one held half the time the requests
have GOMAXPROCS-1 Ps half the time, and one P more gives it back; a spinning goroutine is
preempted every 10 ms and takes CPU, not a P: more Ps only shrink its share of the host's CPUs
(the OS shares them between threads), as they would against any CPU hog. Measure on a quiet
host: a busy one (say a CI run next to it) shows the host's noise, not the modes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from autotune.platforms.local import gobuild

MODES = ("none", "spin", "held")


def run(binary: Path, mode: str, procs: int, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "GOMAXPROCS": str(procs)}
    cmd = [str(binary), "-mode", mode, "-n", "1", "-for", f"{args.seconds}s",
           "-every", args.every, "-work", args.work, "-hold", args.hold, "-gap", args.gap]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.seconds + 60,
                         check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", default="1,2,3,4", help="GOMAXPROCS values")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--every", default="1ms")
    ap.add_argument("--work", default="1200us", help="CPU per request (1.2 ms every 1 ms: "
                                                     "1.2 CPUs, more than one P)")
    ap.add_argument("--hold", default="20ms")
    ap.add_argument("--gap", default="20ms")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    binary = gobuild.build("heldp")
    procs = [int(p) for p in args.procs.split(",")]
    cells = list(itertools.product(MODES, procs)) * args.repeats
    random.Random(args.seed).shuffle(cells)
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    began = time.time()
    for mode, p in cells:
        results.setdefault((mode, p), []).append(run(binary, mode, p, args))
    lines = [
        f"# benchmarks/blocked_p.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(began))}",
        f"# host: {os.cpu_count()} CPUs; {sys.platform}; runs: {len(cells)} "
        f"({args.repeats} per cell, shuffled, seed {args.seed}), {args.seconds}s each",
        f"# requests: {args.work} of CPU every {args.every} (open loop); one goroutine per mode;"
        f" held: hold {args.hold}, gap {args.gap}",
        "# cells: median over repeats (min..max) of the requests' p99 and the runtime's "
        "/sched/latencies p99, in ms",
        "",
        f"{'mode':<6} {'GOMAXPROCS':>10} {'request p99 ms':>26} {'sched p99 ms':>22} "
        f"{'held s':>7}",
    ]
    for mode in MODES:
        for p in procs:
            rs = results[(mode, p)]
            p99 = [r["p99_s"] * 1000 for r in rs]
            sched = [r["sched_p99_s"] * 1000 for r in rs]
            held = statistics.median(r["held_s"] for r in rs)
            lines.append(
                f"{mode:<6} {p:>10} {statistics.median(p99):>10.1f} "
                f"({min(p99):.1f}..{max(p99):.1f}){'':>2} {statistics.median(sched):>8.2f} "
                f"({min(sched):.2f}..{max(sched):.2f}) {held:>7.2f}")
    lines += ["", "# raw: " + json.dumps([r for rs in results.values() for r in rs])]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
