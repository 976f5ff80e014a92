"""How often the verdict rule adopts wrongly, how often it finds a real gain, and whether the
"repeats needed" estimate settles an unclear case. Simulated lognormal-ish noise, no I/O.

    /work/venv/bin/python benchmarks/bench_significance.py [--sims 400]

Not a test: it prints rates for a human to judge (and for the docs of significance.py).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from autotune.evidence import significance as sig


def rates(gain: float, noise: float, n: int, sims: int, rng: np.random.Generator,
          *, single: bool = False) -> dict[str, float]:
    """Outcome frequencies for a candidate whose true median is ``gain`` better (minimize)."""
    counts = {"better": 0, "not better": 0, "unclear": 0}
    for k in range(sims):
        base = list(np.exp(noise * rng.standard_normal(n)))
        cand = list((1 - gain) * np.exp(noise * rng.standard_normal(1 if single else n)))
        c = sig.compare(cand, base, metric="x", direction="minimize", resamples=2000, seed=k,
                        margin=sig.FALLBACK_MARGIN if single else 0.0, borrow=single)
        counts[c.outcome] += 1
    return {k: v / sims for k, v in counts.items()}


def settle_rate(gain: float, noise: float, sims: int, rng: np.random.Generator) -> float | None:
    unclear = settled = 0
    for k in range(sims):
        def draw(median: float, n: int) -> list[float]:
            return list(median * np.exp(noise * rng.standard_normal(n)))

        first = sig.compare(draw(1 - gain, 3), draw(1.0, 3), metric="x", direction="minimize",
                            resamples=2000, seed=k)
        if first.outcome != "unclear" or first.repeats_needed is None:
            continue
        unclear += 1
        n = min(first.repeats_needed, 400)
        again = sig.compare(draw(1 - gain, n), draw(1.0, n), metric="x", direction="minimize",
                            resamples=2000, seed=k)
        settled += again.outcome != "unclear"
    return settled / unclear if unclear else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sims", type=int, default=400)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    t0 = time.monotonic()
    print("confirmed (n repeats each side): P(better) P(not better) P(unclear)")
    for n in (3, 5):
        for noise in (0.05, 0.2):
            for gain in (0.0, 0.1, 0.3):
                r = rates(gain, noise, n, args.sims, rng)
                print(f"  n={n} noise={noise:.2f} gain={gain:.2f}: "
                      f"{r['better']:.3f} {r['not better']:.3f} {r['unclear']:.3f}")
    print("search only (1 value, borrowed noise, 20% margin, 3 baseline repeats):")
    for noise in (0.05, 0.2):
        for gain in (0.0, 0.1, 0.4):
            r = rates(gain, noise, 3, args.sims, rng, single=True)
            print(f"  noise={noise:.2f} gain={gain:.2f}: "
                  f"{r['better']:.3f} {r['not better']:.3f} {r['unclear']:.3f}")
    print("share of unclear 3-repeat cases settled at the estimated repeats:")
    for gain, noise in ((0.15, 0.2), (0.1, 0.1), (0.3, 0.3)):
        s = settle_rate(gain, noise, args.sims // 2, rng)
        print(f"  gain={gain:.2f} noise={noise:.2f}: {s if s is None else f'{s:.2f}'}")
    print(f"({time.monotonic() - t0:.1f}s)")


if __name__ == "__main__":
    main()
