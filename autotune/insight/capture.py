"""Capture a Go execution trace and a CPU profile from a running service's ``net/http/pprof``.

The two endpoints block for the capture's duration (``/debug/pprof/trace?seconds=N`` streams the
trace as it is recorded, ``/debug/pprof/profile?seconds=N`` answers at the end), so both are
requested at once: they then cover the same N seconds of the service's life. Each file is
written under a temporary name and renamed when complete, so a file with the final name is a
whole capture.

The response is checked before it is kept: a service with a catch-all route answers 200 to any
path, and a trace viewer's error on an HTML page is a poor reason to give a user.
"""

from __future__ import annotations

import contextlib
import http.client
import math
import os
import secrets
import shlex
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import requests
import urllib3

from autotune import files
from autotune.deadline import chunks
from autotune.errors import MetricsError

Kind = Literal["trace", "cpu"]

# What to add to a Go service that does not serve net/http/pprof; shown with a 404.
HOW_TO_EXPOSE = (
    'import "net/http/pprof"  // then, on the mux the service serves:\n'
    '    mux.HandleFunc("/debug/pprof/", pprof.Index)\n'
    '    mux.HandleFunc("/debug/pprof/profile", pprof.Profile)\n'
    '    mux.HandleFunc("/debug/pprof/trace", pprof.Trace)\n'
    '(a service that serves http.DefaultServeMux only needs: import _ "net/http/pprof"; '
    "keep it on a loopback or internal listener, or behind a flag like the demo's DEBUG_PPROF=1)"
)
CONNECT_TIMEOUT = 5.0
# Beyond the capture itself: the profile is encoded and sent after the N seconds, and a service
# under CPU stress (a throttled cgroup) can take a while to do that.
SLACK = 30.0
CHUNK = 1 << 16
MAX_BYTES = 256 << 20
"""A capture larger than this is abandoned: the results directory is often the PVC the study
database lives on, and a 5 s trace of a busy service is tens of MiB, not hundreds."""


class _NotExposed(MetricsError):
    """A 404 from a pprof endpoint (``capture`` turns these into one message with the fix)."""


@dataclass(frozen=True)
class _Endpoint:
    path: str
    suffix: str
    magic: bytes  # how a valid file starts
    what: str
    viewer: tuple[str, ...]


_ENDPOINTS: dict[str, _Endpoint] = {
    # runtime/trace writes "go 1.NN trace\x00..." as its header
    "trace": _Endpoint("/debug/pprof/trace", ".trace", b"go 1.", "a Go execution trace",
                       ("go", "tool", "trace")),
    # a pprof profile is a gzip-compressed protobuf
    "cpu": _Endpoint("/debug/pprof/profile", ".cpu.pprof", b"\x1f\x8b", "a gzip pprof profile",
                     ("go", "tool", "pprof", "-http=:0")),
}


@dataclass(frozen=True)
class Captured:
    kind: Kind
    path: Path
    bytes: int
    open_with: str  # the shell command that opens it
    seconds: float  # what was asked of the service (the CPU profile's is whole seconds)


def _seconds_param(kind: str, seconds: float) -> tuple[str, float]:
    if kind == "cpu":
        # pprof.Profile parses ``seconds`` as an integer and silently uses 30 for anything else
        whole = max(1, math.ceil(seconds - 1e-9))
        return str(whole), float(whole)
    return f"{seconds:g}", seconds


class Transport(Protocol):
    """How to GET a path of the service's net/http/pprof: directly (local), or through the
    Kubernetes API server's pod proxy."""

    def where(self, path: str) -> str:
        """The URL that ``path`` is fetched from, for messages."""

    def get(self, path: str, timeout: float) -> AbstractContextManager[Answer]:
        """The answer to ``GET path``, streaming, the whole of it within ``timeout`` (plus the
        connect); transport failures raise MetricsError, a late answer TimeoutError."""


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    chunks: Iterator[bytes]


@dataclass(frozen=True)
class Direct:
    """Plain HTTP to the service (``http://127.0.0.1:8080``)."""

    base_url: str

    def where(self, path: str) -> str:
        return f"{self.base_url.rstrip('/')}{path}"

    @contextlib.contextmanager
    def get(self, path: str, timeout: float) -> Iterator[Answer]:
        try:
            deadline = time.monotonic() + CONNECT_TIMEOUT + timeout
            with requests.get(self.where(path), stream=True,
                              timeout=(CONNECT_TIMEOUT, timeout)) as r:
                yield Answer(r.status_code, r.reason, chunks(r.raw, deadline, CHUNK))
        except requests.RequestException as e:
            raise MetricsError(f"{self.where(path)}: {e}") from None


