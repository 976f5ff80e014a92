"""Held Ps (``autotune.platforms.local.blocked_p``) against a service that is not the demo."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from autotune.clock import FakeClock
from autotune.errors import ChaosError
from autotune.experiment.models import BlockedP
from autotune.live import Live
from autotune.platforms.local.blocked_p import DemoBlocker
from tests.support.http import answer


class _CatchAll(BaseHTTPRequestHandler):
    """A command's own web service: a page on every path."""

    def do_GET(self) -> None:
        answer(self, b"<html><body>shop</body></html>", "text/html")

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def page() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CatchAll)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_service_that_is_not_the_demo_fails_the_injection_with_the_reason(page: str) -> None:
    # Review finding: its 200 page raised a JSONDecodeError, a trial "crashed" as a bug.
    live = Live(env={}, since=0.0, scope=(), placement={"service_url": page})
    with pytest.raises(ChaosError, match="did not answer as the demo service's endpoint"):
        DemoBlocker(FakeClock()).block(live, BlockedP(goroutines=1, hold=0.05), 10.0, {})
