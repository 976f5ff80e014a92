"""A total deadline for an HTTP answer, not only for each read.

requests and urllib3 time out each socket operation: the connect, and every read (the timer
starts again with each byte received). A server, proxy or load balancer that trickles its answer
(one byte every few seconds) keeps such a call going forever, and every wait of ours checks its
own deadline only between calls. Two guards, because some reading loops are not ours:

- the body is read with ``read1`` and the deadline is checked between reads (``chunks``);
- a ``Watchdog`` shuts the connection's socket down when the deadline passes, which ends the
  loops we cannot check in: http.client reading the status line and headers (up to 100 lines
  of 64 KiB, each read within the read timeout) and urllib3's ``read1``, which keeps reading
  while its gzip decoder yields nothing (a gzip header's file name trickled byte by byte).

So a call ends at most one read timeout after its total deadline, whatever the server does.
Connections are watched through urllib3 pools whose connection classes register their socket
with the watchdog of the calling thread (``watch_pools``).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Protocol

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

CHUNK = 64 * 1024


class _Raw(Protocol):
    def read1(self, amt: int | None = None, decode_content: bool | None = None) -> bytes: ...


def chunks(raw: _Raw, deadline: float, size: int = CHUNK) -> Iterator[bytes]:
    """The body of an unread urllib3 response as it arrives; TimeoutError once ``deadline`` (a
    ``time.monotonic()`` value) has passed before its end."""
    watchdog = Watchdog(max(0.0, deadline - time.monotonic()), ambient=False)
    connection = getattr(raw, "connection", None)
    watchdog.watch(getattr(connection, "sock", None))
    with watchdog:
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("the answer did not arrive in time")
            try:
                chunk = raw.read1(size, decode_content=True)
            except (urllib3.exceptions.HTTPError, OSError):
                if watchdog.fired:
                    raise TimeoutError("the answer did not arrive in time") from None
                raise
            if not chunk:
                if watchdog.fired:  # cut at the deadline, not the end of the answer
                    raise TimeoutError("the answer did not arrive in time")
                return
            yield chunk


def read_body(raw: _Raw, deadline: float) -> bytes:
    """The whole body of an unread urllib3 response (see ``chunks``)."""
    return b"".join(chunks(raw, deadline))


_current = threading.local()


class Watchdog:
    """Within ``with Watchdog(total):``, every watched connection this thread uses has its
    socket shut down ``total`` seconds after the block began (if it has not ended by then);
    ``fired`` says whether that happened. The reading then fails at once (an end of stream),
    and urllib3 discards the connection instead of returning it to its pool."""

    def __init__(self, total: float, *, ambient: bool = True) -> None:
        # ambient: connections this thread opens or reuses inside the block register
        # themselves; otherwise only the sockets given to ``watch`` are cut.
        self.total, self.ambient = total, ambient
        self.fired = False
        self._lock = threading.Lock()
        self._done = False
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(total, self._fire)
        self._timer.daemon = True
        self._outer: Watchdog | None = None

    def __enter__(self) -> Watchdog:
        if self.ambient:
            self._outer = getattr(_current, "watchdog", None)
            _current.watchdog = self
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            self._done = True  # a timer firing now must not cut a connection back in its pool
        self._timer.cancel()
        if self.ambient:
            _current.watchdog = self._outer

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            if self._done:
                return
            if self.fired:
                _shut(sock)
            else:
                self._sockets.append(sock)

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Shut the connection down under whoever is reading it. Through a duplicate descriptor:
    shutdown acts on the connection, not the descriptor, and leaves the reader's (possibly TLS)
    socket object untouched for it to see the end of stream and fail."""
    try:
        duplicate = socket.socket(fileno=os.dup(sock.fileno()))
    except OSError:
        return  # already closed: nothing left to cut
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        duplicate.close()


def _register(sock: socket.socket | None) -> None:
    watchdog: Watchdog | None = getattr(_current, "watchdog", None)
    if watchdog is not None:
        watchdog.watch(sock)


class _WatchedHTTPConnection(HTTPConnection):
    # _new_conn (urllib3's private hook) is where a new socket appears, before TLS or any
    # byte; request() covers a kept-alive connection taken again from the pool.
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _register(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _register(self.sock)
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(_WatchedHTTPConnection, HTTPSConnection):
    """The same hooks before HTTPSConnection's (the MRO puts them first): the socket registered
    is the plain one, under TLS."""


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


def watch_pools(manager: urllib3.PoolManager) -> None:
    """Make the pools ``manager`` creates from now on use watched connections."""
    manager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


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
        what = f"{request.method} {request.path_url}"
        no_answer = f"timed out: no answer to {what} within {self.total:g} s"
        too_slow = (f"the answer to {what} did not finish within {self.total:g} s (a server "
                    "sending it too slowly)")
        with Watchdog(self.total) as watchdog:
            try:
                response = super().send(request, stream=True, timeout=timeout, verify=verify,
                                        cert=cert, proxies=proxies)
            except requests.RequestException as e:
                if watchdog.fired:  # the watchdog cut it: say why, not "connection broken"
                    raise requests.ReadTimeout(no_answer, request=request) from e
                raise
            if watchdog.fired:
                # http.client takes a header block cut short at the end of the stream for a
                # whole one: what it read is not the answer.
                response.close()
                raise requests.ReadTimeout(no_answer, request=request)
            if stream:  # the caller reads the body itself, in its own bounded steps
                return response
            try:
                self._read_whole(response, request, deadline)
            except TimeoutError as e:
                raise requests.ReadTimeout(too_slow, request=request) from e
            except requests.RequestException as e:
                if watchdog.fired:
                    raise requests.ReadTimeout(too_slow, request=request) from e
                raise
            if watchdog.fired:  # a body cut short at the deadline, read as if it had ended
                response.close()
                raise requests.ReadTimeout(too_slow, request=request)
            return response

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        watch_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> urllib3.ProxyManager:
        manager: urllib3.ProxyManager = super().proxy_manager_for(proxy, **kwargs)
        watch_pools(manager)
        return manager

    @staticmethod
    def _read_whole(response: requests.Response, request: requests.PreparedRequest,
                    deadline: float) -> None:
        try:
            # requests keeps a read body in _content (Response.content reads it there), and
            # offers no public way to fill it: the two private attributes we set.
            response._content = read_body(response.raw, deadline)
            response._content_consumed = True  # type: ignore[attr-defined]
        except TimeoutError:
            response.close()
            raise
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
