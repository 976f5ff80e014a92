"""A writer of the results directory (the CronJob's volume, which a git-sync sidecar mounts too)
plants a symbolic link where autotune writes: autotune, root in its pod, must never write
through it (review finding: the run lock, the process registry's temporary file, the journal,
the logs and the reports were all written through such a link). Each test plants a link to a
victim file and checks the victim is byte for byte as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from autotune import files
from autotune.errors import PrerequisiteError, StudyError, TargetError
from autotune.platforms.local import proc
from autotune.runlock import RunLock
from autotune.study.journal import Journal

SECRET = "root:$6$precious:19000:0:99999:7:::\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "shadow"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def _plant(link: Path, victim: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)


def test_the_run_lock_is_not_taken_through_a_link(tmp_path: Path, victim: Path) -> None:
    lock = tmp_path / "results" / "run.lock"
    _plant(lock, victim)
    with pytest.raises(TargetError, match=r"cannot open the run lock .*a symbolic link, which"):
        RunLock(lock).acquire()
    assert victim.read_text() == SECRET


def test_the_journal_is_not_appended_to_through_a_link(tmp_path: Path, victim: Path) -> None:
    journal = tmp_path / "results" / "trials.jsonl"
    _plant(journal, victim)
    with pytest.raises(StudyError, match="a symbolic link, which autotune never writes through"):
        Journal(journal).append({"trial": 1})
    assert victim.read_text() == SECRET


def test_the_process_registry_replaces_a_link_not_its_target(tmp_path: Path,
                                                             victim: Path) -> None:
    registry = tmp_path / "results" / "processes.json"
    _plant(registry, victim)
    # ... and at the temporary name it had (.<name>.<pid>.tmp: as PID 1 in a pod, always 1)
    _plant(registry.with_name(f".processes.json.{os.getpid()}.tmp"), victim)
    proc.Registry(registry).add(proc.Entry(1, None, "service", ("svc",)))
    assert victim.read_text() == SECRET
    assert not registry.is_symlink() and json.loads(registry.read_text())[0]["pid"] == 1


def test_a_process_log_is_not_opened_through_a_link(tmp_path: Path, victim: Path) -> None:
    log = tmp_path / "results" / "logs" / "service.log"
    _plant(log, victim)
    with pytest.raises(PrerequisiteError, match=r"cannot open its log .*a symbolic link"):
        proc.start(["true"], role="service", log_path=log)
    assert victim.read_text() == SECRET


def test_a_replaced_file_keeps_its_mode_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "report.md"
    path.write_text("old")
    path.chmod(0o640)
    files.replace(path, "new", durable=True)
    assert path.read_text() == "new" and path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]
