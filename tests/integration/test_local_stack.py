"""The real local stack: Go demo service, open-loop load generator, stress-ng, Prometheus."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from autotune.cli import main
from autotune.clock import SystemClock
from autotune.experiment import parse_experiment
from autotune.experiment.models import Experiment, Stress
from autotune.metrics.prometheus import PrometheusSource
from autotune.platforms.local import calibrate, cgroups, gobuild, proc
from autotune.platforms.local.ports import free_port
from autotune.platforms.local.service import LocalService
from autotune.platforms.local.stack import build
from autotune.study.space import to_env
from autotune.study.trial import Backends
from tests.support.waiting import targets_scraped, until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]

DEMO_METRICS = [
    "http_request_duration_seconds_bucket", "go_sched_pauses_total_gc_seconds_bucket",
    "go_sched_latencies_seconds_bucket", "go_cpu_classes_idle_cpu_seconds_total",
    "go_cpu_classes_total_cpu_seconds_total", "go_sched_gomaxprocs_threads",
    "go_gc_cycles_forced_gc_cycles_total", "go_gc_cycles_total_gc_cycles_total",
    "go_gc_duration_seconds", "process_cpu_seconds_total", "go_info",
]


def _probe(asked: str) -> cgroups.CpuLimit | None:
    """The 1-CPU limit ``isolation: asked`` gets on this host (None: no cgroup, affinity)."""
    mode = cgroups.detect()
    if mode.kind == "affinity":
        return None
    return cgroups.CpuLimit(mode, 1.0, "probe", want_cpuset=True, tight_cpuset=asked == "cpuset")


def _expected_isolation(asked: str = "auto") -> str:
    """What ``isolation: auto`` (or ``cpuset``) gives for 1 CPU on this host: a cpuset needs
    one writable and 3 CPUs (2 if asked for explicitly)."""
    limit = _probe(asked)
    return "affinity" if limit is None else limit.isolation


def _expected_gomaxprocs(asked: str) -> int:
    """Go >= 1.25's own GOMAXPROCS for the service under a 1-CPU limit: max(2, ceil(1)) = 2,
    but never more than the CPUs it may run on (1 in the 1-CPU cpuset ``isolation: cpuset``
    takes on a 2-CPU host; 1 under affinity, which pins it to ceil(1) CPU)."""
    limit = _probe(asked)
    if limit is None:
        return 1
    return min(2, len(limit.service_cpus or os.sched_getaffinity(0)))


def _wait_http(url: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} never answered")


def _counter(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape(labels)}\s+(\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"{name}{labels} not found"
    return float(match.group(1))


def test_demo_builds_and_exposes_client_golang_names() -> None:
    binary = gobuild.build("demo")
    port = free_port()
    p = proc.start([str(binary), "-addr", f"127.0.0.1:{port}"], role="test-demo",
                   env={**os.environ, "GOMAXPROCS": "3", "FORCEGC_INTERVAL_MS": "100"})
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz")
        for _ in range(20):
            assert requests.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200
        time.sleep(0.5)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        p.stop()
    for name in DEMO_METRICS:
        assert re.search(rf"^{name}[ {{]", text, re.MULTILINE), name
    assert _counter(text, "go_sched_gomaxprocs_threads") == 3
    assert _counter(text, "go_gc_cycles_forced_gc_cycles_total") >= 2  # the 100 ms ticker
    assert 'le="0.0001"' in text  # fine buckets from 0.1 ms


def test_loadgen_holds_its_rate_open_loop() -> None:
    demo, loadgen = gobuild.build("demo"), gobuild.build("loadgen")
    port, lport = free_port(), free_port()
    service = proc.start([str(demo), "-addr", f"127.0.0.1:{port}"], role="test-demo")
    gen = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz")
        gen = proc.start([str(loadgen), "-target", f"http://127.0.0.1:{port}/", "-rate", "200",
                          "-listen", f"127.0.0.1:{lport}", "-max-duration", "60s"],
                         role="test-loadgen")
        _wait_http(f"http://127.0.0.1:{lport}/healthz")
        first = requests.get(f"http://127.0.0.1:{lport}/metrics", timeout=5).text
        t0 = time.monotonic()

        def three_seconds_of_load() -> tuple[str, float] | None:
            # 600 more requests scheduled: 3 s at the rate asked for. elapsed is read with the
            # counters, so a generator off its rate still gives its own rate (not 200).
            text = requests.get(f"http://127.0.0.1:{lport}/metrics", timeout=5).text
            elapsed = time.monotonic() - t0
            scheduled = (_counter(text, "loadgen_requests_scheduled_total")
                         - _counter(first, "loadgen_requests_scheduled_total"))
            return (text, elapsed) if scheduled >= 600 or elapsed >= 10 else None

        second, elapsed = until("600 requests scheduled", three_seconds_of_load, timeout=15,
                                every=0.1)
    finally:
        for p in (gen, service):
            if p is not None:
                p.stop()
    scheduled = (_counter(second, "loadgen_requests_scheduled_total")
                 - _counter(first, "loadgen_requests_scheduled_total"))
    ok = (_counter(second, "loadgen_requests_total", '{outcome="ok"}')
          - _counter(first, "loadgen_requests_total", '{outcome="ok"}'))
    assert scheduled / elapsed == pytest.approx(200, rel=0.1)
    assert ok / elapsed == pytest.approx(200, rel=0.15)


def test_loadgen_refuses_non_loopback_targets() -> None:
    code, out = proc.run([str(gobuild.build("loadgen")), "-target", "http://10.0.0.1:80/",
                          "-rate", "1", "-listen", "127.0.0.1:0"], timeout=10)
    assert code != 0 and "loopback" in out.lower()
    # -in-cluster (the generator's pod in a cluster) is refused outside a pod
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    code, out = proc.run([str(gobuild.build("loadgen")), "-in-cluster", "-target",
                          "http://10.0.0.1:80/", "-rate", "1", "-listen", ":0"], env=env,
                         timeout=10)
    assert code != 0 and "not in a Kubernetes pod" in out, out


def _local_experiment(tmp: Path, **extra: Any) -> Path:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "experiments" / "local.yaml").read_text())
    doc["name"] = "it-local"
    doc["baseline"]["repeats"] = 1
    doc["measure"] = {"warmup": "2s", "window": "5s",
                      "noise_guard": {"max_foreign_cores": 1.5, "retries": 1}}
    doc["study"] = {"trials": 2, "sampler": "random", "seed": 5}
    doc.update(extra)
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _ours_alive(tmp: Path) -> list[str]:
    """Processes from our registry that still run, and cgroups of ours still present."""
    left = []
    registry = tmp / "results" / "it-local" / "processes.json"
    if registry.exists():
        for e in json.loads(registry.read_text()):
            if proc.alive(e["pid"], e["started"]):
                left.append(f"{e['role']} {e['pid']}")
    roots = ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpuset",
             "/sys/fs/cgroup")
    for root in map(Path, roots):
        if root.exists():
            left += [str(p) for p in root.glob("autotune-it-local-*")]
    return left


def test_three_trial_study_records_every_metric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    exp = _local_experiment(tmp_path, measure={
        "warmup": "2s", "window": "5s", "schedtrace": True,
        "noise_guard": {"max_foreign_cores": 1.5, "retries": 1}},
        # judged but never screened (1000x): the short read from the real Prometheus works
        study={"trials": 2, "sampler": "random", "seed": 5,
               "screening": {"after": "4s", "factor": 1000}})
    # What experiments/local.yaml asks for (the demo's cpuset since 2026-12-05).
    asked = yaml.safe_load(exp.read_text())["target"]["local"].get("isolation", "auto")
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(exp), "--plain", "--no-confirm"]) == 0
    out = capsys.readouterr().out
    assert "2 search trials complete" in out
    records = [json.loads(x) for x in
               (tmp_path / "results" / "it-local" / "trials.jsonl").read_text().splitlines()]
    assert len(records) == 3
    for rec in records:
        assert rec["state"] == "COMPLETE", rec.get("failure")
        assert rec["unavailable"] == {}, rec["unavailable"]
        m = rec["metrics"]
        assert 0 < m["p99_latency"] < 5
        # local.yaml says rate: auto: every trial runs at the one calibrated rate.
        rate = rec["live"]["load_rate"]
        assert rate == records[0]["live"]["load_rate"] and rate > 0
        assert m["achieved_rps"] == pytest.approx(rate, rel=0.15)
        assert m["gomaxprocs"] >= 1 and m["gc_rate"] > 0
        assert rec["injections"] and rec["injections"][0]["in_cgroup"] is True
        assert rec["live"]["isolation"] == _expected_isolation(asked), rec["live"]
        # Inside the scheduler: schedtrace lines of the window (100 ms apart), heat maps and
        # the CPU breakdown from the same Prometheus, throttling from the demo's cgroup.
        trace = rec["schedtrace"]
        assert 40 <= len(trace["series"]["t_ms"]) <= 52, trace.get("unavailable")
        assert all(0 <= t <= 5000 for t in trace["series"]["t_ms"])
        assert trace["skipped"] == 0 and "fired" in trace["overflow"]
        assert trace["summary"]["threads_max"] >= 2
        insight = rec["insight"]
        assert set(insight["heat"]) == {"sched_latency", "gc_pause"}, insight["unavailable"]
        assert len(insight["heat"]["sched_latency"]["t"]) >= 2
        cpu = insight["cpu"]
        assert {"user", "gc", "idle", "total", "throttled_share"} <= cpu.keys(), insight
        # Read from the demo's cgroup (cpu.stat): present means exported and scraped; at 0.8 of
        # the quota a 5 s window may see no throttled period at all.
        assert 0 <= cpu["throttled_share"] <= 1
        assert 0 < cpu["user"] < cpu["total"]
        # Go >= 1.26's runnable gauge, one sample per 1 s scrape over the 5 s window
        runnable = insight["runnable"]
        assert runnable["source"].startswith("go_sched_goroutines_runnable_goroutines")
        assert 4 <= runnable["summary"]["samples"] <= 7, runnable
        assert runnable["summary"]["runq_total_p999"] == max(runnable["series"]["runnable"])
        assert "fired" in runnable["overflow"]
    for rec in records[1:]:  # search trials: p99 over the window's first 4 s, read live
        [early] = rec["early"]
        assert early["after"] == 4 and "unavailable" not in early and "verdict" not in early
        assert 0 < early["metrics"]["p99_latency"] < 5
    baseline = records[0]
    assert baseline["kind"] == "baseline" and "early" not in baseline
    # GOMAXPROCS unset: Go >= 1.25 picks it from the limit and the CPUs the service may use.
    assert baseline["live"]["gomaxprocs_effective"] == _expected_gomaxprocs(asked)
    assert _ours_alive(tmp_path) == []


def _start_run(tmp: Path, exp: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "autotune.cli", "run", str(exp), "--plain"],
                            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _wait_for_stress(tmp: Path, p: subprocess.Popen[str], timeout: float = 90) -> None:
    registry = tmp / "results" / "it-local" / "processes.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()[0]
        if registry.exists():
            try:
                entries = json.loads(registry.read_text())
            except json.JSONDecodeError:
                entries = []
            if any(e["role"] == "stress-ng" for e in entries):
                return
        time.sleep(0.1)
    raise AssertionError("stress never started")


def test_sigterm_mid_window_leaves_nothing_running(tmp_path: Path) -> None:
    exp = _local_experiment(tmp_path)
    p = _start_run(tmp_path, exp)
    _wait_for_stress(tmp_path, p)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 130, out
    assert _ours_alive(tmp_path) == []


def test_sigkill_leftovers_are_stopped_by_cleanup(tmp_path: Path) -> None:
    exp = _local_experiment(tmp_path)
    p = _start_run(tmp_path, exp)
    _wait_for_stress(tmp_path, p)
    os.killpg(p.pid, signal.SIGKILL)  # only the autotune process group; children have their own
    p.communicate(timeout=10)
    assert _ours_alive(tmp_path), "a SIGKILL leaves the service and stress behind"
    done = subprocess.run([sys.executable, "-m", "autotune.cli", "cleanup", str(exp)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "stress-ng" in done.stdout and "service" in done.stdout
    assert _ours_alive(tmp_path) == []
    # ... and the private Prometheus's data with it (review finding: only the next run's
    # Prometheus removed it)
    assert list((tmp_path / "results" / "it-local").glob("prometheus-*")) == []


def test_users_own_service_without_go_runtime_metrics(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    echo = gobuild.build("echo")
    exp = _local_experiment(tmp_path, target={"local": {
        "command": [str(echo), "--port", "{port}"], "health": "/ready", "metrics_path": "/stats",
        "env": {"ECHO_GREETING": "hi"}, "cpus": 1.0,
        "load": {"rate": 200, "path": "/ping", "headers": {"X-Test": "1"}},
    }})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(exp), "--plain", "--trials", "1", "--no-confirm"]) == 0
    records = [json.loads(x) for x in
               (tmp_path / "results" / "it-local" / "trials.jsonl").read_text().splitlines()]
    assert [r["state"] for r in records] == ["COMPLETE", "COMPLETE"]
    rec = records[-1]
    assert rec["metrics"]["achieved_rps"] == pytest.approx(200, rel=0.15)
    assert "p99_latency" in rec["metrics"] and "server_p99" in rec["metrics"]
    # No Go runtime metrics on /stats: the diagnostics are unavailable, with a reason.
    for name in ("gc_pause_p99", "p_idle_fraction", "gomaxprocs"):
        assert name in rec["unavailable"] and "no series" in rec["unavailable"][name]
    assert _ours_alive(tmp_path) == []


# --- the platform's pieces, driven directly ----------------------------------------------------

STACK_EXPERIMENT = """
name: it-stack
target: {local: {workload: demo, cpus: 1.0, isolation: ISOLATION,
                 load: {rate: RATE, connections: 16}}}
