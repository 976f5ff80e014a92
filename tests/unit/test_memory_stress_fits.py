"""A local memory stress larger than the host can spare is refused before anything starts
(review finding: nothing limits the service's memory locally, so a stress of `size: 100%`
only ran the host out of memory, its OOM killer ending stress-ng's workers, and the window was
not stressed as asked)."""

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
