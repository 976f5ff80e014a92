"""A pod IP with a process behind it, for ``pods/proxy`` (``measure.capture`` on a cluster).

The API server proxies ``pods/<name>:<port>/proxy/...`` to the pod's IP, and only to a global
unicast one (kubernetes pkg/registry/core/pod/strategy.go ResourceLocation: "address not
allowed" for 127.0.0.0/8). kwok's pods have IPs with nothing behind them, so the tests give the
measured pods one address, ``POD_IP`` (198.18.0.254, from the range RFC 2544 reserves for
benchmarking, added to the loopback interface for the session and removed after), and serve
net/http/pprof there, as a Go service with the pprof handlers would (a trace's header, a gzip
profile), recording what was asked and which pods were stressed at that moment.
"""

from __future__ import annotations

import gzip
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

POD_IP = "198.18.0.254"


def add_address() -> bool:
    """Put ``POD_IP`` on the loopback interface (root); False when it cannot be done."""
    shown = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True,
                           text=True, check=False)
    if f"{POD_IP}/32" in shown.stdout:
        return True
    added = subprocess.run(["ip", "addr", "add", f"{POD_IP}/32", "dev", "lo"],
                           capture_output=True, text=True, check=False)
    return added.returncode == 0


def remove_address() -> None:
    subprocess.run(["ip", "addr", "del", f"{POD_IP}/32", "dev", "lo"], capture_output=True,
                   check=False)


@dataclass
class Asked:
    path: str
    seconds: str
    at: float
    stressed: list[str]


@dataclass
class PprofServer:
    """net/http/pprof's trace and CPU profile on ``POD_IP:port``."""

    port: int
    stressed: Callable[[], list[str]]
    """Which pods chaos-daemon stresses now (recorded with every request)."""
    asked: list[Asked] = field(default_factory=list)
    block: float = 0.2
    """Seconds each answer takes (pprof blocks for the capture; ours briefly)."""

    def start(self) -> PprofServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                owner._answer(self)

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer((POD_IP, self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        seconds = (parse_qs(url.query).get("seconds") or ["30"])[0]
        self.asked.append(Asked(url.path, seconds, time.time(), self.stressed()))
        time.sleep(self.block)
        body = f"{url.path} {seconds}s".encode()
        if url.path == "/debug/pprof/trace":
            status, data = 200, b"go 1.25 trace\x00\x00\x00" + body
        elif url.path == "/debug/pprof/profile":
            status, data = 200, gzip.compress(body)
        else:
            status, data = 404, b"404 page not found\n"
        h.send_response(status)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