parameters:
  - {name: GOMAXPROCS, type: int, values: [1, 2]}
chaos: {stress: {workers: 2, load: 25}}
measure: {warmup: 3s, window: 4s}
metrics: {p99: 'sum(up{ {{selector}} })'}
objective: {minimize: p99}
"""


def _stack(tmp: Path, rate: str = "100",
           isolation: str = "auto") -> tuple[Experiment, Backends, LocalService]:
    exp = parse_experiment(STACK_EXPERIMENT.replace("RATE", rate)
                           .replace("ISOLATION", isolation))
    backends = build(exp, tmp, SystemClock())
    assert isinstance(backends.target, LocalService)
    return exp, backends, backends.target


def _teardown(b: Backends) -> None:
    b.injector.cleanup()
    b.target.restore()
    b.source.close()


def _cpus_allowed(pid: int) -> list[int]:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.MULTILINE)
    assert match, status
    return cgroups.parse_cpu_list(match.group(1))


def _cpuset_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cpuset").read_text().strip()


def test_cpuset_puts_service_and_stress_on_their_own_cpu_and_the_rest_elsewhere(
        tmp_path: Path) -> None:
    if _expected_isolation("cpuset") != "cpuset":
        pytest.skip("this host allows no cpuset (see `autotune doctor`)")
    exp, b, target = _stack(tmp_path, isolation="cpuset")
    limit = target.limit
    own_before = _cpuset_of(os.getpid())
    try:
        live = b.target.apply(to_env(exp, {"GOMAXPROCS": 2}))
        b.source.observe(live)
        inj = b.injector.inject(live, Stress(workers=2, load=25), 20, {})
        assert live.details["isolation"] == "cpuset"
        service_cpus, tools_cpus = live.details["service_cpus"], live.details["tools_cpus"]
        assert service_cpus == limit.service_cpus and not set(service_cpus) & set(tools_cpus)
        assert len(tools_cpus) == 1 and sorted(service_cpus + tools_cpus) == sorted(
            os.sched_getaffinity(0) | set(service_cpus))
        assert target.service is not None and target.loadgen is not None
        service_set = f"/{limit.name}/service"
        in_service = [target.service.pid, *inj.details["workers"]]
        for pid in in_service:
            assert _cpuset_of(pid) == service_set, pid
            assert _cpus_allowed(pid) == service_cpus, pid
        prometheus = [e.pid for e in target.registry.entries() if e.role == "prometheus"]
        for pid in [target.loadgen.pid, *prometheus, os.getpid()]:
            assert _cpuset_of(pid) == f"/{limit.name}/tools", pid
            assert _cpus_allowed(pid) == tools_cpus, pid
        b.injector.recover(inj)
    finally:
        _teardown(b)
    assert _cpuset_of(os.getpid()) == own_before
    assert not list(Path("/sys/fs/cgroup/cpuset").glob(f"{limit.name}*"))


def test_rate_auto_calibrates_once_and_loads_a_fraction_of_capacity(tmp_path: Path) -> None:
    exp, b, target = _stack(tmp_path, rate="auto")
    try:
        t0 = time.monotonic()
        live = b.target.apply(to_env(exp, {"GOMAXPROCS": 1}))
        first_apply = time.monotonic() - t0
        cal = target.calibration
        assert cal is not None and cal.capacity is not None, cal
        assert cal.rate == round(0.5 * cal.capacity) == live.details["load_rate"]
        assert cal.seconds <= calibrate.BUDGET + 3 and first_apply < calibrate.BUDGET + 10
        assert any(not s.record()["stable"] for s in cal.steps) or cal.note
        facts = b.target.describe()
        assert facts["load_rate"] == cal.rate
        assert facts["load_calibration"]["capacity"] == cal.capacity
        assert facts["load_calibration"]["steps"][0]["rate"] == calibrate.START_RATE
        assert target.loadgen is not None
        argv = Path(f"/proc/{target.loadgen.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[argv.index(b"-rate") + 1] == f"{cal.rate:g}".encode()
        b.target.apply(to_env(exp, {"GOMAXPROCS": 2}))
        assert target.calibration is cal  # once per run
    finally:
        _teardown(b)
    print(f"calibration: capacity {cal.capacity}/s, rate {cal.rate}/s, {cal.seconds:.1f}s, "
          f"steps {[(s.rate, s.record()['stable']) for s in cal.steps]}")


def test_the_next_generation_is_scraped_before_it_starts(tmp_path: Path) -> None:
    exp, b, _ = _stack(tmp_path)
    source = b.source
    assert isinstance(source, PrometheusSource)
    try:
        live = b.target.apply(to_env(exp, {"GOMAXPROCS": 1}))
        source.observe(live)
        # Generation 2 was announced at generation 1's apply; give Prometheus its update ticks.
        targets_scraped(source, 2, timeout=15)
        assert source._query('count(up{autotune_generation="2"} == 1)', time.time()) != 2.0
        live = b.target.apply(to_env(exp, {"GOMAXPROCS": 2}))
        assert live.details["generation"] == 2
        t0 = time.monotonic()
        source.observe(live)
        assert time.monotonic() - t0 < 0.5
        # Up within two scrape intervals of its start (the bound the fixed sleep gave).
        targets_scraped(source, 2, up=True, timeout=2 * exp.prometheus.scrape_interval + 0.5)
    finally:
        _teardown(b)


def test_capture_takes_a_trace_and_a_profile_of_both_under_stress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """measure.capture: the baseline and the recommendation, each applied, warmed up, stressed
    in its cgroup and captured (net/http/pprof, DEBUG_PPROF set by the target); then restored."""
    from autotune.study import storage as st
    from autotune.study.profiles import capture_pair

    monkeypatch.chdir(tmp_path)
    path = _local_experiment(tmp_path, measure={
        "warmup": "1s", "window": "4s", "capture": ["trace", "cpu"]})
    doc = yaml.safe_load(path.read_text())
    doc["target"]["local"]["load"]["rate"] = 100
    exp = parse_experiment(yaml.safe_dump(doc))
    studies = st.open_for_run(exp, f"sqlite:///{tmp_path}/study.db")
    results = tmp_path / "results" / exp.name
    clock = SystemClock()
    backends = build(exp, results, clock)
    try:
        done = capture_pair(exp, studies, backends, clock, {"GOMAXPROCS": 2, "GOGC": 400,
                                                            "forcegc_interval_ms": 0},
                            seconds=2)
        stress_seen = [e for e in json.loads((results / "processes.json").read_text())
                       if e["role"] == "stress-ng"] if (results / "processes.json").exists() else []
    finally:
        backends.injector.cleanup()
        backends.target.restore()
        backends.source.close()
    assert [c["name"] for c in done] == ["baseline", "recommended"]
    for c in done:
        assert "failure" not in c, c["failure"]
        files = {f["kind"]: f for f in c["files"]}
        assert set(files) == {"trace", "cpu"}
        trace = Path(files["trace"]["path"]).read_bytes()
        assert trace.startswith(b"go 1.") and len(trace) > 10_000
        assert Path(files["cpu"]["path"]).read_bytes()[:2] == b"\x1f\x8b"
        assert files["cpu"]["open_with"].startswith("go tool pprof")
    assert studies.search.user_attrs["captures"] == done
    assert stress_seen == [], "no stress left running"
    assert _ours_alive(tmp_path) == []


def test_the_build_is_identified_by_its_hash_and_go_version() -> None:
    """The nightly fingerprint's local fields: read from the binary before any trial."""
    import hashlib

    binary = gobuild.build("demo")
    facts = gobuild.binary_facts(binary)
    assert facts["binary_sha256"] == hashlib.sha256(binary.read_bytes()).hexdigest()
    _, _, version = gobuild.go_version(gobuild.find_go())
    assert facts["go_version"] == version
    assert gobuild.binary_facts(ROOT / "README.md") == {
        "binary_sha256": hashlib.sha256((ROOT / "README.md").read_bytes()).hexdigest()}


