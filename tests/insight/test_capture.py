"""Capturing an execution trace and a CPU profile over net/http/pprof.

The unit tests talk to a fake pprof server on 127.0.0.1; the integration tests build the real
demo service, run it with and without DEBUG_PPROF=1, and capture from it under load.
"""

from __future__ import annotations

import gzip
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from autotune.errors import MetricsError
from autotune.insight.capture import capture
from autotune.platforms.local import gobuild, proc
from autotune.platforms.local.ports import free_port

TRACE = b"go 1.27 trace\x00\x00\x00" + bytes(range(256)) * 4
PROFILE = gzip.compress(b"\x0a\x04fake pprof protobuf" * 50)


@dataclass
class Fake:
    """What the fake server answers per path: (status, body); and what it saw."""

    routes: dict[str, tuple[int, bytes]]
    url: str = ""
    cut: set[str] = field(default_factory=set)
    """Paths whose answer stops half-way: the connection closes mid-body."""
    seen: list[tuple[str, dict[str, list[str]], float, float]] = field(default_factory=list)


@pytest.fixture
def fake() -> Iterator[Fake]:
    state = Fake(routes={})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            start = time.monotonic()
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            status, body = state.routes.get(parts.path, (404, b"404 page not found\n"))
            if status == 200 and "seconds" in query:  # block like pprof does
                time.sleep(min(float(query["seconds"][0]), 3.0))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if parts.path in state.cut:
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self.wfile.write(body)
            state.seen.append((parts.path, query, start, time.monotonic()))

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_both_captures_run_at_once_and_are_written(fake: Fake, tmp_path: Path) -> None:
    fake.routes = {"/debug/pprof/trace": (200, TRACE), "/debug/pprof/profile": (200, PROFILE)}
    got = capture(fake.url + "/", ["trace", "cpu"], 1, tmp_path / "out", "baseline")
    # concurrent: the two requests were in the service at the same time (not a timed assert)
    (_, trace_q, trace_start, trace_end), = [s for s in fake.seen if "trace" in s[0]]
    (_, cpu_q, cpu_start, cpu_end), = [s for s in fake.seen if "profile" in s[0]]
    assert trace_start < cpu_end and cpu_start < trace_end  # the windows overlap
    assert trace_q == {"seconds": ["1"]} and cpu_q == {"seconds": ["1"]}
    by_kind = {c.kind: c for c in got}
    trace, cpu = by_kind["trace"], by_kind["cpu"]
    assert trace.path == tmp_path / "out" / "baseline.trace"
    assert cpu.path == tmp_path / "out" / "baseline.cpu.pprof"
    assert trace.path.read_bytes() == TRACE and trace.bytes == len(TRACE)
    assert cpu.path.read_bytes() == PROFILE and cpu.bytes == len(PROFILE)
    assert trace.open_with == f"go tool trace {trace.path}"
    assert cpu.open_with == f"go tool pprof -http=:0 {cpu.path}"
    assert sorted(os.listdir(tmp_path / "out")) == ["baseline.cpu.pprof", "baseline.trace"]


def test_the_cpu_profile_asks_for_whole_seconds(fake: Fake, tmp_path: Path) -> None:
    # pprof parses the profile's seconds as an integer and silently profiles 30 s otherwise
    fake.routes = {"/debug/pprof/trace": (200, TRACE), "/debug/pprof/profile": (200, PROFILE)}
    got = capture(fake.url, ["cpu", "trace"], 0.3, tmp_path, "x")
    queries = {path: q["seconds"] for path, q, _, _ in fake.seen}
    assert queries == {"/debug/pprof/profile": ["1"], "/debug/pprof/trace": ["0.3"]}
    assert {c.kind: c.seconds for c in got} == {"cpu": 1.0, "trace": 0.3}


def test_a_service_without_pprof_gets_the_lines_to_add(fake: Fake, tmp_path: Path) -> None:
    with pytest.raises(MetricsError) as err:
        capture(fake.url, ["trace", "cpu"], 0.1, tmp_path, "x")
    message = str(err.value)
    assert "does not expose net/http/pprof" in message
    assert "/debug/pprof/trace" in message and "/debug/pprof/profile" in message
    assert message.count('mux.HandleFunc("/debug/pprof/trace", pprof.Trace)') == 1
    assert 'import _ "net/http/pprof"' in message
    assert list(tmp_path.iterdir()) == []


def test_pprof_refusing_says_why(fake: Fake, tmp_path: Path) -> None:
    fake.routes = {"/debug/pprof/trace": (200, TRACE), "/debug/pprof/profile": (
        500, b"Could not enable CPU profiling: cpu profiling already in use\n")}
    with pytest.raises(MetricsError) as err:
        capture(fake.url, ["trace", "cpu"], 0.1, tmp_path, "x")
    message = str(err.value)
    assert "HTTP 500: Could not enable CPU profiling: cpu profiling already in use" in message
    # what did succeed is kept, and the message says where
    assert (tmp_path / "x.trace").read_bytes() == TRACE
    assert f"the trace capture was written to {tmp_path / 'x.trace'}" in message
    assert not (tmp_path / "x.cpu.pprof").exists()


