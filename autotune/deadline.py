"""A total deadline for an HTTP answer, not only for each read.

requests and urllib3 time out each socket operation: the connect, and every read (the timer
starts again with each byte received). A server, proxy or load balancer that trickles its answer
(one byte every few seconds) keeps such a call going forever, and every wait of ours checks its
own deadline only between calls. Here the body is read with ``read1`` (one socket read at most,
so each returns within the read timeout) and the deadline is checked between reads: a call ends
at most one read timeout after its total deadline. The status line and headers are bounded by
http.client's own limits (100 header lines, each within the read timeout).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

import requests
import urllib3
from requests.adapters import HTTPAdapter

CHUNK = 64 * 1024


class _Raw(Protocol):
    def read1(self, amt: int | None = None, decode_content: bool | None = None) -> bytes: ...


def chunks(raw: _Raw, deadline: float, size: int = CHUNK) -> Iterator[bytes]:
    """The body of an unread urllib3 response as it arrives; TimeoutError once ``deadline`` (a
    ``time.monotonic()`` value) has passed before its end."""
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError("the answer did not arrive in time")
        chunk = raw.read1(size, decode_content=True)
        if not chunk:
            return
        yield chunk


def read_body(raw: _Raw, deadline: float) -> bytes:
    """The whole body of an unread urllib3 response (see ``chunks``)."""
    return b"".join(chunks(raw, deadline))


class TotalDeadline(HTTPAdapter):
    """A requests adapter whose calls end ``total`` seconds after they start (plus at most one
    read timeout), raising ``requests.ReadTimeout``. Mount it on a session for every scheme."""

    def __init__(self, total: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.total = total

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: Any = None, verify: Any = True, cert: Any = None,
             proxies: Any = None) -> requests.Response:
        deadline = time.monotonic() + self.total
        response = super().send(request, stream=True, timeout=timeout, verify=verify,
                                cert=cert, proxies=proxies)
        if stream:  # the caller reads the body itself, in its own bounded steps
            return response
        try:
            # requests keeps a read body in _content (Response.content reads it there), and
            # offers no public way to fill it: the two private attributes we set.
            response._content = read_body(response.raw, deadline)
            response._content_consumed = True  # type: ignore[attr-defined]
        except TimeoutError as e:
            response.close()
            raise requests.ReadTimeout(
                f"the answer to {request.method} {request.path_url} did not finish within "
                f"{self.total:g} s (a server sending it too slowly)", request=request) from e
        except urllib3.exceptions.DecodeError as e:
            # What requests' own reading raises for these, so callers catching
            # requests.RequestException see every failure of the answer.
            response.close()
            raise requests.exceptions.ContentDecodingError(e, request=request) from e
        except urllib3.exceptions.ProtocolError as e:
            response.close()
            raise requests.exceptions.ChunkedEncodingError(e, request=request) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            response.close()
            raise requests.ConnectionError(e, request=request) from e
        return response
