"""A Prometheus HTTP API that answers by what a query asks for (for the cluster tests, which
have pods but nothing that scrapes them). It insists on a bearer token, lists one active target
per pod it is told about with the scrape interval it is told, and answers the source's
freshness and pod-up checks as a Prometheus that scrapes every pod would.

Follows the response shapes of prometheus/web/api/v1/api.go (query, targets, status/config).
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "s3cr3t-token"


@dataclass
class State:
    namespace: str
    pods: list[str] = field(default_factory=list)
    interval: str = "100ms"
    seen: list[str] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        state = self.server.state
        url = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._send(401, {"status": "error", "error": "unauthorized"})
        if url.path == "/api/v1/targets":
            return self._send(200, {"status": "success", "data": {"activeTargets": [
                {"labels": {"namespace": state.namespace, "pod": pod, "job": "kubernetes-pods"},
                 "scrapePool": "kubernetes-pods", "scrapeInterval": state.interval,
                 "health": "up"} for pod in state.pods]}})
        if url.path == "/api/v1/status/config":
            config = f"global:\n  scrape_interval: {state.interval}\n"
            return self._send(200, {"status": "success", "data": {"yaml": config}})
        query, at = params.get("query", ""), float(params.get("time", "0"))
        state.seen.append(query)
        self._send(200, {"status": "success", "data": {"resultType": "vector",
                                                       "result": answer(query, at)}})

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    state: State


def answer(query: str, at: float) -> list[dict[str, Any]]:
    def series(value: float, **labels: str) -> dict[str, Any]:
        return {"metric": labels, "value": [at, str(value)]}

    if "timestamp(up" in query:
        return [series(at + 1)]
    if "go_info" in query:  # client_golang's go_info{version=...}, one per Go version
        return [series(2, version="go1.25.4")]
    if "count by (pod)" in query:  # every pod of the candidate is scraped
        pods = re.search(r'pod=~"([^"]*)"', query)
        return [series(len(pods.group(1).split("|")) if pods else 0)]
    if "http_request_duration_seconds" in query:
        return [series(0.012)]
    if "go_sched_pauses_total_gc_seconds" in query:
        return [series(math.nan)]
    return [series(0.5, pod="a"), series(0.6, pod="b")]


class FakePrometheus:
    def __init__(self, namespace: str) -> None:
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.state = self.state = State(namespace)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
