"""Two `autotune run` of one local experiment at once (issue 16, "Concurrency and files"): the
second refuses at once with the holder's PID and start time, `autotune cleanup` refuses too,
and the first run is not disturbed: its trials complete, its baseline runs once, its registry
and its cgroups stay its own."""

from __future__ import annotations

import datetime as dt
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
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
NAME = f"it-two-{os.getpid()}"


def _experiment(tmp: Path) -> Path:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "experiments" / "local.yaml").read_text())
    doc["name"] = NAME
    doc["target"]["local"]["load"] = {"rate": 100, "path": "/", "connections": 16}
    doc["baseline"]["repeats"] = 1
    # Other processes on a busy CI host are not what this test is about.
    doc["measure"] = {"warmup": "1s", "window": "4s", "noise_guard": {"enabled": False}}
    # Three search trials: the first run is still going while the second and the cleanup are
    # refused (each a Python start of a few seconds, many more on a loaded host).
    doc["study"] = {"trials": 3, "sampler": "random", "seed": 5}
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=tmp,
                          capture_output=True, text=True, timeout=120)


def _registry(tmp: Path) -> list[dict[str, Any]]:
    try:
        return list(json.loads((tmp / "results" / NAME / "processes.json").read_text()))
    except (OSError, ValueError):
        return []


def _our_cgroups() -> list[str]:
    found = []
    for root in map(Path, ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct",
                           "/sys/fs/cgroup/cpuset", "/sys/fs/cgroup")):
        if root.exists():
            found += sorted({p.name for p in root.glob(f"autotune-{NAME}-*")})
    return sorted(set(found))


def _started(text: str) -> float:
    found = re.search(r"started (\S+Z)", text)
    assert found, text
    return dt.datetime.fromisoformat(found.group(1).replace("Z", "+00:00")).timestamp()


def test_a_second_local_run_refuses_and_the_first_is_undisturbed(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    before = time.time()
    first = subprocess.Popen([sys.executable, "-m", "autotune.cli", "run", str(exp), "--plain",
                              "--no-confirm"], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not any(e["role"] == "stress-ng" for e in _registry(tmp_path)):
            assert first.poll() is None, first.communicate()[0]
            assert time.monotonic() < deadline, "stress never started"
            time.sleep(0.1)
        # The first run is inside a stressed window now.
        second = _cli(tmp_path, "run", str(exp), "--plain", "--no-confirm")
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"pid {first.pid}" in second.stderr, second.stderr
        assert before - 1 <= _started(second.stderr) <= time.time()
        cleanup = _cli(tmp_path, "cleanup", str(exp))
        assert cleanup.returncode == 1, cleanup.stdout + cleanup.stderr
        assert f"pid {first.pid}" in cleanup.stderr and "removed" not in cleanup.stdout
        # Everything running is the first run's: nothing of the refused commands got in (on a
        # host loaded enough, the first run may have finished by now and left nothing).
        assert {e["owner"] for e in _registry(tmp_path)} <= {first.pid}
        assert set(_our_cgroups()) <= {f"autotune-{NAME}-{first.pid}"}
        out, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGTERM)
            first.communicate(timeout=60)
    assert first.returncode == 0, out
    assert "3 search trials complete" in out, out
    journal = [json.loads(x) for x in
               (tmp_path / "results" / NAME / "trials.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in journal] == ["baseline", "search", "search", "search"], journal
    assert all(r["state"] == "COMPLETE" for r in journal), [r.get("failure") for r in journal]
    assert _registry(tmp_path) == [] and _our_cgroups() == []
