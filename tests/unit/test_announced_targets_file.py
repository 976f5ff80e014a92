"""The private Prometheus's targets file through the calls a local study makes: a generation's
targets are in every version of the file from their announcement until the next trial starts.

The file without them for a moment, between ``LocalService.apply`` announcing the next
generation and ``observe`` making the starting one current, is what a Prometheus discovery tick
caught in CI: the trial's targets were dropped for 5 s (``tests/integration/
test_announced_targets.py`` shows it with the real Prometheus).
"""

from __future__ import annotations

import json
from pathlib import Path

from autotune.platforms.local.prometheus import EmbeddedPrometheus


def _endpoints(generation: int) -> dict[str, str]:
    return {"svc": f"http://127.0.0.1:{1000 + generation}/metrics",
            "lg": f"http://127.0.0.1:{2000 + generation}/metrics"}


def _labels(generation: int) -> dict[str, str]:
    return {"autotune_generation": str(generation)}


class _Study:
    """Drives an ``EmbeddedPrometheus`` as ``LocalService`` and ``PrometheusSource`` do, and
    records the generations in each version of the file."""

    def __init__(self, tmp: Path) -> None:
        self.prom = EmbeddedPrometheus(1.0, None, tmp / "logs")
        self.files: list[list[int]] = []
        self.prom.announce(_endpoints(1), _labels(1))  # LocalService.__init__
        self.prom.workdir = tmp  # start() writes the file
        self.prom._write_targets()
        self._record()

    def _record(self) -> None:
        groups = json.loads(self.prom.targets_file.read_text())
        self.files.append(sorted({int(g["labels"]["autotune_generation"]) for g in groups}))
        assert len(groups) == 2 * len(self.files[-1]), "each endpoint listed once"

    def apply(self, next_generation: int) -> None:
        """LocalService.apply: the processes start, the next generation is announced."""
        self.prom.announce(_endpoints(next_generation), _labels(next_generation))
        self._record()

    def observe(self, generation: int) -> None:
        self.prom.set_targets(_endpoints(generation), _labels(generation))
        self._record()


def test_a_starting_generation_stays_in_the_file_until_it_is_current(tmp_path: Path) -> None:
    study = _Study(tmp_path)
    study.apply(2)
    study.observe(1)
    study.apply(3)
    study.observe(2)
    assert study.files == [[1], [1, 2], [1, 2], [1, 2, 3], [2, 3]]


def test_announcements_of_generations_that_never_started_go(tmp_path: Path) -> None:
    study = _Study(tmp_path)
    study.apply(2)
    study.observe(1)
    study.apply(3)  # generation 2's trial fails before observe()
    study.apply(4)  # generation 3's trial
    study.observe(3)
    study.apply(6)  # generation 4's ports were taken: 5 starts on fresh, unannounced ports
    study.observe(5)
    assert study.files == [[1], [1, 2], [1, 2], [1, 2, 3], [1, 3, 4], [3, 4], [3, 4, 6], [5, 6]]
