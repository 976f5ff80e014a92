"""Small HTTP servers of the tests: one answer written whole, with its length."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


def answer(handler: BaseHTTPRequestHandler, body: bytes, content_type: str,
           status: int = 200) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
