"""measure.schedtrace on a Kubernetes target (issue 10): GODEBUG=schedtrace merged into the
container's own GODEBUG for every measured candidate, the SCHED lines read back from the pods'
logs (``pods/log``, granted only by deploy/rbac-schedtrace.yaml), the container's GODEBUG
restored exactly afterwards. On the real control plane: the API server's pods/log reaches kwok's
kubelet endpoint, which reads the container's log with the kubelet's own CRI log reader; the
pods print recorded go1.25 schedtrace lines when their env asks (tests/controlplane/runtime.py).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from autotune.errors import TargetError
from autotune.insight.podlog import stamp_seconds, trace_in_window
from autotune.insight.schedtrace import Trace
from autotune.live import Window
from autotune.platforms.kubernetes import stack
from autotune.study.diagnostics import scheduler
from autotune.study.loop import RunResult
from tests.kubernetes.conftest import World
from tests.kubernetes.test_study import run

TRACED = ", schedtrace: 100ms"
ENV_WITH_GODEBUG = [{"name": "LOG_LEVEL", "value": "info"},
                    {"name": "GODEBUG", "value": "http2client=0,madvdontneed=1"},
                    {"name": "GOMAXPROCS", "value": "8"}]


@pytest.fixture(autouse=True)
def _logs(world: World) -> None:
    world.grant("rbac-schedtrace.yaml")
    world.serve_logs()


def _with_godebug(world: World, env: list[dict[str, Any]]) -> None:
    world.set_env(env)
    world.settled()
    assert all(e == env for e in world.pod_envs())


def test_a_study_reads_the_run_queues_from_the_pods_logs_and_restores_godebug(
        world: World) -> None:
    _with_godebug(world, ENV_WITH_GODEBUG)
    exp = world.experiment(trials=2, measure=TRACED,
                           metrics="\n  runq: {schedtrace: runq_total_p999}")
    seen: list[str | None] = []

    def during_window(seconds: float) -> None:
        if world.chaos_left():  # stressed: the candidate is live
            seen.extend(next((e.get("value") for e in env if e["name"] == "GODEBUG"), None)
                        for env in world.pod_envs())
    world.clock.on_sleep = during_window
    outcome, records = run(world, exp, world.backends(exp))
    assert isinstance(outcome, RunResult), outcome
    assert [r["state"] for r in records] == ["COMPLETE"] * 3
    for r in records:
        trace = r["schedtrace"]
        assert "unavailable" not in trace, trace
        # 100 ms lines over a 4 s window, from a 2-P go1.25 recording
        assert 39 <= trace["summary"]["samples"] <= 41, (trace["series"], r["window"])
        assert r["metrics"]["runq"] == trace["summary"]["runq_total_p999"]
        assert trace["source"].startswith("pod api-")
        assert trace["overflow"]["fired"] is False
    assert seen and set(seen) == {"http2client=0,madvdontneed=1,schedtrace=100"}
    # the container's own GODEBUG, in its place: the pod template hash is the original one
    assert world.template_env() == ENV_WITH_GODEBUG
    assert world.annotations() == {} and world.chaos_left() == []
    assert ("get", "pods/log") in world.verbs()


def test_several_pods_give_the_trace_of_the_busiest(world: World) -> None:
    exp = world.experiment(measure=TRACED)
    target = world.target(exp)
    live = target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    try:
        assert len(live.pods) == 2
        busy = live.pods[1]
        assert world.logs is not None
        world.logs.runnable[busy] = 700
        start = world.clock.now()
        world.clock.sleep(1.0)
        trace = target.schedtrace(live, Window(start, world.clock.now()))
        assert isinstance(trace, Trace), trace
        assert trace.source == f"pod {busy}, the most runnable goroutines of 2 pods"
        assert trace.samples and {s.runqueue for s in trace.samples} == {700}
        assert [s.at_ms for s in trace.samples] == sorted(s.at_ms for s in trace.samples)
        # the window is 1 s of sleep plus the real time the cluster took meanwhile
        span = (world.clock.now() - start) * 1000
        assert all(0 <= s.at_ms <= span for s in trace.samples)
    finally:
        target.restore()
    assert all("GODEBUG" not in {e["name"] for e in env} for env in world.pod_envs())


def test_the_study_choice_is_kept_without_schedtrace(world: World) -> None:
    _with_godebug(world, ENV_WITH_GODEBUG)
    exp = world.experiment(measure=TRACED)
    target = world.target(exp)
    target.finish_with({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    godebug = [e for e in world.template_env() if e["name"] == "GODEBUG"]
    assert godebug == [{"name": "GODEBUG", "value": "http2client=0,madvdontneed=1"}]
    assert world.annotations() == {}


def test_a_godebug_from_a_configmap_cannot_be_merged_and_says_so(world: World) -> None:
    from_configmap = [{"name": "GODEBUG", "valueFrom": {"configMapKeyRef": {
        "name": "api-config", "key": "godebug"}}}]
    _with_godebug(world, from_configmap)
    target = world.target(world.experiment(measure=TRACED))
    with pytest.raises(TargetError, match=r"GODEBUG is set from valueFrom, not as a value"):
        target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    target.restore()
    assert world.template_env() == from_configmap and world.annotations() == {}


def test_without_the_log_permission_validate_points_at_the_rbac_file(world: World) -> None:
    world.deny("get", "pods/log")
    exp = world.experiment(measure=TRACED)
    [problem] = stack.validate_cluster(exp)
    assert problem.startswith(f"not allowed to get pods/log in namespace '{world.namespace}'")
    assert problem.endswith("see deploy/rbac-schedtrace.yaml")
    assert stack.validate_cluster(world.experiment()) == [], "asked only when schedtrace is on"
    # a run that goes ahead anyway records why the trace is missing; a metric computed from it
    # is unavailable with that reason, never a made-up value
    exp = world.experiment(trials=1, stop_after=1, measure=TRACED,
                           metrics="\n  runq: {schedtrace: runq_total_p999}")
    _, records = run(world, exp, world.backends(exp))
    assert "deploy/rbac-schedtrace.yaml" in records[0]["schedtrace"]["unavailable"]
    assert "runq" not in records[0]["metrics"]
    assert "deploy/rbac-schedtrace.yaml" in records[0]["unavailable"]["runq"]
    world.assert_pristine()


# --- the kubelet's timestamps -------------------------------------------------------------

def test_kubelet_stamps_fixed_and_lenient() -> None:
    fixed = stamp_seconds("2026-12-01T10:42:06.120000000Z SCHED 0ms: x")
    lenient = stamp_seconds("2026-12-01T11:42:06.12+01:00 SCHED 0ms: x")
    assert fixed is not None and lenient is not None
    assert fixed[0] == pytest.approx(lenient[0]) and fixed[1] == "SCHED 0ms: x"
    assert stamp_seconds("SCHED 0ms: gomaxprocs=1") is None
    assert stamp_seconds("2026-13-01T10:42:06Z SCHED") is None  # no month 13


def test_samples_are_placed_by_the_runtime_clock_and_cut_to_the_window() -> None:
    base = 1_800_000_000.0
    lines = []
    for k in range(20):  # one line per 100 ms; the kubelet's stamp a little late, jittered
        stamp = base + k * 0.1 + (0.004 if k % 3 else 0.35)
        body = (f"SCHED {k * 100}ms: gomaxprocs=2 idleprocs=0 threads=5 spinningthreads=0 "
                f"needspinning=0 idlethreads=1 runqueue={k} [ 1 2 ] schedticks=[ 1 1 ]")
        seconds, frac = divmod(round(stamp * 1e9), 10**9)
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        lines.append(f"{when}.{frac:09d}Z {body}")
        lines.append(f"{when}.{frac:09d}Z level=info msg=served")
    trace = trace_in_window("\n".join(lines) + "\n", base + 0.5, base + 1.0)
    assert isinstance(trace, Trace)
    # the median offset (4 ms) ignores the late stamps: samples 5..9, on the runtime's clock
    assert [s.runqueue for s in trace.samples] == [5, 6, 7, 8, 9]
    assert [s.at_ms for s in trace.samples] == [4, 104, 204, 304, 404]
    assert trace.skipped == 0
    missing = trace_in_window("level=info msg=served\n", base, base + 1)
    assert isinstance(missing, str) and "without the kubelet's timestamp" in missing


# --- issue 15.11: what the kubelet's log serving loses is said, not hidden -------------------

def _traced_window(world: World, during: Any = None) -> tuple[Any, Any, Window, Any]:
    exp = world.experiment(measure=TRACED)
    target = world.target(exp)
    live = target.apply({"GOMAXPROCS": "2", "FORCEGC_INTERVAL_MS": None})
    start = world.clock.now()
    world.clock.sleep(2.0)
    if during is not None:
        during(live)
    world.clock.sleep(2.0)
    window = Window(start, world.clock.now())
    return exp, target, live, window


def test_a_log_cut_at_limit_bytes_is_an_incomplete_trace_not_no_overflow(world: World) -> None:
    """The kubelet counts limitBytes (8 MiB) from sinceSeconds: a chatty service loses the
    window's end, and no overflow seen in the part that came is not "no overflow"."""
    def chatty(live: Any) -> None:
        assert world.logs is not None
        for pod in live.pods:
            world.logs.chatter[pod] = 6 << 20  # 6 MiB a second

    exp, target, live, window = _traced_window(world, chatty)
    try:
        trace = target.schedtrace(live, window)
        assert isinstance(trace, Trace), trace
        assert "the kubelet cut the log at limitBytes" in trace.incomplete, trace.incomplete
        found = scheduler(exp, target, live, window)
        assert found["overflow"]["fired"] is False
        assert found["overflow"]["verdict"] == "trace incomplete"
        assert "limitBytes" in found["incomplete"]
    finally:
        target.restore()


def test_a_log_rotated_during_the_window_is_an_incomplete_trace(world: World) -> None:
    def rotate(live: Any) -> None:
        assert world.logs is not None
        for pod in live.pods:
            world.logs.rotate(pod, "api")

    _, target, live, window = _traced_window(world, rotate)
    try:
        trace = target.schedtrace(live, window)
        assert isinstance(trace, Trace), trace
        assert re.search(r"the log starts \d\.\ds into the window \(rotated", trace.incomplete)
        assert all(s.at_ms >= 1800 for s in trace.samples), "only the window's second half"
    finally:
        target.restore()


def test_a_complete_trace_says_nothing_is_missing(world: World) -> None:
    exp, target, live, window = _traced_window(world)
    try:
        trace = target.schedtrace(live, window)
        assert isinstance(trace, Trace) and trace.incomplete == "", trace
        assert "verdict" not in scheduler(exp, target, live, window)["overflow"]
    finally:
        target.restore()