def test_an_answer_that_is_not_a_capture_is_not_kept(fake: Fake, tmp_path: Path) -> None:
    fake.routes = {"/debug/pprof/trace": (200, b"<html>catch-all</html>")}
    with pytest.raises(MetricsError, match="is not a Go execution trace"):
        capture(fake.url, ["trace"], 0.1, tmp_path, "x")
    assert list(tmp_path.iterdir()) == []  # neither the file nor a partial one


def test_nothing_listening_is_a_metrics_error(tmp_path: Path) -> None:
    # bound (so nothing else takes the port) but not listening: the connection is refused
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(MetricsError, match=f"127.0.0.1:{port}"):
            capture(f"http://127.0.0.1:{port}", ["trace"], 0.1, tmp_path, "x")


@pytest.mark.parametrize(("kinds", "seconds", "name"), [
    (["trace"], 0, "x"), (["trace"], float("nan"), "x"), (["trace"], 1, "../x"),
    (["trace"], 1, ""), (["trace"], 1, ".hidden"), (["heap"], 1, "x"),
])
def test_bad_arguments_are_refused_before_any_request(
    fake: Fake, tmp_path: Path, kinds: list[str], seconds: float, name: str,
) -> None:
    with pytest.raises(ValueError):
        capture(fake.url, kinds, seconds, tmp_path, name)  # type: ignore[arg-type]
    assert fake.seen == []


def test_no_kinds_is_no_capture(fake: Fake, tmp_path: Path) -> None:
    assert capture(fake.url, [], 1, tmp_path, "x") == []
    assert fake.seen == []


# ---------------------------------------------------------------------------------------------
# The real demo service


def _start_demo(debug_pprof: bool) -> tuple[proc.Process, str]:
    binary = gobuild.build("demo")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DEBUG_PPROF"}
    env["DEMO_LIVE_HEAP_MB"] = "4"  # a small heap: ready in well under a second
    if debug_pprof:
        env["DEBUG_PPROF"] = "1"
    p = proc.start([str(binary), "-addr", f"127.0.0.1:{port}"], role="test-demo", env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                return p, base
        except requests.RequestException:
            pass
        time.sleep(0.05)
    p.stop()
    raise AssertionError(f"{base}/healthz never answered")


@pytest.mark.integration
def test_capture_from_the_demo_service_under_load(tmp_path: Path) -> None:
    p, base = _start_demo(debug_pprof=True)
    stop = threading.Event()
    served = [0]

    def load() -> None:
        with requests.Session() as s:
            while not stop.is_set():
                if s.get(f"{base}/", timeout=5).status_code == 200:
                    served[0] += 1

    loader = threading.Thread(target=load, daemon=True)
    try:
        loader.start()
        got = capture(base, ["trace", "cpu"], 1, tmp_path, "demo")
    finally:
        stop.set()
        loader.join(10)
        p.stop()  # by PID: SIGTERM to its process group, SIGKILL after a grace period
    assert served[0] > 0
    by_kind = {c.kind: c for c in got}
    trace = by_kind["trace"].path.read_bytes()
    assert trace.startswith(b"go 1.")
    assert len(trace) == by_kind["trace"].bytes > 1000
    profile = by_kind["cpu"].path.read_bytes()
    assert profile[:2] == b"\x1f\x8b"
    assert len(gzip.decompress(profile)) > 100  # a whole gzip stream
    assert by_kind["cpu"].open_with == f"go tool pprof -http=:0 {tmp_path / 'demo.cpu.pprof'}"


@pytest.mark.integration
def test_the_demo_service_without_debug_pprof_refuses_with_the_reason(tmp_path: Path) -> None:
    p, base = _start_demo(debug_pprof=False)
    try:
        with pytest.raises(MetricsError) as err:
            capture(base, ["trace", "cpu"], 1, tmp_path, "demo")
    finally:
        p.stop()
    assert "does not expose net/http/pprof" in str(err.value)
    assert list(tmp_path.iterdir()) == []


# --- issue 15.11: a capture's failures are the capture's, and bounded -------------------------

def test_a_stream_that_breaks_mid_body_fails_the_capture_not_the_run(
        fake: Fake, tmp_path: Path) -> None:
    fake.routes = {"/debug/pprof/trace": (200, TRACE), "/debug/pprof/profile": (200, PROFILE)}
    fake.cut = {"/debug/pprof/trace"}
    with pytest.raises(MetricsError, match=r"trace\?seconds=1: the stream broke after \d+ "
                                           r"bytes.*the cpu capture was written"):
        capture(fake.url, ["trace", "cpu"], 1, tmp_path, "baseline")
    assert not (tmp_path / "baseline.trace").exists(), "no half trace under the final name"
    assert (tmp_path / "baseline.cpu.pprof").exists()


def test_a_capture_over_the_size_cap_is_abandoned(fake: Fake, tmp_path: Path) -> None:
    fake.routes = {"/debug/pprof/trace": (200, TRACE)}
    with pytest.raises(MetricsError, match=rf"exceeds the cap of {len(TRACE) - 1} bytes"):
        capture(fake.url, ["trace"], 1, tmp_path, "baseline", max_bytes=len(TRACE) - 1)
    assert list(tmp_path.iterdir()) == []
