"""A fault-injecting proxy in front of the real kube-apiserver (plain HTTP on 127.0.0.1 -> TLS).

A real API server does not fail on demand. What it can do to a client in production, this proxy
does on request, around otherwise real answers:

- ``fail(method, path, status)``: answer ``status`` (a Kubernetes ``Status`` body) instead of
  forwarding: a 500 or 503 from an overloaded server, a 429 from priority-and-fairness;
  ``status=None`` drops the connection without an answer;
- ``fail(..., after=True)``: forward the request (it takes effect), then lose the answer: the
  client sees a 5xx or a dropped connection although the write happened (a timeout after a
  successful POST/PUT, a load balancer cutting the connection);
- ``cut_watch(path, after=N)``: pass N events of a watch stream, then half a line, then close
  the connection (a stream cut mid-line);
- ``gone_watch(path)``: answer a watch with an ERROR event of code 410 (the resourceVersion is
  older than the server's history after an etcd compaction);
- ``on(method, path, callback)``: something happens in the cluster right before a request;
- every request is recorded (method, path, query, content type, JSON body) in ``requests``.

Paths are regular expressions matched against the URL path (``search``); methods are exact.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

Obj = dict[str, Any]


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    kind: str  # "fail", "fail-after", "cut-watch", "gone-watch", "delay"
    status: int | None = 500
    times: int = 1
    after_events: int = 0
    hits: int = 0
    message: str = "injected by the test's fault proxy"
    delay: float = 0.0
    watch_only: bool = False
    body_contains: str | None = None
    callback: Any = None

    def matches(self, method: str, path: str, body: bytes = b"") -> bool:
        return ((self.method in (method, "*")) and bool(self.path.search(path))
                and (self.body_contains is None or self.body_contains.encode() in body))


@dataclass
class FaultProxy:
    upstream: str
    """https://127.0.0.1:<port> of the real API server."""
    requests: list[Recorded] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def start(self) -> str:
        parts = urlsplit(self.upstream)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 443
        self._ssl = ssl.create_default_context()
        self._ssl.check_hostname = False
        self._ssl.verify_mode = ssl.CERT_NONE
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- faults --------------------------------------------------------------------------

    def fail(self, method: str, path: str, status: int | None = 500, *, times: int = 1,
             after: bool = False, message: str = "injected by the test's fault proxy",
             watch_only: bool = False, body_contains: str | None = None) -> Fault:
        """``watch_only``: only a watch request fails (a list of the same path passes);
        ``body_contains``: only a request whose body contains that text."""
        fault = Fault(method, re.compile(path), "fail-after" if after else "fail", status, times,
                      message=message, watch_only=watch_only, body_contains=body_contains)
        with self.lock:
            self.faults.append(fault)
        return fault

    def delay(self, method: str, path: str, seconds: float, *, times: int = 1) -> Fault:
        """Answer as the server does, ``seconds`` late."""
        fault = Fault(method, re.compile(path), "delay", None, times, delay=seconds)
        with self.lock:
            self.faults.append(fault)
        return fault

    def cut_watch(self, path: str, *, after: int = 0, times: int = 1) -> Fault:
        fault = Fault("GET", re.compile(path), "cut-watch", None, times, after_events=after)
        with self.lock:
            self.faults.append(fault)
        return fault

    def gone_watch(self, path: str, *, times: int = 1) -> Fault:
        fault = Fault("GET", re.compile(path), "gone-watch", 410, times)
        with self.lock:
            self.faults.append(fault)
        return fault

    def on(self, method: str, path: str, callback: Any, *, times: int = 1,
           body_contains: str | None = None) -> Fault:
        """Run ``callback()`` before forwarding the next matching request (something happens
        in the cluster right between two of the client's requests); ``body_contains``: only
        a request whose body contains that text."""
        fault = Fault(method, re.compile(path), "hook", None, times, callback=callback,
                      body_contains=body_contains)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()

    def _take(self, method: str, path: str, watch: bool, body: bytes = b"") -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.hits >= fault.times or not fault.matches(method, path, body):
                    continue
                if (fault.kind in ("cut-watch", "gone-watch") or fault.watch_only) and not watch:
                    continue
                fault.hits += 1
                return fault
        return None

    def seen(self, method: str, path: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and re.search(path, r.path)]

    # --- forwarding ----------------------------------------------------------------------

    def connection(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self._host, self._port, context=self._ssl,
                                           timeout=timeout)


def status_body(code: int, message: str) -> bytes:
    reason = {409: "Conflict", 410: "Expired", 429: "TooManyRequests", 500: "InternalError",
              503: "ServiceUnavailable", 504: "Timeout"}.get(code, "Unknown")
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                       "status": "Failure", "message": message, "reason": reason,
                       "code": code}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    owner: FaultProxy

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        self._forward("GET")

    def do_POST(self) -> None:
        self._forward("POST")

    def do_PUT(self) -> None:
        self._forward("PUT")

    def do_PATCH(self) -> None:
        self._forward("PATCH")

    def do_DELETE(self) -> None:
        self._forward("DELETE")

    def _forward(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = self.headers.get("Content-Type", "")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        proxy = self.owner
        with proxy.lock:
            proxy.requests.append(Recorded(method, parts.path, query, content_type, body))
        watch = query.get("watch") in ("true", "1")
        fault = proxy._take(method, parts.path, watch, raw)
        if fault is not None and fault.kind == "fail":
            self._answer(fault.status, fault.message)
            return
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.delay)
        if fault is not None and fault.kind == "hook":
            fault.callback()
        if fault is not None and fault.kind == "gone-watch":
            self._start_stream(200)
            event = {"type": "ERROR", "object": json.loads(status_body(
                410, "too old resource version: injected by the test's fault proxy"))}
            self._chunk(json.dumps(event).encode() + b"\n")
            self._end_stream()
            return
        timeout = float(query.get("timeoutSeconds") or 30) + 30
        conn = proxy.connection(timeout)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() in ("authorization", "content-type", "accept", "user-agent")}
        try:
            conn.request(method, self.path, body=raw or None, headers=headers)
            response = conn.getresponse()
            if fault is not None and fault.kind == "fail-after":
                response.read()
                self._answer(fault.status, "the answer was lost after the write: injected by "
                             "the test's fault proxy")
                return
            if watch and response.status == 200:
                self._stream(response, fault)
                return
            data = response.read()
            self.send_response(response.status)
            self.send_header("Content-Type", response.getheader("Content-Type",
                                                                "application/json"))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (OSError, http.client.HTTPException):
            self.close_connection = True
        finally:
            conn.close()

    def _answer(self, status: int | None, message: str) -> None:
        if status is None:  # no answer at all: the client sees the connection close
            self.close_connection = True
            self.connection.shutdown(2)
            return
        data = status_body(status, message)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _stream(self, response: http.client.HTTPResponse, fault: Fault | None) -> None:
        self._start_stream(200)
        for passed, line in enumerate(_lines(response)):
            if fault is not None and fault.kind == "cut-watch" and passed >= fault.after_events:
                self._chunk(line[: max(1, len(line) // 2)])  # half an event, no newline
                self.close_connection = True
                return
            self._chunk(line)
        self._end_stream()


def _lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    while True:
        line = response.readline()
        if not line:
            return
        yield line
