"""A real `autotune run` process on the simulated world: interrupts, kills and resumes."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
import yaml

from autotune.platforms.simulated import World

EXPERIMENT = {
    "name": "sig",
    "target": {"simulated": {"optimum": {"GOMAXPROCS": 2}, "unset": {"GOMAXPROCS": 8},
                             "state_file": "world.json"}},
    "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 16}],
    "baseline": {"repeats": 1},
    "chaos": {"stress": {"workers": 1, "load": 50}},
    "measure": {"warmup": "100ms", "window": "600ms"},
    "metrics": {"p99": "surface"},
    "objective": {"minimize": "p99"},
    "study": {"trials": 6, "sampler": "random", "seed": 1, "heartbeat": "1s"},
}


def _start(tmp: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "run", "exp.yaml", "--plain", "--no-confirm",
         *args],
        cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
        # As from a terminal: the tests may run under nohup (CI), whose ignored SIGHUP the
        # child would inherit, and autotune respects.
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )


def _journal(tmp: Path) -> list[dict]:  # type: ignore[type-arg]
    path = tmp / "results" / "sig" / "trials.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _wait_for_completed(tmp: Path, n: int, p: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for r in _journal(tmp) if r["state"] == "COMPLETE") >= n:
            return
        assert p.poll() is None, p.communicate()[0]
        time.sleep(0.05)
    raise AssertionError("no progress")


def _wait_for_injection(world: World, p: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if world.load()["active"]:
            return
        assert p.poll() is None
        time.sleep(0.01)
    raise AssertionError("never injected")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(EXPERIMENT))
    return tmp_path


def _completed_numbers(workdir: Path) -> set[tuple[str, int]]:
    return {(r["kind"], r["number"]) for r in _journal(workdir) if r["state"] == "COMPLETE"}


# SIGHUP: review finding, a dropped SSH session ended the run by the default action, the
# service, Prometheus and the cgroup left behind.
@pytest.mark.serial  # a signal aimed at a 0.6 s window: not beside another test process
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_signal_mid_window_exits_130_keeps_trials_and_resumes(workdir: Path,
                                                              sig: signal.Signals) -> None:
    world = World(workdir / "world.json")
    p = _start(workdir)
    _wait_for_completed(workdir, 2, p)
    _wait_for_injection(world, p)  # now inside a stress window
    p.send_signal(sig)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 130, out
    assert "interrupted" in out and "Traceback" not in out
    state = world.load()
    assert state["active"] == {}, "stress left active"
    assert state["applied"] is None, "target not restored"
    done_before = _completed_numbers(workdir)
    interrupted = [r for r in _journal(workdir) if r["state"] == "FAIL"]
    assert interrupted and interrupted[-1]["failure"] == f"interrupted ({sig.name})"

    p2 = _start(workdir)
    out2, _ = p2.communicate(timeout=120)
    assert p2.returncode == 0, out2
    assert "6 search trials complete" in out2
    assert done_before <= _completed_numbers(workdir)
    assert World(workdir / "world.json").load()["active"] == {}


@pytest.mark.serial  # a signal aimed at a 0.6 s window: not beside another test process
@pytest.mark.parametrize("display", [["--plain"], []], ids=["plain", "live-panel"])
def test_a_hung_up_terminal_still_gives_130_with_everything_undone(workdir: Path,
                                                                   display: list[str]) -> None:
    # Review finding: after a dropped SSH session every write to the terminal fails (EIO), and
    # the "interrupted" message raised out of main: exit 1 (the undo was done). A real pty, the
    # run its session's controlling process, then the terminal's other end closed: the kernel
    # sends the SIGHUP, as sshd's exit does.
    world = World(workdir / "world.json")
    master, slave = os.openpty()

    def as_on_a_terminal() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # after start_new_session's setsid

    p = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "run", "exp.yaml", *display, "--no-confirm",
         "--trials", "6"], cwd=workdir, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
        preexec_fn=as_on_a_terminal)
    os.close(slave)
    said: list[bytes] = []
    reading = threading.Event()
    reading.set()

    def drain() -> None:  # so the run never blocks on a full terminal
        while reading.is_set():
            if select.select([master], [], [], 0.05)[0]:
                try:
                    said.append(os.read(master, 65536))
                except OSError:
                    return

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        _wait_for_completed(workdir, 2, p)
        _wait_for_injection(world, p)
    finally:
        reading.clear()
        reader.join()
        os.close(master)  # the hangup
    assert p.wait(timeout=60) == 130, b"".join(said)[-2000:]
    state = world.load()
    assert state["active"] == {}, "stress left active"
    assert state["applied"] is None, "target not restored"
    interrupted = [r for r in _journal(workdir) if r["state"] == "FAIL"]
    assert interrupted and interrupted[-1]["failure"] == "interrupted (SIGHUP)"


@pytest.mark.serial  # a signal aimed at a 0.6 s window: not beside another test process
def test_under_nohup_a_sighup_is_ignored_as_asked(workdir: Path) -> None:
    world = World(workdir / "world.json")
    p = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "run", "exp.yaml", "--plain", "--no-confirm",
         "--trials", "3"], cwd=workdir, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # what nohup does
    _wait_for_completed(workdir, 2, p)
    _wait_for_injection(world, p)
    p.send_signal(signal.SIGHUP)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    assert "3 search trials complete" in out


def _killed_while_stressing(workdir: Path, completed: int) -> World:
    """A run SIGKILLed with a trial's stress injected, after ``completed`` trials."""
    world = World(workdir / "world.json")
    p = _start(workdir)
    _wait_for_completed(workdir, completed, p)
    _wait_for_injection(world, p)
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=10)
    assert world.load()["active"], "the kill left the injection (that is the point)"
    return world


