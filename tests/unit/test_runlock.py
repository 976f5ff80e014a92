"""One run at a time per local experiment and per simulated world (issue 16, "Concurrency and
files"): a second `autotune run` or an `autotune cleanup` refuses while a run holds the lock,
naming the holder's PID and start time, and leaves the first run alone; a SIGKILLed holder never
blocks the next run."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.errors import TargetError
from autotune.experiment import parse_experiment
from autotune.platforms.simulated import World

SIMULATED = {
    "name": "twice",
    "target": {"simulated": {"optimum": {"GOMAXPROCS": 2}, "unset": {"GOMAXPROCS": 8},
                             "state_file": "world.json"}},
    "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 16}],
    "baseline": {"repeats": 1},
    "chaos": {"stress": {"workers": 1, "load": 50}},
    "measure": {"warmup": "100ms", "window": "400ms"},
    "metrics": {"p99": "surface"},
    "objective": {"minimize": "p99"},
    "study": {"trials": 3, "sampler": "random", "seed": 1, "heartbeat": "1s"},
}

LOCAL = {
    "name": "lockedlocal",
    "target": {"local": {"workload": "demo", "cpus": 1.0, "load": {"rate": 100}}},
    "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 4}],
    "chaos": {"stress": {"workers": 1, "load": 30}},
    "measure": {"warmup": "1s", "window": "4s"},
    "metrics": {"p99": "sum(up{ {{selector}} })"},
    "objective": {"minimize": "p99"},
}

STARTED_RE = re.compile(r"started (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)")


def _started(text: str) -> float:
    found = STARTED_RE.search(text)
    assert found, f"no start time in {text!r}"
    return dt.datetime.fromisoformat(found.group(1).replace("Z", "+00:00")).timestamp()


def _poll(condition: Callable[[], bool], p: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        assert p.poll() is None, p.communicate()[0]
        time.sleep(0.02)
    raise AssertionError("timed out")


def _journal(tmp: Path, name: str) -> list[dict]:  # type: ignore[type-arg]
    path = tmp / "results" / name / "trials.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(SIMULATED))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.serial  # the first run must still be in its window: not beside another test process
def test_a_second_run_of_a_simulated_world_refuses_and_the_first_is_undisturbed(
        sim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = time.time()
    first = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "run", "exp.yaml", "--plain", "--no-confirm"],
        cwd=sim, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        world = World(sim / "world.json")
        _poll(lambda: bool(world.load()["active"]), first)  # the first run is in a window
        capsys.readouterr()
        assert main(["run", "exp.yaml", "--plain", "--no-confirm"]) == 1
        err = capsys.readouterr().err
        assert f"pid {first.pid}" in err, err
        assert before - 1 <= _started(err) <= time.time(), err
        # cleanup refuses as well: it would remove the live run's stress
        assert main(["cleanup", "exp.yaml"]) == 1
        err = capsys.readouterr().err
        assert f"pid {first.pid}" in err, err
        out, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate()
    assert first.returncode == 0, out
    assert "3 search trials complete" in out, out
    records = _journal(sim, "twice")
    assert [r["kind"] for r in records].count("baseline") == 1, "the baseline ran twice"
    assert all(r["state"] == "COMPLETE" for r in records), records
    state = World(sim / "world.json").load()
    assert not any(e.get("cleaned_up") for e in state["history"]), "stress removed under it"


def test_two_workers_with_their_own_worlds_both_run(tmp_path: Path) -> None:
    """Several workers of one study (tests/integration/test_postgres_workers.py) share the
    results directory, each with its own simulated world: the lock is the world's."""
    from autotune.backends import build
    from autotune.clock import FakeClock

    docs = [{**SIMULATED, "target": {"simulated": {
        **SIMULATED["target"]["simulated"],  # type: ignore[dict-item]
        "state_file": str(tmp_path / f"w{n}.json")}}} for n in (1, 2)]
    holder = _hold(tmp_path, "simulated", yaml.safe_dump(docs[0]))
    try:
        with pytest.raises(TargetError, match=f"pid {holder.pid}"):
            build(parse_experiment(yaml.safe_dump(docs[0])), tmp_path / "results", FakeClock())
        # another world: no conflict
        build(parse_experiment(yaml.safe_dump(docs[1])), tmp_path / "results", FakeClock())
    finally:
        _end(holder)


HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path

    import yaml

    from autotune.backends import build
    from autotune.clock import SystemClock
    from autotune.experiment import parse_experiment

    exp = parse_experiment(Path(sys.argv[1]).read_text())
    backends = build(exp, Path("results") / exp.name, SystemClock())
    print("holding", flush=True)
    sys.stdin.readline()
