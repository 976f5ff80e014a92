"""benchmarks.workers: a benchmark stopped by a signal leaves none of its worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _wait_here(folder: str) -> int:
    """A job that says it runs (its PID in ``folder``) and then works for at most a minute."""
    Path(folder, str(os.getpid())).touch()
    time.sleep(60)
    return os.getpid()


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an exited worker whose reaper is slow)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _until(condition: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_benchmark_stopped_by_sigterm_leaves_no_worker(tmp_path: Path) -> None:
    # Before benchmarks.workers, whole_run's ProcessPoolExecutor workers outlived a parent
    # stopped by SIGTERM (two of them 80 minutes later).
    code = ("from benchmarks.workers import map_jobs\n"
            "from tests.unit.test_benchmark_workers import _wait_here\n"
            f"map_jobs(_wait_here, [{str(tmp_path)!r}] * 2, 2)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _until(lambda: len(list(tmp_path.iterdir())) == 2, 60, "two workers started")
        workers = [int(p.name) for p in tmp_path.iterdir()]
        assert all(_alive(w) for w in workers)
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=30)
        _until(lambda: not any(_alive(w) for w in workers), 30,
               f"the workers {workers} outlived their parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for w in (int(p.name) for p in tmp_path.iterdir()):
            if _alive(w):
                os.kill(w, signal.SIGKILL)