@pytest.mark.serial  # a signal aimed at a 0.6 s window: not beside another test process
def test_sigkill_then_rerun_fails_the_orphan_retries_it_and_cleans_up(workdir: Path) -> None:
    world = _killed_while_stressing(workdir, 2)
    done_before = _completed_numbers(workdir)

    p2 = _start(workdir)
    out2, _ = p2.communicate(timeout=120)
    assert p2.returncode == 0, out2
    assert "died" in out2 and "queued again" in out2
    assert "left over from an earlier run, removed: simulated injection" in out2
    assert "6 search trials complete" in out2
    assert done_before <= _completed_numbers(workdir)
    state = world.load()
    assert state["active"] == {} and state["applied"] is None
    assert any(e.get("cleaned_up") for e in state["history"])


def test_status_after_run(workdir: Path) -> None:
    p = _start(workdir, "--trials", "2")
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    status = subprocess.run([sys.executable, "-m", "autotune.cli", "status", "exp.yaml", "--json"],
                            cwd=workdir, capture_output=True, text=True, check=True)
    data = json.loads(status.stdout)
    assert data["completed"] == 2 and len(data["trials"]) == 3
    text = subprocess.run([sys.executable, "-m", "autotune.cli", "status", "exp.yaml"],
                          cwd=workdir, capture_output=True, text=True, check=True).stdout
    assert "search trials: 2/6 complete" in text and "best search trial: #" in text