def _fetch(transport: Transport, kind: Kind, seconds: float, out: Path,
           max_bytes: int = MAX_BYTES) -> Captured:
    endpoint = _ENDPOINTS[kind]
    param, asked = _seconds_param(kind, seconds)
    path = f"{endpoint.path}?seconds={param}"
    url = transport.where(path)
    # A name nobody can guess, created only if absent, never through a link (autotune.files;
    # review finding: .<name>.part<pid>, and as PID 1 of the CronJob's pod the PID is 1).
    tmp = out.with_name(f".{out.name}.part{secrets.token_hex(8)}")
    try:
        with transport.get(path, asked + SLACK) as r:
            if r.status == 404:
                raise _NotExposed(url)
            if r.status != 200:
                # pprof explains itself in a short plain-text body ("cpu profiling already in
                # use", "profile duration exceeds server's WriteTimeout")
                text = b"".join(r.chunks)[:4096].decode(errors="replace").strip()
                reason = text.splitlines()[0][:200] if text else r.reason
                raise MetricsError(f"{url}: HTTP {r.status}: {reason}")
            size = 0
            head = b""
            with os.fdopen(files.open_no_link(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                                              0o666), "wb") as f:
                try:
                    for chunk in r.chunks:
                        if len(head) < len(endpoint.magic):
                            head += chunk[: len(endpoint.magic) - len(head)]
                        size += len(chunk)
                        if size > max_bytes:
                            raise MetricsError(
                                f"{url}: the capture exceeds the cap of {max_bytes} bytes: "
                                "abandoned (shorten it, or capture a less busy moment)")
                        f.write(chunk)
                except (OSError, requests.RequestException, urllib3.exceptions.HTTPError,
                        http.client.HTTPException) as e:
                    # A connection that breaks mid-stream fails this capture, never the run.
                    raise MetricsError(f"{url}: the stream broke after {size} bytes: "
                                       f"{e}") from None
        if not head.startswith(endpoint.magic):
            raise MetricsError(
                f"{url}: the answer ({size} bytes, starting {head!r}) is not {endpoint.what}: "
                "is this a Go service's net/http/pprof?")
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return Captured(kind, out, size, shlex.join([*endpoint.viewer, str(out)]), asked)


def capture(
    service: str | Transport, kinds: Sequence[Kind], seconds: float, out_dir: Path, name: str,
    *, max_bytes: int = MAX_BYTES,
) -> list[Captured]:
    """Capture ``kinds`` from the service (a base URL such as ``http://127.0.0.1:8080``, or a
    transport) for ``seconds`` at the same time, into ``out_dir/<name>.trace`` and
    ``out_dir/<name>.cpu.pprof``.

    Raises ``MetricsError`` with every failure's reason when any capture fails (one that
    succeeded is still written, and the message says where)."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds must be > 0, got {seconds}")
    if not name or name.startswith(".") or "/" in name or os.sep in name:
        raise ValueError(f"name must be a plain file name, got {name!r}")
    unknown = [k for k in kinds if k not in _ENDPOINTS]
    if unknown:
        raise ValueError(f"unknown capture kind(s) {unknown}: choose from {sorted(_ENDPOINTS)}")
    wanted = list(dict.fromkeys(kinds))
    if not wanted:
        return []
    transport = Direct(service) if isinstance(service, str) else service
    out_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        futures = [pool.submit(_fetch, transport, k, seconds,
                               out_dir / f"{name}{_ENDPOINTS[k].suffix}", max_bytes)
                   for k in wanted]
    done: list[Captured] = []
    failed: list[str] = []
    missing: list[str] = []
    for future in futures:
        try:
            done.append(future.result())
        except _NotExposed as e:
            missing.append(str(e))
        except MetricsError as e:
            failed.append(str(e))
    if missing:
        service_at = transport.where("")
        failed.insert(0, f"{service_at} does not expose net/http/pprof ({', '.join(missing)} "
                         f"answered 404 Not Found); to capture, add to the service:\n"
                         f"{HOW_TO_EXPOSE}")
    if failed:
        kept = "".join(f"; the {c.kind} capture was written to {c.path}" for c in done)
        raise MetricsError("; ".join(failed) + kept)
    return done