def test_three_storms_each_in_its_own_window_and_nothing_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """chaos.scenarios on the real stack: a quiet window, one with CPU and memory stress
    (stress-ng --cpu and --vm in the service's cgroup), one with a goroutine of the demo holding
    its P (/debug/chaos/blocked-p); the demo's own counter of held seconds rises in the held
    window only."""
    exp = _local_experiment(tmp_path)
    doc = yaml.safe_load(exp.read_text())
    doc["study"]["trials"] = 1
    doc["chaos"] = {"scenarios": [
        {"name": "quiet"},
        {"name": "hungry", "stress": {"workers": 1, "load": 25,
                                      "memory": {"workers": 1, "size": "32MB"}}},
        {"name": "held", "blocked_p": {"goroutines": 1, "hold": "20ms", "gap": "20ms"}}]}
    doc["metrics"]["held_p"] = ("sum(increase(demo_blocked_p_held_seconds_total{ {{selector}} }"
                                "[{{window}}]))")
    exp.write_text(yaml.safe_dump(doc))
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(exp), "--plain", "--no-confirm"]) == 0
    records = [json.loads(x) for x in
               (tmp_path / "results" / "it-local" / "trials.jsonl").read_text().splitlines()]
    assert [r["state"] for r in records] == ["COMPLETE", "COMPLETE"], records[-1].get("failure")
    for rec in records:
        assert sorted(w["name"] for w in rec["scenarios"]) == ["held", "hungry", "quiet"]
        m = rec["metrics"]
        assert m["held_p@held"] > 0.5 and m["held_p@quiet"] == 0 and m["held_p@hungry"] == 0
        assert m["p99_latency"] == max(m[f"p99_latency@{s}"] for s in ("quiet", "hungry", "held"))
        hungry = next(i for i in rec["injections"] if i["scenario"] == "hungry")
        assert hungry["in_cgroup"] is True and len(hungry["workers"]) >= 2  # --cpu and --vm
        held = next(i for i in rec["injections"] if i["scenario"] == "held")
        assert held["kind"] == "held Ps" and "recovered" in held
    # the order rotates with the trial's number in its study (baseline and search count apart)
    order = ["quiet", "hungry", "held"]
    assert all(r["scenarios"][0]["name"] == order[r["number"] % 3] for r in records)
    assert _ours_alive(tmp_path) == []