""")


def _hold(tmp: Path, kind: str, text: str) -> subprocess.Popen[str]:
    """A process that built the backends of the experiment ``text`` (and so holds its lock)
    until its stdin is closed."""
    path = tmp / f"holder-{kind}.yaml"
    path.write_text(text)
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], cwd=tmp,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.strip() == "holding", line + p.communicate()[0]
    return p


def _end(p: subprocess.Popen[str]) -> None:
    if p.poll() is None:
        p.kill()
    p.communicate()


@pytest.fixture
def local_exp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    doc = {**LOCAL, "name": f"lockedlocal{os.getpid()}"}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.chdir(tmp_path)
    yield path


def test_a_local_experiment_held_by_a_run_refuses_cleanup_and_a_second_run(
        local_exp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.clock import SystemClock
    from autotune.platforms.local.stack import build

    exp = parse_experiment(local_exp.read_text())
    before = time.time()
    holder = _hold(local_exp.parent, "local", local_exp.read_text())
    try:
        with pytest.raises(TargetError, match=f"pid {holder.pid}") as refused:
            build(exp, Path("results") / exp.name, SystemClock())
        assert before - 1 <= _started(str(refused.value)) <= time.time()
        capsys.readouterr()
        assert main(["cleanup", str(local_exp)]) == 1
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "run.lock" in err, err
        # A holder that is SIGKILLed lets go at once: the kernel drops its lock.
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
        assert main(["cleanup", str(local_exp)]) == 0
    finally:
        _end(holder)


def test_a_killed_holders_children_do_not_keep_the_lock(tmp_path: Path) -> None:
    """What a SIGKILLed local run leaves running (service, stress-ng: started by proc.start)
    must not hold the lock: the next run takes it and stops them."""
    from autotune.runlock import RunLock

    script = textwrap.dedent(f"""
        from pathlib import Path
        from autotune.platforms.local import proc
        from autotune.runlock import RunLock
        lock = RunLock(Path({str(tmp_path / "run.lock")!r}))
        lock.acquire()
        child = proc.start(["sleep", "60"], role="sleeper")
        print(child.pid, flush=True)
        import sys
        sys.stdin.readline()
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    child = int(holder.stdout.readline())
    try:
        lock = RunLock(tmp_path / "run.lock")
        with pytest.raises(TargetError, match=f"pid {holder.pid}"):
            lock.acquire()
        holder.kill()
        holder.communicate()
        assert Path(f"/proc/{child}").exists(), "the child outlives its killed parent"
        lock.acquire()
        assert lock.held
        lock.release()
    finally:
        _end(holder)
        with __import__("contextlib").suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_one_process_may_take_its_own_lock_again_until_the_last_release(tmp_path: Path) -> None:
    from autotune.runlock import RunLock

    path = tmp_path / "run.lock"
    first, second = RunLock(path), RunLock(path)
    first.acquire()
    holder = json.loads(path.read_text())
    assert holder["pid"] == os.getpid() and holder["host"] and holder["started"]
    second.acquire()  # the same process: a second build of the same backends
    probe = [sys.executable, "-c",
             f"from autotune.runlock import RunLock; RunLock(__import__('pathlib').Path("
             f"{str(path)!r})).acquire()"]

    def free() -> bool:
        return subprocess.run(probe, capture_output=True).returncode == 0

    first.release()
    assert not free(), "released while another RunLock of the process still holds it"
    second.release()
    assert free()


def test_a_second_run_of_a_replayed_experiment_refuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Two runs of one replayed experiment would both enqueue its baseline and design.
    (tmp_path / "grid.csv").write_text(
        "order,config,repeat,state,p99\n0,GOMAXPROCS=1,0,COMPLETE,0.01\n")
    text = yaml.safe_dump({
        "name": "replaylock", "target": {"replay": {"grid": "grid.csv"}},
        "parameters": [{"name": "GOMAXPROCS", "type": "int", "values": [1, 2]}],
        "chaos": {"stress": {"workers": 1, "load": 50}},
        "metrics": {"p99": "p99"}, "objective": {"minimize": "p99"}})
    (tmp_path / "exp.yaml").write_text(text)
    (tmp_path / "results" / "replaylock").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    holder = _hold(tmp_path, "replay", text)
    try:
        capsys.readouterr()
        assert main(["run", "exp.yaml", "--plain"]) == 1
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "replay.lock" in err, err
        assert not (tmp_path / "results" / "replaylock" / "study.db").exists()
    finally:
        _end(holder)
