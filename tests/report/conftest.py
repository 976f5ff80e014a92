from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.report import Report, build_report, write_report
from tests.report.builder import Builder, golden_study

FROZEN = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="session")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Builder, Report]]:
    b = golden_study(tmp_path_factory.mktemp("golden"))
    yield b, build_report(b.exp, b.studies, now=FROZEN)
    b.studies.storage.remove_session()


@pytest.fixture(scope="session")
def written(golden: tuple[Builder, Report], tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, list[Path]]:
    b, report = golden
    out = tmp_path_factory.mktemp("report")
    return out, write_report(report, out, b.studies)
