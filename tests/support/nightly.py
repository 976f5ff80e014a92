"""The nightly tests' experiment: simulated, with the optimum far from the baseline."""

from __future__ import annotations

from typing import Any


def nightly_experiment(repeats: int = 3, **study: Any) -> dict[str, Any]:
    """A small simulated experiment named ``nightly``: the optimum far from the baseline
    (unset = 8, gc off), ``repeats`` baseline runs, ``study`` over 6 TPE trials, seed 5."""
    return {
        "name": "nightly",
        "target": {"simulated": {"optimum": {"GOMAXPROCS": 2, "gc": 2000},
                                 "unset": {"GOMAXPROCS": 8, "gc": 0},
                                 "noise": 0.02, "state_file": "world.json"}},
        "parameters": [
            {"name": "GOMAXPROCS", "type": "int", "values": [1, 2, 4, 8, 16]},
            {"name": "gc", "env": "FORCEGC_INTERVAL_MS", "type": "int",
             "values": [0, 500, 2000, 10000]},
        ],
        "baseline": {"repeats": repeats, "params": {"GOMAXPROCS": None, "gc": 0}},
        "chaos": {"stress": {"workers": 2, "load": 50}},
        "measure": {"warmup": "20ms", "window": "60ms"},
        "metrics": {"p99": "surface"},
        "objective": {"minimize": "p99"},
        # The search's stop rule off: these nights count their search trials (the rule's own
        # tests set study.early_stop).
        "study": {"trials": 6, "sampler": "tpe", "seed": 5, "early_stop": None, **study},
    }
