"""Fixtures of the fault suite. Prometheus fixtures (``prom_*``) start one real Prometheus for the
whole session, scraping a tiny exporter as job ``simulated`` (the scope the simulated target's
candidates have) and another, whose series carry hostile label values, as job ``hostile`` (so a
value its scrape cannot take fails only that job); each test gets a fault proxy in front."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.prom_proxy import Exporter, PrometheusProcess, PromProxy

PROM_INTERVAL = 0.2
"""Scrape interval of the test Prometheus: short, so a read's wait for a scrape is short."""


@pytest.fixture(scope="session")
def prom_exporter() -> Iterator[Exporter]:
    exporter = Exporter()
    try:
        yield exporter
    finally:
        exporter.stop()


@pytest.fixture(scope="session")
def prom_hostile_exporter() -> Iterator[Exporter]:
    exporter = Exporter()
    try:
        yield exporter
    finally:
        exporter.stop()


@pytest.fixture(scope="session")
def prom_server(prom_exporter: Exporter, prom_hostile_exporter: Exporter,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    server = PrometheusProcess(tmp_path_factory.mktemp("prometheus"),
                               {"simulated": prom_exporter.address,
                                "hostile": prom_hostile_exporter.address},
                               interval=PROM_INTERVAL)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def prom_proxy(prom_server: PrometheusProcess) -> Iterator[PromProxy]:
    with PromProxy(prom_server.url) as proxy:
        yield proxy
    assert not proxy.listening, "the proxy's thread stopped"
