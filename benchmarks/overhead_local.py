"""Per-trial overhead of the local stack: wall time of a trial beyond its warm-up and window(s),
and where it goes (every backend call timed), over trials of an experiment's configurations.

    python benchmarks/overhead_local.py experiments/local.yaml --trials 10 --out results/oh.json

The configurations cycle through the experiment's grid (baseline first) in a seeded random order,
so restarts see different settings as in a study. The first trial also pays for starting
Prometheus (and, with ``load.rate: auto``, the calibration): it is reported separately and left
out of the steady-state median/max.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from autotune.chaos.base import Injection
from autotune.clock import SystemClock
from autotune.experiment import load_experiment
from autotune.experiment.models import Experiment, Measure, Stress
from autotune.live import Live, Window
from autotune.metrics.base import Reading
from autotune.platforms.local.stack import build
from autotune.study.interrupts import signals_as_exceptions
from autotune.study.space import grid, to_env
from autotune.study.trial import Backends, TrialFailed, measure
from autotune.targets.base import Env, NoiseProbe


class Timings:
    def __init__(self) -> None:
        self.calls: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.calls[name] += time.monotonic() - t0


class TimedTarget:
    def __init__(self, inner: Any, t: Timings) -> None:
        self.inner, self.t = inner, t

    def describe(self) -> dict[str, Any]:
        return dict(self.inner.describe())

    def apply(self, env: Env) -> Live:
        with self.t("target.apply"):
            live: Live = self.inner.apply(env)
            return live

    def check(self, live: Live) -> None:
        with self.t("target.check"):
            self.inner.check(live)

    def restore(self, best: Env | None = None) -> None:
        self.inner.restore(best)

    def cleanup(self) -> list[str]:
        return list(self.inner.cleanup())

    def noise_probe(self) -> NoiseProbe | None:
        probe: NoiseProbe | None = self.inner.noise_probe()
        return probe


class TimedInjector:
    def __init__(self, inner: Any, t: Timings) -> None:
        self.inner, self.t = inner, t

    def inject(self, live: Live, stress: Stress, duration: float,
               labels: Mapping[str, str]) -> Injection:
        with self.t("injector.inject"):
            inj: Injection = self.inner.inject(live, stress, duration, labels)
            return inj

    def recover(self, injection: Injection) -> None:
        with self.t("injector.recover"):
            self.inner.recover(injection)

    def active(self) -> list[str]:
        return list(self.inner.active())

    def cleanup(self) -> list[str]:
        return list(self.inner.cleanup())


class TimedSource:
    def __init__(self, inner: Any, t: Timings) -> None:
        self.inner, self.t = inner, t

    def observe(self, live: Live) -> None:
        with self.t("source.observe"):
            self.inner.observe(live)

    def read(self, queries: Mapping[str, str], window: Window,
             live: Live) -> dict[str, Reading]:
        with self.t("source.read"):
            out: dict[str, Reading] = self.inner.read(queries, window, live)
            return out

    def close(self) -> None:
        self.inner.close()


def _schedule(exp: Experiment, n: int, seed: int) -> list[dict[str, Any]]:
    space = grid(exp)
    combos = [dict(zip(space, c, strict=True)) for c in itertools.product(*space.values())]
    random.Random(seed).shuffle(combos)
    configs = [exp.baseline_settings(), *combos]
    return [configs[i % len(configs)] for i in range(n)]


def _summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):.2f}s, max {max(values):.2f}s"


def run(path: Path, trials: int, seed: int, warmup: float | None, window: float | None,
        out: Path | None, noise_guard: bool) -> int:
    exp, _ = load_experiment(path)
    m = exp.measure
    exp = exp.model_copy(update={"measure": Measure(
        warmup=m.warmup if warmup is None else warmup,
        window=m.window if window is None else window,
        noise_guard=m.noise_guard.model_copy(update={"enabled": noise_guard}))})
    results = Path("results") / f"{exp.name}-overhead"
    results.mkdir(parents=True, exist_ok=True)
    clock = SystemClock()
    inner = build(exp, results, clock)
    rows: list[dict[str, Any]] = []
    t = Timings()
    backends = Backends(target=TimedTarget(inner.target, t),
                        injector=TimedInjector(inner.injector, t),
                        source=TimedSource(inner.source, t))
    with signals_as_exceptions():
        try:
            for i, settings in enumerate(_schedule(exp, trials, seed)):
                t.calls.clear()
                record: dict[str, Any] = {}
                t0 = time.monotonic()
                state, failure = "COMPLETE", ""
                try:
                    measure(exp, backends, to_env(exp, settings), clock=clock,
                            labels={"autotune/trial": f"oh-{i}"}, record=record)
                except TrialFailed as e:
                    state, failure = "FAIL", e.reason
                seconds = time.monotonic() - t0
                attempts = max(1, len(record.get("attempts", [])))
                extra_warmup = min(exp.measure.warmup, 5.0) * (attempts - 1)
                overhead = (seconds - exp.measure.warmup - extra_warmup
                            - exp.measure.window * attempts)
                row = {"trial": i, "settings": settings, "state": state, "failure": failure,
                       "seconds": round(seconds, 3), "overhead_s": round(overhead, 3),
                       "attempts": attempts, "phases": record.get("phases", {}),
                       "calls": {k: round(v, 3) for k, v in t.calls.items()},
                       "load_rate": record.get("live", {}).get("load_rate")}
                rows.append(row)
                print(f"[{i + 1}/{trials}] {state} {seconds:.2f}s overhead {overhead:.2f}s "
                      f"attempts {attempts} calls {row['calls']} {failure}", flush=True)
        finally:
            backends.injector.cleanup()
            backends.target.restore()
            backends.source.close()
    steady = [r for r in rows[1:] if r["state"] == "COMPLETE"]
    print(f"\nfirst trial: {rows[0]['overhead_s']:.2f}s overhead" if rows else "")
    print(f"steady state ({len(steady)} trials): overhead "
          f"{_summary([r['overhead_s'] for r in steady])}")
    names = sorted({k for r in steady for k in r["calls"]})
    for name in names:
        print(f"  {name:<18} {_summary([r['calls'].get(name, 0.0) for r in steady])}")
    failed = [r for r in rows if r["state"] != "COMPLETE"]
    for r in failed:
        print(f"  FAIL trial {r['trial']}: {r['failure']}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"experiment": exp.name, "rows": rows}, indent=1,
                                  default=str))
    return 0 if not failed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=float, help="override measure.warmup (seconds)")
    parser.add_argument("--window", type=float, help="override measure.window (seconds)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-noise-guard", action="store_true",
                        help="never re-measure (overhead only: other load on the host is fine)")
    args = parser.parse_args(argv)
    return run(args.experiment, args.trials, args.seed, args.warmup, args.window, args.out,
               not args.no_noise_guard)


if __name__ == "__main__":
    sys.exit(main())