def test_run_confirms_by_default_and_prints_the_verdict(workdir: Path) -> None:
    p = subprocess.Popen([sys.executable, "-m", "autotune.cli", "run", "exp.yaml", "--plain",
                          "--trials", "3", "--top", "2", "--repeats", "2"],
                         cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    # On ADOPT the line names the variables it adopts (`verdict: ADOPT GOMAXPROCS=2 - ...`).
    assert re.search(r"^verdict: (ADOPT( [A-Z0-9_]+=\S+)+|KEEP CURRENT|INCONCLUSIVE) - ", out,
                     re.MULTILINE), out
    confirms = [r for r in _journal(workdir) if r["kind"] == "confirm"]
    # Sequential: round 1 holds the 2 candidates and the baseline; a second round (at most
    # --repeats 2) the best and what is not yet decided against it (baseline, runner-up).
    assert len(confirms) in (3, 3 + 2, 3 + 3), confirms
    assert "3 search trials complete" in out


@pytest.mark.parametrize("command", [["status"], ["report"], ["history"],
                                     ["export", "--format", "env"]])
def test_reading_a_study_that_is_not_there_creates_no_database(
        workdir: Path, command: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Review finding: the read-only commands created results/<name>/study.db (and, from the
    three-slash mistake, ./nonexistent/dir/x.db) and then said there was no study in it."""
    from autotune.cli import main

    monkeypatch.chdir(workdir)
    for storage in ([], ["--storage", "sqlite:///nonexistent/dir/x.db"]):
        assert main([command[0], "exp.yaml", *command[1:], *storage]) == 1
        err = capsys.readouterr().err
        assert "no study database at" in err and "four slashes" in err, err
    assert sorted(p.name for p in workdir.rglob("*")) == ["exp.yaml"]


@pytest.mark.serial  # a signal aimed at a 0.6 s window: not beside another test process
def test_confirm_after_a_killed_run_removes_what_it_left_first(workdir: Path) -> None:
    # Review finding: `autotune confirm` did no start-up cleanup (`run` does): it measured with
    # the killed run's stress still injected, and on a cluster adopted the dead run's saved
    # original as its own (restoring it into the wrong container when that run tuned another).
    world = _killed_while_stressing(workdir, 3)
    confirm = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "confirm", "exp.yaml", "--plain", "--top", "1",
         "--repeats", "1"],
        cwd=workdir, env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True,
        text=True, timeout=120)
    out = confirm.stdout + confirm.stderr
    assert confirm.returncode == 0, out
    assert "left over from an earlier run, removed: simulated injection" in out
    assert world.load()["active"] == {} and world.load()["applied"] is None


def test_confirm_refuses_a_study_of_another_environment_before_touching_it(
        workdir: Path) -> None:
    # Review finding: `autotune confirm` compared nothing: after a rollout of a new image (here
    # the simulated world's noise, a field it declares) it measured runs of the new environment
    # into the study of the old one, to be judged with the old runs.
    p = _start(workdir, "--trials", "2")
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    before = _journal(workdir)
    doc = yaml.safe_load((workdir / "exp.yaml").read_text())
    doc["target"]["simulated"]["noise"] = 0.09
    (workdir / "exp.yaml").write_text(yaml.safe_dump(doc))
    confirm = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "confirm", "exp.yaml", "--plain", "--top", "1",
         "--repeats", "1"],
        cwd=workdir, capture_output=True, text=True, timeout=120)
    out = confirm.stdout + confirm.stderr
    assert confirm.returncode == 1, out
    assert "was measured on another environment (noise: 0.03 -> 0.09)" in out, out
    assert _journal(workdir) == before  # nothing measured
    status = subprocess.run([sys.executable, "-m", "autotune.cli", "status", "exp.yaml", "--json"],
                            cwd=workdir, capture_output=True, text=True, check=True)
    assert "confirm" not in {t.get("kind") for t in json.loads(status.stdout)["trials"]}


@pytest.mark.parametrize("command", ["run", "cleanup"])
def test_a_state_file_that_is_not_a_worlds_is_never_replaced(workdir: Path,
                                                              command: str) -> None:
    # Review finding: `target.simulated.state_file: notes.txt` replaced the user's notes with
    # the world's state (a file that did not read as JSON was taken for an empty world), and
    # its temporary file notes.tmp replaced theirs too; `autotune cleanup` said "nothing to
    # clean up" while doing it.
    doc = {**EXPERIMENT, "target": {"simulated": {**EXPERIMENT["target"]["simulated"],
                                                  "state_file": "notes.txt"}}}
    (workdir / "exp.yaml").write_text(yaml.safe_dump(doc))
    (workdir / "notes.txt").write_text("precious user data\n")
    (workdir / "notes.tmp").write_text("more of it\n")
    args = ["run", "exp.yaml", "--plain"] if command == "run" else ["cleanup", "exp.yaml"]
    done = subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=workdir,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "notes.txt (target.simulated.state_file) is not a simulated world's state" \
        in done.stderr
    assert (workdir / "notes.txt").read_text() == "precious user data\n"
    assert (workdir / "notes.tmp").read_text() == "more of it\n"
    assert not (workdir / "notes.txt.lock").exists()
