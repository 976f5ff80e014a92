"""How often the verdict rule adopts wrongly, how often it finds a real gain, whether the
"repeats needed" estimate settles an unclear case, and how often the sequential confirmation
adopts when nothing differs (its looks' levels split equally, or as ``look_levels`` splits them).
Simulated lognormal-ish noise, no I/O.

    /work/venv/bin/python benchmarks/bench_significance.py [--sims 400]

Not a test: it prints rates for a human to judge (and for the docs of significance.py).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from autotune.evidence import significance as sig
from autotune.study.confirmation.extension import extension_for
from autotune.study.confirmation.looks import LookLevels, look_levels, silent_looks, undecided
from autotune.study.confirmation.standing import MIN_RUNS


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


def sequential_false_adopt(levels: LookLevels, noise: float, top: int, sims: int,
                           rng: np.random.Generator, *, rounds: int = 3) -> float:
    """The share of sequential confirmations that end ADOPT when nothing differs: the best of
    ``top`` search measurements (the one that looked best, kept in its pool as confirm() does)
    and 3 baseline repeats, one more run each per round; a look after each round but the last
    may stop it (``undecided`` at the interim level); the verdict is the report's interval at
    the verdict level. Candidates are not re-ranked per look, which the product does: with
    ``top`` > 1 this is the selection's effect in its simplest form."""
    adopted = 0
    for k in range(sims):
        candidate = [float(np.exp(noise * rng.standard_normal(top)).min())]
        baseline = list(np.exp(noise * rng.standard_normal(3)))
        for r in range(1, rounds + 1):
            candidate.append(float(np.exp(noise * rng.standard_normal())))
            baseline.append(float(np.exp(noise * rng.standard_normal())))
            if r < rounds and not undecided(candidate, baseline, None, levels=levels,
                                            metric="x", direction="minimize"):
                break
        verdict = sig.compare(candidate, baseline, metric="x", direction="minimize",
                              confidence=levels.verdict, min_runs=MIN_RUNS, seed=k)
        adopted += verdict.outcome == "better"
    return adopted / sims


