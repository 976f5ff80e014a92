from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.contract import harnesses
from tests.contract.harness import Harness
from tests.kubernetes.conftest import Plane, start_plane


def _family(path: Path) -> str:
    """The backend family a contract module tests: test_<family>_contract.py."""
    family = path.stem.removeprefix("test_").split("_")[0]
    return {"metric": "metrics"}.get(family, family)


def _providing(family: str) -> list[Any]:
    """Every harness that provides a backend of this family (the others are not parametrized at
    all: a contract a harness cannot run is not a test, and a skip would hide one that should)."""
    params: list[Any] = []
    for info in pkgutil.iter_modules(harnesses.__path__):
        module = importlib.import_module(f"{harnesses.__name__}.{info.name}")
        params.extend(p for p in module.HARNESSES if family in p.values[0].families)
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness" in metafunc.fixturenames:
        metafunc.parametrize("harness", _providing(_family(Path(str(metafunc.definition.fspath)))),
                             indirect=True)


@pytest.fixture(scope="package")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    """The Kubernetes harness's real control plane (started only when it is asked for)."""
    yield from start_plane(tmp_path_factory)


@pytest.fixture
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    factory: Callable[[Path, pytest.FixtureRequest], Harness] = request.param
    h = factory(tmp_path, request)
    try:
        yield h
    finally:
        h.teardown()
