"""The one module that talks to the Kubernetes API: the only importer of ``kubernetes``.

One request path (``Kube._request``) for every kind, built-in or custom: the URL comes from the
``Kind``, never from a per-kind generated method. It owns:

- timeouts on every request (connect and read; a watch gets its own server-side timeout plus
  a grace period);
- one bounded retry loop for transient failures (429, 5xx, connection errors, timeouts);
- the error vocabulary: a failed request raises a typed ``ApiError`` (``NotFound``,
  ``Conflict``, ``Gone``, ``Forbidden``, ...; see errors.py) whose message names the verb and
  the resource and says what to do about a 401, a 403 or an admission webhook's denial;
- ``Kube.wait``: list, then watch from the list's resourceVersion until a condition holds on
  the current state. Any trouble in the stream (a 410 Gone, a 500, a 504 "too large resource
  version" from a lagging API server, a cut connection, a torn line) means: list again and
  resume, until the deadline.

Objects are plain JSON dicts; the client's typed models are never deserialised, so custom
resources and built-in ones are handled alike.

Its size (~510 lines) is the one request path and the one wait: kept in one module so that
every call shares the same timeouts, retries and error vocabulary.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from autotune import redaction
from autotune.clock import Clock
from autotune.deadline import Watchdog, read_body, watch_pools
from autotune.errors import PrerequisiteError
from autotune.platforms.kubernetes.errors import ApiError, Gone, NotFound, Unreachable, api_error
from autotune.platforms.kubernetes.objects import (
    ACCESS_REVIEWS,
    POD_LOGS,
    POD_PROXY,
    PODS,
    Kind,
    Obj,
    Selection,
    name_of,
)
from autotune.platforms.kubernetes.writers import FIELD_MANAGER

log = logging.getLogger(__name__)

T = TypeVar("T")

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

RETRIABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0
# The whole answer of a request (after its headers) within this: a server that trickles it keeps
# every read inside READ_TIMEOUT forever (autotune.deadline).
BODY_DEADLINE = 60.0
# A watch that stays silent this much longer than its own server-side timeout is a dead
# connection, not a quiet one.
WATCH_GRACE = 15.0
# After a broken watch, wait this long before listing again (a struggling server gets air).
RELIST_PAUSE = 0.2


def _status_message(body: str | bytes | None) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, or the body itself."""
    if body is None:
        return ""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        status = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(status, dict) and status.get("message"):
        return str(status["message"])
    return text.strip()[:500]


def describe_failure(status: int | None, message: str, verb: str, what: str,
                     resource: str, attempts: int = 1) -> str:
    """A message for humans about a failed request: what we tried and what to do about it."""
    tried = f"{verb} {what}"
    if status == 401:
        return (f"the Kubernetes API server did not accept our credentials (401 Unauthorized) "
                f"when trying to {tried}: the kubeconfig's token or certificate (or the service "
                f"account token) is missing, wrong or expired")
    if status == 403 and "admission webhook" in message:
        return f"an admission webhook denied the request to {tried}: {message}"
    if status == 403:
        return (f"forbidden (403): not allowed to {tried}. Grant the verb {verb!r} on "
                f"{resource} to this user or service account (see deploy/rbac.yaml). "
                f"The API server said: {message}")
    if status == 404:
        return f"not found (404) when trying to {tried}: {message}"
    if status == 409:
        return f"conflict (409) when trying to {tried}: {message}"
    if status in (400, 422):
        return f"the API server rejected the request to {tried} ({status}): {message}"
    again = f" after {attempts} attempts" if attempts > 1 else ""
    return f"the API server failed to {tried} ({status}){again}: {message}"


def _path(kind: Kind, namespace: str | None, name: str | None = None) -> str:
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    if namespace is not None:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{kind.plural}"
    return base + (f"/{quote(name, safe='')}" if name else "")


def proxy_path(namespace: str, pod: str, port: int, route: str) -> str:
    """``/api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy<route>`` (the API server's pod proxy)."""
    return (f"{_path(PODS, namespace, pod)}:{port}/proxy/"
            f"{quote(route.lstrip('/'), safe='/')}")


class _Broken(Exception):
    """The watch stream broke (an ERROR event, a cut connection, a torn line): list again."""


