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


def _all() -> list[Any]:
    params: list[Any] = []
    for info in pkgutil.iter_modules(harnesses.__path__):
        module = importlib.import_module(f"{harnesses.__name__}.{info.name}")
        params.extend(module.HARNESSES)
    return params


@pytest.fixture(scope="package")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    """The Kubernetes harness's real control plane (started only when it is asked for)."""
    yield from start_plane(tmp_path_factory)


@pytest.fixture(params=_all())
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    factory: Callable[[Path, pytest.FixtureRequest], Harness] = request.param
    h = factory(tmp_path, request)
    family = Path(str(request.node.fspath)).stem.removeprefix("test_").split("_")[0]
    family = {"metric": "metrics"}.get(family, family)
    if family not in h.families:
        h.teardown()
        pytest.skip(f"this harness does not provide a {family} backend")
    try:
        yield h
    finally:
        h.teardown()
