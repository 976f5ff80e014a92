"""A simulated world: a target with a known response surface, an injector and a metric source.

It lets a user try autotune without a Go service, and lets tests check the study engine against
a surface whose optimum is known. It is stateful and persistent (a JSON file), so a killed run
leaves evidence a later run or a test can inspect: which settings are applied, which stress
injections are active, and every injection ever made.

The surface (the metric whose query is ``surface``): ``floor * (1 + sensitivity * d^2)``, where
``d^2`` is the mean squared distance of the applied settings from the optimum with each parameter
scaled to [0, 1]; multiplied by ``1 + (stress_factor - 1) * (fraction of the window under
stress)``, then by ``1 + noise * N(0, 1)``.

One run at a time per world: the target takes the world's run lock (``<state file>.lock``,
``autotune.runlock``) when it is made and holds it as long as it exists, so a second run of the
same world, or an ``autotune cleanup`` of it, is refused while a run holds it. Workers of one
study with a world each (a shared storage) do not meet.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune import files
from autotune.chaos.base import Injection
from autotune.clock import Clock
from autotune.errors import ChaosError, TargetError
from autotune.experiment.models import (
    BlockedP,
    Experiment,
    Parameter,
    Scalar,
    SimulatedTarget,
    Stress,
)
from autotune.live import Live, Matcher, Window
from autotune.metrics.base import Reading, Unavailable
from autotune.runlock import RunLock
from autotune.targets.base import Env, NoiseProbe


class World:
    """The simulated world's state, kept in a JSON file written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        """The state; a fresh world where there is no file yet. A file that is not a world's
        (``target.simulated.state_file`` pointed at someone's notes) is refused, never
        replaced: saving the fresh state over it would destroy it."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {"applied": None, "active": {}, "history": [], "foreign_cores": []}
        except OSError as e:
            raise TargetError(f"cannot read the simulated world {self.path}: "
                              f"{e.strerror or e}") from None
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not {"applied", "active", "history"} <= set(data):
            raise TargetError(f"{self.path} (target.simulated.state_file) is not a simulated "
                              "world's state: autotune will not replace it. Name a new file")
        return data

    def save(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A random temporary name, never followed if planted as a link (autotune.files).
        files.replace(self.path, json.dumps(state, indent=1, sort_keys=True))

    def update(self, **changes: Any) -> dict[str, Any]:
        state = self.load()
        state.update(changes)
        self.save(state)
        return state


def _position(p: Parameter, value: Scalar) -> float:
    """The value's place in the parameter's domain, scaled to [0, 1]."""
    if p.values is not None:
        index = next((i for i, v in enumerate(p.values) if v == value), None)
        if index is None:
            raise TargetError(f"{p.name}={value!r} is not a value of the parameter")
        return index / max(1, len(p.values) - 1)
    assert p.low is not None and p.high is not None
    x = float(value)
    if p.log:
        return (math.log(x) - math.log(p.low)) / (math.log(p.high) - math.log(p.low))
    return (x - p.low) / (p.high - p.low)


def surface(exp: Experiment, spec: SimulatedTarget, env: Env,
            scenario: str | None = None) -> float:
    """The noiseless, unstressed value of the surface metric for these settings (in the windows
    of ``scenario``: around its optimum, ``target.simulated.scenarios``)."""
    optimum = spec.scenarios.get(scenario, spec.optimum) if scenario else spec.optimum
    by_env = {p.env_var: p for p in exp.parameters}
    total = 0.0
    for var, text in env.items():
        p = by_env[var]
        if text is None:
            if p.name not in spec.unset:
                raise TargetError(f"{p.name} unset: the simulated world has no runtime default "
                                  "for it (target.simulated.unset)")
            value: Scalar = spec.unset[p.name]
        else:
            value = _parse(p, text)
        total += (_position(p, value) - _position(p, optimum[p.name])) ** 2
    return spec.floor * (1 + spec.sensitivity * total / max(1, len(env)))


def _parse(p: Parameter, text: str) -> Scalar:
    if p.values is not None:
        for v in p.values:
            if p.format(v) == text:
                return v
        return text
    return int(text) if p.type == "int" else float(text)


def run_lock(world: World) -> RunLock:
    return RunLock(world.path.with_name(world.path.name + ".lock"),
                   why=f"One run (or cleanup) of the simulated world {world.path} at a time")


class SimulatedService:
    """The Target of the simulated world; holds the world's run lock while it exists."""

    def __init__(self, exp: Experiment, world: World, clock: Clock) -> None:
        assert exp.target.simulated is not None
        self.lock = run_lock(world)
        self.lock.acquire()
        self.exp, self.spec, self.world, self.clock = exp, exp.target.simulated, world, clock
        self._generation = 0

    def describe(self) -> dict[str, Any]:
        return {"kind": "simulated", "noise": self.spec.noise, "state_file": str(self.world.path)}

    def apply(self, env: Env) -> Live:
        by_env = {p.env_var for p in self.exp.parameters}
        unknown = set(env) - by_env
        if unknown:
            raise TargetError(f"unknown variables {sorted(unknown)}")
        surface(self.exp, self.spec, env)  # reject settings the world cannot run
        self.clock.sleep(self.spec.apply_seconds)
        self._generation += 1
        self.world.update(applied={"env": dict(env), "generation": self._generation})
        return Live(env=dict(env), since=self.clock.now(),
                    scope=(Matcher("job", "simulated"),),
                    placement={"world": str(self.world.path)},
                    details={"generation": self._generation})

    def check(self, live: Live) -> Mapping[str, Any]:
        applied = self.world.load().get("applied") or {}
        if applied.get("generation") != live.details.get("generation"):
            raise TargetError("the simulated service was reconfigured during the window")
        return {}

    def restore(self, best: Env | None = None) -> None:
        self.world.update(applied=None)

    def cleanup(self) -> list[str]:
        applied = self.world.load().get("applied")
        if applied is None:
            return []
        self.world.update(applied=None)
        return [f"simulated settings {applied.get('env')}"]

    def noise_probe(self) -> NoiseProbe | None:
        return _QueuedNoise(self.world)


class _QueuedNoise:
    """Foreign CPU load scripted through the world file (``foreign_cores``: a queue)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def begin(self) -> None:
        return None

    def end(self) -> float:
        state = self.world.load()
        queue = state.get("foreign_cores", [])
        if not queue:
            return 0.0
        value = float(queue.pop(0))
        self.world.update(foreign_cores=queue)
        return value


class SimulatedInjector:
    def __init__(self, world: World, clock: Clock) -> None:
        self.world, self.clock = world, clock

    def inject(self, live: Live, stress: Stress, duration: float,
               labels: Mapping[str, str]) -> Injection:
        state = self.world.load()
        if state.get("applied") is None:
            raise ChaosError("nothing is running to inject into")
        if state.get("refuse_injection"):
            raise ChaosError(str(state["refuse_injection"]))
        inj_id = f"sim-{uuid.uuid4().hex[:8]}"
        now = self.clock.now()
        entry = {"id": inj_id, "workers": stress.workers, "load": stress.load,
                 "start": now, "end": None, "expires": now + duration, "labels": dict(labels)}
        state["active"][inj_id] = entry
        self.world.save(state)
        return Injection(id=inj_id, started=now, details={"workers": stress.workers,
                                                          "load": stress.load})

    def recover(self, injection: Injection) -> None:
        state = self.world.load()
        entry = state["active"].pop(injection.id, None)
        if entry is not None:
            entry["end"] = self.clock.now()
            state["history"].append(entry)
            self.world.save(state)

    def active(self) -> list[str]:
        now = self.clock.now()
        return [i for i, e in self.world.load()["active"].items() if e["expires"] > now]

    def cleanup(self) -> list[str]:
        state = self.world.load()
        removed = list(state["active"])
        for inj_id in removed:
            entry = state["active"].pop(inj_id)
            entry["end"] = self.clock.now()
            entry["cleaned_up"] = True
            state["history"].append(entry)
        if removed:
            self.world.save(state)
        return [f"simulated injection {i}" for i in removed]


class SimulatedBlocker:
    """Held Ps in the simulated world: an entry like a stress injection's (``held: true``)."""

    def __init__(self, world: World, clock: Clock) -> None:
        self.world, self.clock = world, clock

    def block(self, live: Live, spec: BlockedP, duration: float,
              labels: Mapping[str, str]) -> Injection:
        state = self.world.load()
        if state.get("applied") is None:
            raise ChaosError("nothing is running whose Ps could be held")
        inj_id = f"sim-held-{uuid.uuid4().hex[:8]}"
        now = self.clock.now()
        state["active"][inj_id] = {"id": inj_id, "held": True, "goroutines": spec.goroutines,
                                   "start": now, "end": None, "expires": now + duration,
                                   "labels": dict(labels)}
        self.world.save(state)
        return Injection(id=inj_id, started=now, details={"goroutines": spec.goroutines})

    def release(self, injection: Injection) -> None:
        SimulatedInjector(self.world, self.clock).recover(injection)

    def cleanup(self) -> list[str]:
        return []  # the injector's cleanup removes every active entry, held Ps too


class SimulatedMetrics:
    """Answers the world's own two queries for the window:

    - ``surface``: the response surface at the applied settings (stressed if stress overlapped
      the window), with noise;
    - ``stress``: the fraction of the window during which stress was injected.

    Anything else has no series; text that is not a bare word is a parse error.
    """

    QUERIES = ("surface", "stress")

    def __init__(self, exp: Experiment, world: World, seed: int | None = None) -> None:
        assert exp.target.simulated is not None
        self.exp, self.spec, self.world = exp, exp.target.simulated, world
        self.rng = random.Random(seed)

    def observe(self, live: Live) -> None:
        return None

    def read(self, queries: Mapping[str, str], window: Window, live: Live) -> dict[str, Reading]:
        state = self.world.load()
        applied = state.get("applied")
        out: dict[str, Reading] = {}
        stressed = 0.0
        under: dict[str, float] = {}  # seconds of the window per scenario (from the labels)
        for e in [*state["active"].values(), *state["history"]]:
            end = min(e["end"] or e["expires"], window.end)
            overlap = max(0.0, end - max(e["start"], window.start))
            stressed += overlap
            name = (e.get("labels") or {}).get("autotune/scenario")
            if name and overlap > 0:
                under[name] = under.get(name, 0.0) + overlap
        scenario = max(under, key=lambda n: under[n]) if under else None
        fraction = min(1.0, stressed / window.seconds) if window.seconds > 0 else 0.0
        for name, query in queries.items():
            query = query.strip()
            if not query.isidentifier():
                out[name] = Unavailable(f"parse error in {query!r}: the simulated world only "
                                        f"answers {', '.join(self.QUERIES)}")
            elif query not in self.QUERIES:
                out[name] = Unavailable(f"no series for {query!r}")
            elif applied is None:
                out[name] = Unavailable("no series: nothing is running")
            elif query == "stress":
                out[name] = fraction
            else:
                value = surface(self.exp, self.spec, applied["env"], scenario)
                value *= 1 + (self.spec.stress_factor - 1) * fraction
                out[name] = max(0.0, value * (1 + self.spec.noise * self.rng.gauss(0, 1)))
        return out

    def close(self) -> None:
        return None


def world_path(exp: Experiment, results: Path) -> Path:
    assert exp.target.simulated is not None
    return Path(exp.target.simulated.state_file or results / "simulated-world.json")