class Kube:
    """A connected client. Every call is retried on transient failures, bounded."""

    def __init__(self, api: client.ApiClient, clock: Clock, *, attempts: int = 5,
                 backoff: float = 0.5, body_deadline: float = BODY_DEADLINE,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 read_timeout: float = READ_TIMEOUT) -> None:
        self.api, self.clock = api, clock
        self.attempts, self.backoff = attempts, backoff
        self.body_deadline = body_deadline
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.host = str(api.configuration.host)
        # The status line and headers within connect + read timeout in all (autotune.deadline):
        # http.client reads them in a loop of its own, each read inside the read timeout.
        watch_pools(api.rest_client.pool_manager)
        # The API server's clock as of its last answer: (its Date, our monotonic time then).
        self._server_clock: tuple[float, float] | None = None

    # --- the one request path -----------------------------------------------------------

    def _request(self, verb: str, method: str, kind: Kind, what: str, path: str, *,
                 query: dict[str, Any] | None = None, body: Obj | None = None,
                 content_type: str = "application/json", accept: str = "application/json",
                 timeout: tuple[float, float] | None = None,
                 attempts: int | None = None) -> Any:
        """Send one request, retrying transient failures; the unread urllib3 response."""
        timeout = timeout or (self.connect_timeout, self.read_timeout)
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        attempts = attempts or self.attempts
        for attempt in range(1, attempts + 1):
            try:
                request = self.api.param_serialize(
                    method, path, query_params=params, body=body,
                    header_params={"Accept": accept, "Content-Type": content_type},
                    auth_settings=["BearerToken"])
                with Watchdog(sum(timeout)) as watchdog:
                    cut = TimeoutError(f"no complete headers within {sum(timeout):g} s")
                    try:
                        response = self.api.call_api(*request, _request_timeout=timeout)
                    except (urllib3.exceptions.HTTPError, OSError) as e:
                        if watchdog.fired:
                            raise cut from e
                        raise
                    if watchdog.fired:
                        # http.client takes a header block cut short for a whole one: what
                        # it parsed is not an answer.
                        response.response.close()
                        raise cut
                self._note_date(response.response.headers.get("Date"))
                if not 200 <= response.status <= 299:
                    # The error's body (its Status message), within the same deadline as any.
                    text = read_body(response.response, time.monotonic() + self.body_deadline)
                    raise ApiException.from_response(
                        http_resp=response, body=text.decode("utf-8", errors="replace"),
                        data=None)
                return response.response
            except ApiException as e:
                status = int(e.status) if e.status else None
                message = _status_message(e.body) or str(e.reason or "")
                if status in RETRIABLE_STATUSES and attempt < attempts:
                    log.debug("%s %s: %s %s; retrying", verb, what, status, message)
                    self.clock.sleep(self._delay(attempt, e))
                    continue
                if status is None:
                    raise Unreachable(f"cannot reach the Kubernetes API server at {self.host} "
                                      f"to {verb} {what}: {message}") from e
                raise api_error(describe_failure(status, message, verb, what, kind.resource,
                                                 attempt), status) from e
            except (urllib3.exceptions.HTTPError, OSError) as e:
                if attempt < attempts:
                    log.debug("%s %s: %s; retrying", verb, what, e)
                    self.clock.sleep(self._delay(attempt, None))
                    continue
                raise Unreachable(f"cannot reach the Kubernetes API server at {self.host} to "
                                  f"{verb} {what} ({attempt} attempts): {e}") from e
        raise AssertionError("unreachable")  # pragma: no cover

    def _note_date(self, date: str | None) -> None:
        if not date:
            return
        try:
            when = parsedate_to_datetime(date)
        except Exception:  # a malformed header must never fail the request it came with
            return
        if when.tzinfo is None:  # asctime's form, or "-0000": HTTP dates are GMT (RFC 9110)
            when = when.replace(tzinfo=dt.UTC)
        self._server_clock = (when.timestamp(), self.clock.monotonic())

    def server_now(self) -> float:
        """The API server's time now (epoch seconds): the Date of its last answer (every
        answer carries one: Go's net/http sets it, RFC 9110 section 6.6.1) plus the time since,
        to the second. What several hosts read and write against one another (the run Lease's
        renewTime) is timed by this one clock, so a host whose own clock is minutes off still
        agrees with the others on when something expired. Our own clock before any answer
        came, or from a server that sends no Date."""
        if self._server_clock is None:
            return self.clock.now()
        stamp, seen = self._server_clock
        return stamp + (self.clock.monotonic() - seen)

    def _delay(self, attempt: int, e: ApiException | None) -> float:
        retry_after = (e.headers or {}).get("Retry-After") if e is not None else None
        if retry_after is not None and str(retry_after).isdigit():
            return min(float(retry_after), 10.0)
        return float(min(self.backoff * 2 ** (attempt - 1), 8.0))

    def _json(self, verb: str, method: str, kind: Kind, what: str, path: str,
              **kwargs: Any) -> Obj:
        response = self._request(verb, method, kind, what, path, **kwargs)
        data: Obj = json.loads(self._body(response, verb, what) or b"{}")
        return data

    def _body(self, response: Any, verb: str, what: str) -> bytes:
        clean = False
        try:
            body = read_body(response, time.monotonic() + self.body_deadline)
            clean = True
            return body
        except TimeoutError:
            raise Unreachable(f"the Kubernetes API server at {self.host} did not finish its "
                              f"answer to {verb} {what} within {self.body_deadline:g} s") \
                from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise Unreachable(f"the answer of the Kubernetes API server at {self.host} to "
                              f"{verb} {what} broke off: {e}") from e
        finally:
            if not clean:  # a half-read connection must not go back to the pool
                response.close()
            response.release_conn()

    # --- reading ------------------------------------------------------------------------

    def list(self, sel: Selection) -> tuple[list[Obj], str]:
        """The selected objects and the list's resourceVersion (to watch from)."""
        data = self._json("list", "GET", sel.kind, sel.describe(),
                          _path(sel.kind, sel.namespace),
                          query={"labelSelector": sel.labels, "fieldSelector": sel.fields})
        version = str(data.get("metadata", {}).get("resourceVersion", ""))
        return list(data.get("items") or []), version

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        """The object, or None if it does not exist (``namespace`` None: cluster-scoped)."""
        what = (f'{kind.resource} "{name}"' if namespace is None
                else f'{kind.resource} "{name}" in namespace "{namespace}"')
        try:
            return self._json("get", "GET", kind, what, _path(kind, namespace, name))
        except NotFound:
            return None

    def pod_log(self, namespace: str, pod: str, container: str, since_seconds: int,
                limit_bytes: int = 8 << 20) -> tuple[str, bool]:
        """The container's log of the last ``since_seconds``, every line prefixed by the
        kubelet's timestamp (``timestamps=true``), and whether it was cut at ``limit_bytes``
        (the kubelet counts them from ``sinceSeconds`` on, so a cut loses the *end*)."""
        what = f'the log of container "{container}" of pod "{pod}" in namespace "{namespace}"'
        response = self._request(
            "get", "GET", POD_LOGS, what, _path(PODS, namespace, pod) + "/log",
            query={"container": container, "timestamps": "true",
                   "sinceSeconds": str(max(1, since_seconds)), "limitBytes": str(limit_bytes)},
            accept="*/*")  # the log is text/plain, as the generated client asks
        data = self._body(response, "get", what)
        return data.decode(errors="replace"), len(data) >= limit_bytes

    def proxy_get(self, namespace: str, pod: str, port: int, path: str,
                  timeout: float) -> Any:
        """GET ``path`` (and its query) from ``port`` of a pod through the API server's pod proxy
        (``pods/proxy``): the unread, streaming urllib3 response. Sent once: what it asks for
        (a trace, a profile) takes the whole ``timeout`` and must not run twice."""
        route, _, query = path.partition("?")
        what = f'port {port} of pod "{pod}" in namespace "{namespace}" (pods/proxy)'
        return self._request(
            "get", "GET", POD_PROXY, what, proxy_path(namespace, pod, port, route),
            query=dict(parse_qsl(query)), accept="*/*", timeout=(self.connect_timeout, timeout),
            attempts=1)

    def serves(self, kind: Kind) -> bool:
        """Whether the API server knows the resource (its CRD is installed), via discovery."""
        what = f"the API group {kind.api_version}"
        path = f"/apis/{kind.api_version}" if kind.group else f"/api/{kind.version}"
        try:
            data = self._json("discover", "GET", kind, what, path)
        except NotFound:
            return False
        return any(r.get("name") == kind.plural for r in data.get("resources") or [])

    def can_i(self, verb: str, kind: Kind, namespace: str) -> tuple[bool, str]:
        """SelfSubjectAccessReview: may we ``verb`` ``kind`` in ``namespace``? (and why not)."""
        resource, _, subresource = kind.plural.partition("/")
        attributes = {"namespace": namespace, "verb": verb, "group": kind.group,
                      "resource": resource}
        if subresource:
            attributes["subresource"] = subresource
        review = {"apiVersion": ACCESS_REVIEWS.api_version, "kind": ACCESS_REVIEWS.kind,
                  "spec": {"resourceAttributes": attributes}}
        data = self._json("create", "POST", ACCESS_REVIEWS, "a SelfSubjectAccessReview",
                          _path(ACCESS_REVIEWS, None), body=review)
        status = data.get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or
                                                status.get("evaluationError") or "")

    # --- writing ------------------------------------------------------------------------

    def patch(self, kind: Kind, namespace: str, name: str, patch: Obj, *,
              dry_run: bool = False) -> Obj:
        """Strategic-merge-patch an object (lists of containers and env merge by name);
        unknown fields are an error (``fieldValidation=Strict``), never silently pruned."""
        what = f'{kind.resource} "{name}" in namespace "{namespace}"'
        return self._json("patch", "PATCH", kind, what, _path(kind, namespace, name),
                          query={"dryRun": "All" if dry_run else None,
                                 "fieldValidation": "Strict", "fieldManager": FIELD_MANAGER},
                          body=patch, content_type=STRATEGIC_MERGE_PATCH)

    def create(self, kind: Kind, namespace: str, body: Obj, *, dry_run: bool = False) -> Obj:
        """Create an object; unknown fields are an error, never silently pruned."""
        what = f'{kind.resource} "{name_of(body)}" in namespace "{namespace}"'
        return self._json("create", "POST", kind, what, _path(kind, namespace),
                          query={"dryRun": "All" if dry_run else None,
                                 "fieldValidation": "Strict", "fieldManager": FIELD_MANAGER},
                          body=body)

    def replace(self, kind: Kind, namespace: str, name: str, body: Obj) -> Obj:
        """Update (PUT) an object; its ``metadata.resourceVersion`` is a precondition: another
        writer's change in between is ``Conflict``."""
        what = f'{kind.resource} "{name}" in namespace "{namespace}"'
        return self._json("update", "PUT", kind, what, _path(kind, namespace, name),
                          query={"fieldValidation": "Strict", "fieldManager": FIELD_MANAGER},
                          body=body)

    def delete(self, kind: Kind, namespace: str, name: str, *,
               preconditions: Obj | None = None) -> bool:
        """Ask for deletion of an object; False if it was already gone. ``preconditions``
        (``uid``, ``resourceVersion``): delete only that version of it, else ``Conflict``."""
        what = f'{kind.resource} "{name}" in namespace "{namespace}"'
        body = ({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
                if preconditions else None)
        try:
            self._json("delete", "DELETE", kind, what, _path(kind, namespace, name), body=body)
        except NotFound:
            return False
        return True

    # --- watching -----------------------------------------------------------------------

    def watch(self, sel: Selection, resource_version: str,
              timeout: float) -> Iterator[tuple[str, Obj]]:
        """Events after ``resource_version`` for at most ``timeout`` seconds (server-side).

        Raises ``_Broken`` when the stream cannot be trusted any more: an ERROR event (410 Gone,
        500, 504 "too large resource version", ...), a cut connection or a torn line. A stream
        that the server ends normally (its timeout) just ends.
        """
        seconds = max(1, math.ceil(timeout))
        try:
            response = self._request(
                "watch", "GET", sel.kind, sel.describe(), _path(sel.kind, sel.namespace),
                query={"labelSelector": sel.labels, "fieldSelector": sel.fields,
                       "resourceVersion": resource_version or None,
                       "timeoutSeconds": seconds, "allowWatchBookmarks": "true",
                       "watch": "true"},
                timeout=(self.connect_timeout, seconds + WATCH_GRACE))
        except Gone as e:
            raise _Broken(str(e)) from e
        try:
            for line in _lines(response):
                try:
                    event = json.loads(line)
                except ValueError as e:
                    raise _Broken(f"torn watch event: {line[:80]!r}") from e
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    _watch_error(obj, sel)
                yield kind, obj
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise _Broken(f"stream cut: {e}") from e
        finally:
            response.close()

    def wait(self, sel: Selection, until: Callable[[dict[str, Obj]], T | None], timeout: float,
             *, every: float = 60.0,
             poll: Callable[[dict[str, Obj]], None] | None = None) -> T | None:
        """Watch the selection until ``until(state)`` returns a result; None after ``timeout``.

        ``state`` maps names to the current objects. ``poll(state)`` runs after every change and
        at least every ``every`` seconds; it may raise to stop waiting (for facts a watch of
        ``sel`` cannot see, such as events about the object).
        """
        deadline = self.clock.monotonic() + timeout
        state, version = self._snapshot(sel)
        while True:
            found = until(state)
            if found is not None:
                return found
            if poll is not None:
                poll(state)
            # A wait of no time: where a pool's member, told to stop, stops (its clock raises;
            # autotune.study.pool.StoppableClock) once per watch slice.
            self.clock.sleep(0)
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return None
            started = self.clock.monotonic()
            try:
                for kind, obj in self.watch(sel, version, min(remaining, every)):
                    version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        if kind == "DELETED":
                            state.pop(name_of(obj), None)
                        else:
                            state[name_of(obj)] = obj
                        found = until(state)
                        if found is not None:
                            return found
                        if poll is not None:
                            poll(state)
                    # The server ends a watch at its timeoutSeconds; one (or a proxy) that does
                    # not, and keeps it busy with events or bookmarks, must not hold us past ours.
                    if self.clock.monotonic() > deadline + WATCH_GRACE:
                        return None
            except _Broken as e:
                log.debug("watch of %s broke (%s); listing again", sel.describe(), e)
                if deadline - self.clock.monotonic() <= 0:
                    return None
                self.clock.sleep(min(RELIST_PAUSE, max(0.0, deadline - self.clock.monotonic())))
                state, version = self._snapshot(sel)
                continue
            if self.clock.monotonic() - started < 0.05:
                self.clock.sleep(0.05)  # a server that ends every watch at once: do not spin

    def _snapshot(self, sel: Selection) -> tuple[dict[str, Obj], str]:
        items, version = self.list(sel)
        return {name_of(o): o for o in items}, version


def _lines(response: Any) -> Iterator[str]:
    """The lines of a chunked watch response, as they arrive. A last line without its newline
    is a torn event (the stream was cut inside it): yielded as is, so the caller sees it."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line.decode("utf-8", errors="replace")
    if buffer.strip():
        yield buffer.decode("utf-8", errors="replace")


def _watch_error(status: Obj, sel: Selection) -> None:
    """An ERROR event in a watch stream. Whatever its code (410 Gone; 500; 504 "Too large
    resource version" from an API server behind the others; 429), the stream is over and a
    fresh list is the way to continue. Only a 401/403 is not worth retrying."""
    code = status.get("code")
    message = str(status.get("message", status))
    text = describe_failure(code, message, "watch", sel.describe(), sel.kind.resource)
    if code in (401, 403):
        raise api_error(text, code)
    raise _Broken(text)


# --- connecting ---------------------------------------------------------------------------

def _kubeconfig_paths(kubeconfig: str | None) -> list[Path]:
    if kubeconfig:
        return [Path(kubeconfig).expanduser()]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def configuration(*, context: str | None = None,
                  kubeconfig: str | None = None) -> client.Configuration:
    """Credentials from the kubeconfig (optionally another context), else in-cluster ones."""
    cfg = client.Configuration()
    paths = _kubeconfig_paths(kubeconfig)
    existing = [p for p in paths if p.is_file()]
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if kubeconfig and not existing:
        raise PrerequisiteError(f"the kubeconfig {kubeconfig} (target.kubernetes.kubeconfig, or "
                                "--kubeconfig) does not exist")
    if context and not existing:
        raise PrerequisiteError(f"cannot use the context {context!r}: no kubeconfig at "
                                f"{', '.join(map(str, paths))}")
    try:
        if existing:
            config.load_kube_config(config_file=os.pathsep.join(map(str, existing)),
                                    context=context, client_configuration=cfg,
                                    persist_config=False)  # type: ignore[no-untyped-call]
        elif in_cluster:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            raise PrerequisiteError(
                "no Kubernetes credentials: no kubeconfig at "
                f"{', '.join(map(str, paths))} and not running in a pod "
                "(KUBERNETES_SERVICE_HOST is unset). Set target.kubernetes.kubeconfig (or "
                "--kubeconfig) or KUBECONFIG, or run autotune in the cluster with a service "
                "account "
                "(see deploy/).")
    except (config.ConfigException, yaml.YAMLError, TypeError, AttributeError,
            ValueError) as e:
        # Not only ConfigException: a kubeconfig that is not YAML, or not a mapping, reaches
        # the loader's own parsing (yaml's errors, a TypeError): the user's file, not a bug.
        if not existing:
            raise PrerequisiteError(f"cannot use the in-cluster service account: {e}") from e
        where = f" (context {context!r})" if context else ""
        raise PrerequisiteError(f"cannot use the kubeconfig {', '.join(map(str, existing))}"
                                f"{where}: {redaction.scrub(str(e))}") from e
    # Our own loop retries (with the clock, bounded); urllib3 must not retry underneath it.
    cfg.retries = False
    return cfg


def connect(clock: Clock, *, context: str | None = None, kubeconfig: str | None = None) -> Kube:
    return Kube(client.ApiClient(configuration(context=context, kubeconfig=kubeconfig)), clock)


__all__ = ["ApiError", "Kube", "configuration", "connect", "describe_failure"]
