"""The API server's clock as its answers' Date headers give it (``Kube.server_now``), which
times the run Lease whatever the host's own clock or time zone."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from autotune.clock import FakeClock
from autotune.platforms.kubernetes.client import Kube

NOON = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC).timestamp()


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("date", ["Sun, 06 Dec 2026 12:00:00 GMT",  # what Go sends
                                  "Sunday, 06-Dec-26 12:00:00 GMT",  # RFC 850
                                  "Sun Dec  6 12:00:00 2026",  # asctime: no zone, GMT
                                  "Sun, 06 Dec 2026 12:00:00 -0000"])
def test_every_http_date_form_is_gmt_on_a_host_in_another_zone(date: str,
                                                                new_york: None) -> None:
    # Review finding: the asctime form and "-0000" parse to a naive time, which .timestamp()
    # read in the host's zone: 5 hours off here, a live Lease judged expired.
    clock = FakeClock()
    kube = Kube(client.ApiClient(client.Configuration(host="https://127.0.0.1:1")), clock)
    kube._note_date(date)
    clock.sleep(30)
    assert kube.server_now() == NOON + 30


def test_a_malformed_date_is_ignored() -> None:
    clock = FakeClock()
    kube = Kube(client.ApiClient(client.Configuration(host="https://127.0.0.1:1")), clock)
    for junk in ("yesterday", "Sun, 99 Foo 2026 99:99:99 GMT", "\x00"):
        kube._note_date(junk)
    assert kube.server_now() == clock.now()  # no answer with a Date yet: the host's clock
