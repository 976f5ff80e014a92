"""Every HTTP answer has a total deadline: a server that trickles its body (each byte inside the
per-read timeout, which urllib3 restarts on every read) no longer keeps a call going forever."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import client

from autotune.clock import SystemClock
from autotune.deadline import TotalDeadline
from autotune.experiment.models import Prometheus
from autotune.insight.capture import Direct
from autotune.metrics.base import Unavailable
from autotune.metrics.prometheus import PrometheusSource
from autotune.platforms.kubernetes.client import Kube
from autotune.platforms.kubernetes.errors import Unreachable
from autotune.platforms.kubernetes.objects import PODS


def bounded_session(total: float) -> requests.Session:
    """A session whose every call has a total deadline (as the Prometheus source mounts it)."""
    session = requests.Session()
    session.mount("http://", TotalDeadline(total))
    return session


BODY = b'{"kind": "Pod", "metadata": {"name": "api-0", "namespace": "default"}}'


class Trickle:
    """An HTTP server on 127.0.0.1 that sends its headers at once, then its body one byte per
    ``pause`` seconds (each byte well inside any per-read timeout)."""

    def __init__(self, pause: float) -> None:
        self.sent = 0
        self.stop = threading.Event()
        trickle = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(BODY)))
                self.end_headers()
                for i in range(len(BODY)):
                    if trickle.stop.wait(pause):
                        return
                    try:
                        self.wfile.write(BODY[i:i + 1])
                        self.wfile.flush()
                    except OSError:
                        return
                    trickle.sent += 1

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def trickle() -> Iterator[Trickle]:
    server = Trickle(pause=0.1)  # the whole body would take 7 s
    try:
        yield server
    finally:
        server.close()


def test_a_requests_call_ends_at_its_total_deadline(trickle: Trickle) -> None:
    session = bounded_session(total=0.5)
    with pytest.raises(requests.ReadTimeout, match=r"did not finish within 0.5 s"):
        session.get(f"{trickle.url}/api/v1/query", timeout=(1, 1))
    assert trickle.sent < len(BODY)  # it ended before the answer did


def test_a_fast_answer_is_read_whole(trickle: Trickle) -> None:
    fast = Trickle(pause=0)
    try:
        response = bounded_session(total=5).get(f"{fast.url}/x", timeout=(1, 1))
        assert response.json()["metadata"]["name"] == "api-0"
    finally:
        fast.close()


def test_a_kubernetes_read_ends_at_its_deadline(trickle: Trickle) -> None:
    configuration = client.Configuration()
    configuration.host = trickle.url
    kube = Kube(client.ApiClient(configuration), SystemClock(), attempts=1, body_deadline=0.5)
    with pytest.raises(Unreachable, match=r"did not finish its answer to get .* within 0.5 s"):
        kube.get(PODS, "default", "api-0")
    assert trickle.sent < len(BODY)


def test_a_capture_stream_ends_at_its_deadline(trickle: Trickle) -> None:
    """A pprof endpoint (or a pod proxy) trickling its answer: the capture's chunks stop at the
    capture's own timeout plus the connect, and the capture fails (never the run)."""
    with Direct(trickle.url).get("/debug/pprof/profile?seconds=1", timeout=0.3) as answer, \
            pytest.raises(TimeoutError):
        for _ in answer.chunks:
            pass
    assert trickle.sent < len(BODY)


def test_a_prometheus_query_ends_at_prometheus_timeout(trickle: Trickle) -> None:
    """The query's whole answer within prometheus.timeout: a trickling query front end makes the
    reading unavailable with the reason, it does not hold the trial."""
    source = PrometheusSource(Prometheus(url=trickle.url, timeout=0.5), SystemClock())
    try:
        reading = source._query("up", at=1_800_000_000.0)
    finally:
        source.close()
    assert isinstance(reading, Unavailable), reading
    assert "did not finish within 0.5 s" in reading.reason
    assert trickle.sent < len(BODY)


def test_an_answer_cut_short_is_a_requests_error() -> None:
    """Review finding: urllib3's ProtocolError from read1 escaped as itself, which callers that
    catch requests.RequestException (the Prometheus source) took for a bug."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(requests.RequestException):
            bounded_session(total=5).get(f"http://127.0.0.1:{listener.getsockname()[1]}/",
                                         timeout=(1, 1))
    finally:
        thread.join(timeout=5)
        listener.close()


class RawTrickle:
    """A raw TCP server on 127.0.0.1 that sends ``head`` at once and then ``tail`` one byte per
    ``pause`` seconds: what http.client and urllib3's decoder read in loops of their own, where
    no deadline of ours is checked between reads."""

    def __init__(self, head: bytes, tail: bytes, pause: float = 0.1) -> None:
        import socket

        self.stop = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.head, self.tail, self.pause = head, tail, pause
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(self.head)
                for i in range(len(self.tail)):
                    if self.stop.wait(self.pause):
                        return
                    conn.sendall(self.tail[i:i + 1])
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        self.thread.join(timeout=5)


def _ends_within(call: Any, seconds: float) -> BaseException | None:
    """Run ``call`` in a thread; the exception it ended with. Fails the test if it is still
    going after ``seconds`` (without the total deadline it would go on for minutes)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as e:  # handed to the test
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    assert outcome, f"the call was still going after {seconds} s"
    return outcome[0]


# Headers that never end: a new header byte every 0.1 s, each read well inside the read timeout.
TRICKLED_HEADERS = (b"HTTP/1.1 200 OK\r\n", b"X-Slow: " + b"a" * 2000 + b"\r\n\r\n{}")
# A gzip member whose header carries a file name (FLG.FNAME): zlib consumes it and yields nothing,
# so urllib3's read1 loops on raw reads until the decoder has output (review finding).
GZIP_NAME = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
             b"Content-Length: 100000\r\n\r\n\x1f\x8b\x08\x08\x00\x00\x00\x00\x00\x03",
             b"n" * 2000)


@pytest.mark.parametrize(("answer", "said"), [
    (TRICKLED_HEADERS, "timed out: no answer to GET /api/v1/query within 0.5 s"),
    (GZIP_NAME, "did not finish within 0.5 s")], ids=["headers", "gzip-name"])
def test_a_requests_call_ends_at_its_deadline_in_every_phase(answer: tuple[bytes, bytes],
                                                             said: str) -> None:
    server = RawTrickle(*answer)
    try:
        error = _ends_within(
            lambda: bounded_session(total=0.5).get(f"{server.url}/api/v1/query", timeout=(1, 1)),
            seconds=10)
    finally:
        server.close()
    assert isinstance(error, requests.ReadTimeout), error
    assert said in str(error)


@pytest.mark.parametrize("answer", [TRICKLED_HEADERS, GZIP_NAME], ids=["headers", "gzip-name"])
def test_a_kubernetes_call_ends_at_its_deadline_in_every_phase(
        answer: tuple[bytes, bytes]) -> None:
    server = RawTrickle(*answer)
    configuration = client.Configuration()
    configuration.host = server.url
    kube = Kube(client.ApiClient(configuration), SystemClock(), attempts=1, body_deadline=0.5,
                connect_timeout=1.0, read_timeout=1.0)
    try:
        error = _ends_within(lambda: kube.get(PODS, "default", "api-0"), seconds=10)
    finally:
        server.close()
    assert isinstance(error, Unreachable), error
    assert "within" in str(error)
