"""Several chaos scenarios on the real control plane: every window of every trial gets its own
StressChaos (CPU bursts under one scenario, a memory stressor under the other), each valid
against the real CRD, verified injected by the simulated Chaos Mesh (v2.8.3's instances: uid
for stress-ng, memoryUid for memStress) and gone once its window ended."""

from __future__ import annotations

from autotune.experiment import parse_experiment
from autotune.study.loop import RunResult
from tests.kubernetes.conftest import World
from tests.kubernetes.test_chaos import assert_valid
from tests.kubernetes.test_study import run

SCENARIOS = """chaos:
  scenarios:
    - name: noisy
      stress: {workers: 4, load: 100}
      pattern: {every: 2s, burst: 1s}
    - name: hungry
      stress: {workers: 0, memory: {workers: 2, size: 64MiB}}
"""


def test_each_scenario_gets_its_own_stresschaos_in_its_own_window(world: World) -> None:
    text = world.experiment_text(trials=2)
    start = text.index("chaos:")
    end = text.index("prometheus:")
    exp = parse_experiment(text[:start] + SCENARIOS + text[end:])
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert [r["state"] for r in records] == ["COMPLETE"] * 3
    created = {c["metadata"]["name"]: c for c in world.created_chaos()}
    for r in records:
        windows = {w["name"]: w["window"] for w in r["scenarios"]}
        assert set(windows) == {"noisy", "hungry"}
        by_scenario: dict[str, list[dict[str, object]]] = {}
        for inj in r["injections"]:
            by_scenario.setdefault(str(inj["scenario"]), []).append(inj)
            obj = created[str(inj["name"])]
            assert obj["metadata"]["labels"]["autotune/scenario"] == inj["scenario"]
            w = windows[str(inj["scenario"])]
            # the stress of a scenario lies inside that scenario's window only
            assert w["start"] - 5 <= inj["started"] and inj["recovered"] <= w["end"] + 5
        assert len(by_scenario["hungry"]) == 1 and len(by_scenario["noisy"]) >= 1
        assert {"p99_latency@noisy", "p99_latency@hungry", "p99_latency"} <= r["metrics"].keys()
    memory = [c for c in created.values() if "memory" in c["spec"]["stressors"]]
    assert memory and all(c["spec"]["stressors"] == {"memory": {"workers": 2, "size": "64MiB"}}
                          for c in memory)
    for c in created.values():
        assert_valid(c)
    stressed = [i for i in world.chaos.injections if i.memory is not None]
    # (the API server adds the CRD's default oomScoreAdj: 0)
    assert stressed and all((i.memory["workers"], i.memory["size"], i.workers) == (2, "64MiB", 0)
                            for i in stressed if i.memory is not None)
    assert all(i.end is not None for i in world.chaos.injections)
    world.assert_pristine()  # no StressChaos left, the Deployment's env as found
