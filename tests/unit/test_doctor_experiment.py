"""What `autotune doctor FILE` and the run's start check of an experiment on this machine:
a local memory stress larger than the host can spare (review finding: nothing limits the
service's memory locally, so a stress of `size: 100%` only ran the host out of memory, its OOM
killer ending stress-ng's workers, and the window was not stressed as asked), a command target
whose program or cwd is not there, and a replay grid that cannot be read (review findings: both
passed doctor, and the run then failed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.errors import PrerequisiteError
from autotune.experiment import parse_experiment
from autotune.platforms.local import doctor

GIB = 2**30


def _meminfo(tmp_path: Path, total: int, available: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       {total // 1024} kB\nMemFree:         1000 kB\n"
                    f"MemAvailable:   {available // 1024} kB\nHugePages_Total:       0\n")
    return path


def _experiment(chaos: dict[str, Any]) -> Any:
    doc = yaml.safe_load(Path("experiments/local.yaml").read_text())
    doc["chaos"] = chaos
    doc["study"].pop("screening", None)  # not with scenarios
    return parse_experiment(yaml.safe_dump(doc))


@pytest.mark.parametrize("size", ["3GiB", "80%"])
def test_a_memory_stress_beyond_what_the_host_can_spare_is_refused(tmp_path: Path,
                                                                   size: str) -> None:
    exp = _experiment({"stress": {"workers": 1, "memory": {"workers": 2, "size": size}}})
    check = doctor.memory_fits(exp, _meminfo(tmp_path, total=4 * GIB, available=3 * GIB))
    assert check is not None and not check.ok
    assert f"chaos.stress.memory.size {size} is more than this host can spare" in check.detail
    assert "3.00 GiB available now" in check.detail and "75% (2.25 GiB)" in check.detail


def test_a_stress_that_fits_passes_and_names_the_scenario_that_does_not(
        tmp_path: Path) -> None:
    meminfo = _meminfo(tmp_path, total=16 * GIB, available=8 * GIB)
    fits = _experiment({"stress": {"workers": 1, "memory": {"workers": 2, "size": "6GiB"}}})
    check = doctor.memory_fits(fits, meminfo)
    assert check is not None and check.ok, check
    scenarios = _experiment({"scenarios": [
        {"name": "cpu", "stress": {"workers": 2}},
        {"name": "mem", "stress": {"workers": 0, "memory": {"workers": 1, "size": "7GB"}}}]})
    check = doctor.memory_fits(scenarios, meminfo)
    assert check is not None and not check.ok
    assert check.detail.startswith("chaos.scenarios[1].stress.memory.size 7GB")
    # without memory stress there is nothing to check
    assert doctor.memory_fits(_experiment({"stress": {"workers": 1}}), meminfo) is None


def test_the_run_is_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real host: a stress of its whole memory never fits in three quarters of what is free.
    exp = _experiment({"stress": {"workers": 1, "memory": {"workers": 1, "size": "100%"}}})
    with pytest.raises(PrerequisiteError, match=r"chaos\.stress\.memory\.size 100% is more than"):
        doctor.require(exp)


def _command_experiment(command: list[str], cwd: str | None) -> Any:
    doc = yaml.safe_load(Path("experiments/local.yaml").read_text())
    local = doc["target"]["local"]
    local.pop("workload", None)
    local.update(command=command, **({"cwd": cwd} if cwd else {}))
    return parse_experiment(yaml.safe_dump(doc))


def test_a_command_target_whose_program_or_cwd_is_missing_is_refused(tmp_path: Path) -> None:
    missing = doctor.command_runs(_command_experiment(["./nonexist-binary", "{port}"],
                                                      str(tmp_path)))
    assert missing is not None and not missing.ok
    assert missing.detail.startswith("target.local.command: ./nonexist-binary is not an "
                                     "executable file")
    no_dir = doctor.command_runs(_command_experiment(["sh", "{port}"], "/nonexistent/dir"))
    assert no_dir is not None and not no_dir.ok
    assert no_dir.detail == "target.local.cwd: /nonexistent/dir is not a directory"
    program = tmp_path / "svc"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    for argv in (["./svc", "{port}"], ["sh", "-c", "true", "{port}"]):
        found = doctor.command_runs(_command_experiment(argv, str(tmp_path)))
        assert found is not None and found.ok, found
    with pytest.raises(PrerequisiteError, match="nonexist-binary is not an executable"):
        doctor.require(_command_experiment(["./nonexist-binary", "{port}"], str(tmp_path)))


def test_doctor_reads_the_replay_grid(tmp_path: Path) -> None:
    from autotune.doctor import run

    doc = yaml.safe_load(Path("experiments/replay.yaml").read_text())
    [ok] = run(parse_experiment(yaml.safe_dump(doc)))
    assert ok.ok and "configurations recorded" in ok.detail
    doc["target"]["replay"]["grid"] = str(tmp_path / "nonexist.csv")
    [missing] = run(parse_experiment(yaml.safe_dump(doc)))
    assert not missing.ok and "cannot read the grid" in missing.detail