def confirmation_false_adopt(levels: LookLevels, noise: float, sims: int,
                             rng: np.random.Generator, *, searched: int = 7, top: int = 3,
                             rounds: int = 3, gains: tuple[float, ...] = (),
                             legacy: bool = False, extend: bool = False) -> float:
    """The share of whole confirmations that end ADOPT, played as the product runs them: the
    ``top`` best of ``searched`` search measurements are confirmed; round 1 measures each and
    the baseline once; each look ranks them by the mean of their runs
    (``significance.rank_key``, as ``confirmation.standing.read_standing``) and asks ``undecided``
    about the leader,
    the baseline and the runner-up; the next round measures the leader and what is pending; the
    verdict judges every candidate (``significance.judge``: "better" on its confirmation runs,
    each at ``significance.each_of(levels.verdict, top)``, the report's rule) and adopts if any
    is called better. The leader changes between looks, so the selection and the re-ranking are
    both in the rate.

    ``gains``: the true relative gain of each search configuration (missing ones: 0, nothing
    differs; then every ADOPT is wrong). ``legacy``: the rule before 2026-12-04 (the search
    measurement pooled with the confirmation runs, every candidate at the family's level).
    ``extend``: after the rounds, the product's extension round (``extension.extension_for``: one
    or two more runs of an undecided leader and of the baseline, the leader then judged at the
    stricter rank-test level it sets)."""
    k = 1 if legacy else top
    each = LookLevels(sig.each_of(levels.interim, k), sig.each_of(levels.verdict, k))
    truth = np.array([1 - g for g in gains] + [1.0] * (searched - len(gains)))
    adopted = 0
    for s in range(sims):
        search = truth * np.exp(noise * rng.standard_normal(searched))
        chosen = np.argsort(search)[:top]
        first = [[float(search[i])] for i in chosen]
        runs: list[list[float]] = [list(f) if legacy else [] for f in first]
        found: list[list[float]] = [[] if legacy else f for f in first]
        baseline = list(np.exp(noise * rng.standard_normal(3)))
        todo = [*range(top), -1]
        for r in range(1, rounds + 1):
            for who in todo:
                if who == -1:
                    baseline.append(float(np.exp(noise * rng.standard_normal())))
                else:
                    runs[who].append(float(truth[chosen[who]]
                                           * np.exp(noise * rng.standard_normal())))
            if r == rounds:
                break
            order = sorted(range(top), key=lambda i: sig.rank_key(runs[i], "minimize"))
            best, runner_up = order[0], order[1] if top > 1 else None
            pending = undecided(runs[best], baseline,
                                None if runner_up is None else runs[runner_up], levels=each,
                                metric="x", direction="minimize",
                                searched=(found[best],
                                          () if runner_up is None else found[runner_up]))
            if not pending:
                break
            todo = [best, *([-1] if "baseline" in pending else []),
                    *([runner_up] if runner_up is not None and "runner-up" in pending else [])]
        def better(mine: list[float], searched: list[float], against: list[float], seed: int,
                   alpha: float | None = None) -> bool:
            return sig.judge(mine, searched, against, metric="x", direction="minimize",
                             confidence=each.verdict, min_runs=MIN_RUNS, seed=seed,
                             rank_alpha=alpha).outcome == "better"

        called = [better(runs[i], found[i], baseline, s) for i in range(top)]
        if extend and levels.interim == 1.0 and not any(called):
            # The product's extension round: the leader and the baseline once or twice more, the
            # leader judged at the stricter level against the baseline with that run (the
            # others keep their planned runs: confirm.Extension).
            leader = min(range(top), key=lambda i: sig.rank_key(runs[i], "minimize"))
            offer = extension_for(runs[leader], found[leader], baseline, each=each.verdict,
                                  metric="x", direction="minimize")
            if offer is not None:
                runs[leader] += [float(truth[chosen[leader]]
                                       * np.exp(noise * rng.standard_normal()))
                                 for _ in range(offer.added)]
                extra = [float(np.exp(noise * rng.standard_normal()))
                         for _ in range(offer.added)]
                called[leader] = better(runs[leader], found[leader], [*baseline, *extra], s,
                                        offer.level)
        adopted += any(called)
    return adopted / sims


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
    equal = 1 - (1 - sig.CONFIDENCE) / 3
    split = look_levels(3)
    print("sequential confirmation, 3 rounds, no difference: P(ADOPT) with looks at "
          f"{equal:.2%} each / at {split.interim:.2%} then a {split.verdict:.0%} verdict:")
    for top in (1, 3):
        for noise in (0.1, 0.2, 0.3):
            a = sequential_false_adopt(LookLevels(equal, equal), noise, top, args.sims, rng)
            b = sequential_false_adopt(split, noise, top, args.sims, rng)
            print(f"  best of {top}, noise={noise:.2f}: {a:.3f} / {b:.3f}")
    # Before 2026-12-04 (legacy): 12-20%; judged on confirmation runs, each candidate at a
    # third of the error: ~5% (docs/measurements/null-2026-12-04.txt prints these rows).
    print(f"the whole confirmation, top 3 of 7 search trials, up to 3 rounds: P(ADOPT) before "
          f"(search value pooled, each candidate at {split.verdict:.0%}) / now (confirmation "
          f"runs, each at {sig.each_of(split.verdict, 3):.2%}):")
    scenarios = (((), "nothing differs"), ((0.15,), "one of 7 truly 15% better"),
                 ((0.18, 0.15, 0.12, 0.10, 0.05), "five better by 5-18%"),
                 ((0.30,), "one of 7 truly 30% better"))
    for gains, label in scenarios:
        for noise in (0.1, 0.2, 0.3):
            before = confirmation_false_adopt(split, noise, args.sims, rng, gains=gains,
                                              legacy=True)
            now = confirmation_false_adopt(split, noise, args.sims, rng, gains=gains)
            print(f"  {label:28} sigma {noise:.1f}: {before:.3f} / {now:.3f}")
    print("now, confirming the top 1 / 2 / 3:")
    for gains, label in scenarios:
        for noise in (0.1, 0.2):
            row = [confirmation_false_adopt(split, noise, args.sims, rng, gains=gains, top=t)
                   for t in (1, 2, 3)]
            print(f"  {label:28} sigma {noise:.1f}: " + " / ".join(f"{r:.3f}" for r in row))
    # Since 2026-12-04 (b): the looks of the default 3 rounds cannot decide (fewer than
    # LOOK_RUNS runs of the leader), so they spend nothing and the verdict is 95% (98.33% each
    # of 3).
    # Both columns draw the same simulations (one generator seeded per cell).
    product = look_levels(3, silent_looks(3, 0))
    print(f"the whole confirmation, each of 3 candidates at {sig.each_of(split.verdict, 3):.2%} "
          f"(the looks holding 1%) / at {sig.each_of(product.verdict, 3):.2%} (looks that "
          "cannot decide spend nothing), same draws:")
    for i, (gains, label) in enumerate(scenarios):
        for j, noise in enumerate((0.1, 0.2, 0.3)):
            a, b = (confirmation_false_adopt(levels, noise, args.sims,
                                             np.random.default_rng(100 + 10 * i + j), gains=gains)
                    for levels in (split, product))
            print(f"  {label:28} sigma {noise:.1f}: {a:.3f} / {b:.3f}")
    print(f"({time.monotonic() - t0:.1f}s)")


if __name__ == "__main__":
    main()
