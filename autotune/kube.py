"""The one module that talks to the Kubernetes API: the only importer of ``kubernetes``.

It owns three things the backends must not reinvent:

- the error vocabulary: every ``ApiException`` becomes an ``ApiError`` (an ``AutotuneError``)
  whose message names the verb and the resource, and says what to do about a 401, a 403 or an
  admission webhook's denial; ``reraise_as`` turns it into the caller's family error;
- one bounded retry loop for transient failures (429, 5xx, connection errors, timeouts);
- ``Kube.wait``: list, then watch from the list's resourceVersion until a condition holds on the
  current state, re-listing when the server says the version is too old (410 Gone).

Objects are plain JSON dicts, the shapes users see in ``kubectl get -o json``: the client's
typed models are never deserialised (``_preload_content=False``), so custom resources and
built-in ones are handled alike.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from autotune.clock import Clock
from autotune.errors import AutotuneError, PrerequisiteError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
T = TypeVar("T")

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGER = "autotune"
STUDY_LABEL = "autotune/study"
TRIAL_LABEL = "autotune/trial"
ORIGINAL_ENV_ANNOTATION = "autotune/original-env"

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

RETRIABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0
# A watch that stays silent this much longer than its own server-side timeout is a dead
# connection, not a quiet one.
WATCH_GRACE = 15.0


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def resource(self) -> str:
        """As in RBAC rules and kubectl: ``deployments.apps``, ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


DEPLOYMENTS = Kind("apps", "v1", "deployments", "Deployment")
PODS = Kind("", "v1", "pods", "Pod")
EVENTS = Kind("", "v1", "events", "Event")
STRESSCHAOS = Kind("chaos-mesh.org", "v1alpha1", "stresschaos", "StressChaos")


@dataclass(frozen=True)
class Selection:
    """Objects of one kind in one namespace, narrowed by label and field selectors."""

    kind: Kind
    namespace: str
    labels: str | None = None
    fields: str | None = None

    def describe(self) -> str:
        narrowed = [s for s in (self.labels, self.fields) if s]
        where = f" matching {', '.join(narrowed)}" if narrowed else ""
        return f"{self.kind.resource} in namespace {self.namespace!r}{where}"


def one(kind: Kind, namespace: str, name: str) -> Selection:
    return Selection(kind, namespace, fields=f"metadata.name={name}")


class ApiError(AutotuneError):
    """A request to the API server failed; ``status`` is the HTTP status (None: unreachable)."""

    exit_code = 1

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


@contextmanager
def reraise_as(family: type[AutotuneError]) -> Iterator[None]:
    """Report API failures as the caller's error family (TargetError, ChaosError, ...)."""
    try:
        yield
    except ApiError as e:
        if isinstance(e, family):
            raise
        raise family(str(e)) from e


# --- labels and selectors -----------------------------------------------------------------

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]")


def label_value(text: str) -> str:
    """``text`` as a valid label value (<= 63 characters, alphanumeric at both ends)."""
    value = _LABEL_VALUE_BAD.sub("-", text)[:63]
    return value.strip("._-")


def label_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def selector_of(match_labels: Mapping[str, str], expressions: list[Obj] | None = None) -> str:
    """A Deployment's ``spec.selector`` as a label-selector string."""
    parts = [f"{k}={v}" for k, v in sorted(match_labels.items())]
    for e in expressions or []:
        key, op, values = e["key"], e["operator"], ",".join(e.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                      "Exists": key, "DoesNotExist": f"!{key}"}[op])
    return ",".join(parts)


def ours(study: str | None = None) -> str:
    """The label selector of objects autotune created (for one study, or for any)."""
    labels = {MANAGED_BY_LABEL: MANAGER}
    if study is not None:
        labels[STUDY_LABEL] = label_value(study)
    return label_selector(labels)


def name_of(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


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


class Kube:
    """A connected client. Every call is retried on transient failures, bounded."""

    def __init__(self, api: client.ApiClient, clock: Clock, *, attempts: int = 5,
                 backoff: float = 0.5) -> None:
        self.api, self.clock = api, clock
        self.attempts, self.backoff = attempts, backoff
        self.host = str(api.configuration.host)
        self._core = client.CoreV1Api(api)
        self._apps = client.AppsV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._authz = client.AuthorizationV1Api(api)

    # --- the retry loop -----------------------------------------------------------------

    def _call(self, verb: str, kind: Kind, what: str, request: Callable[[], Any]) -> Any:
        """Run ``request`` (returns an unread urllib3 response), retrying transient failures."""
        for attempt in range(1, self.attempts + 1):
            try:
                return request()
            except ApiException as e:
                status = int(e.status) if e.status is not None else None
                message = _status_message(e.body) or str(e.reason or "")
                if status in RETRIABLE_STATUSES and attempt < self.attempts:
                    log.debug("%s %s: %s %s; retrying", verb, what, status, message)
                    self.clock.sleep(self._delay(attempt, e))
                    continue
                text = describe_failure(status, message, verb, what, kind.resource, attempt)
                raise ApiError(text, status) from e
            except (urllib3.exceptions.HTTPError, OSError) as e:
                if attempt < self.attempts:
                    log.debug("%s %s: %s; retrying", verb, what, e)
                    self.clock.sleep(self._delay(attempt, None))
                    continue
                raise ApiError(f"cannot reach the Kubernetes API server at {self.host} to "
                               f"{verb} {what} ({attempt} attempts): {e}") from e
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, e: ApiException | None) -> float:
        retry_after = (e.headers or {}).get("Retry-After") if e is not None else None
        if retry_after is not None and str(retry_after).isdigit():
            return min(float(retry_after), 10.0)
        return float(min(self.backoff * 2 ** (attempt - 1), 8.0))

    def _json(self, verb: str, kind: Kind, what: str, request: Callable[[], Any]) -> Obj:
        response = self._call(verb, kind, what, request)
        try:
            data: Obj = json.loads(response.data or b"{}")
        finally:
            response.release_conn()
        return data

    # --- reading ------------------------------------------------------------------------

    def _lister(self, kind: Kind) -> Callable[..., Any]:
        if kind == PODS:
            return self._core.list_namespaced_pod
        if kind == EVENTS:
            return self._core.list_namespaced_event
        if kind == DEPLOYMENTS:
            return self._apps.list_namespaced_deployment
        return partial(self._custom.list_namespaced_custom_object, kind.group, kind.version,
                       plural=kind.plural)

    def list(self, sel: Selection) -> tuple[list[Obj], str]:
        """The selected objects and the list's resourceVersion (to watch from)."""
        lister = self._lister(sel.kind)
        data = self._json("list", sel.kind, sel.describe(), lambda: lister(
            namespace=sel.namespace, label_selector=sel.labels, field_selector=sel.fields,
            _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)))
        version = str(data.get("metadata", {}).get("resourceVersion", ""))
        return list(data.get("items") or []), version

    def get(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        """The object, or None if it does not exist."""
        what = f'{kind.resource} "{name}" in namespace "{namespace}"'
        if kind == DEPLOYMENTS:
            def request() -> Any:
                return self._apps.read_namespaced_deployment(
                    name, namespace, _preload_content=False,
                    _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT))
        else:
            def request() -> Any:
                return self._custom.get_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name,
                    _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT))
        try:
            return self._json("get", kind, what, request)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def serves(self, kind: Kind) -> bool:
        """Whether the API server knows the resource (its CRD is installed), via discovery."""
        what = f"the API group {kind.api_version}"
        try:
            data = self._json("discover", kind, what, lambda: self._custom.get_api_resources(
                kind.group, kind.version, _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)))
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return any(r.get("name") == kind.plural for r in data.get("resources") or [])

    def can_i(self, verb: str, kind: Kind, namespace: str) -> tuple[bool, str]:
        """SelfSubjectAccessReview: may we ``verb`` ``kind`` in ``namespace``? (and why not)."""
        review = client.V1SelfSubjectAccessReview(
            api_version="authorization.k8s.io/v1", kind="SelfSubjectAccessReview",
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace, verb=verb, group=kind.group, resource=kind.plural)))
        authz = Kind("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                     "SelfSubjectAccessReview")
        data = self._json("create", authz, "a SelfSubjectAccessReview", lambda:
                          self._authz.create_self_subject_access_review(
                              review, _preload_content=False,
                              _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)))
        status = data.get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or
                                                status.get("evaluationError") or "")

    # --- writing ------------------------------------------------------------------------

    def patch_deployment(self, namespace: str, name: str, patch: Obj, *,
                         dry_run: bool = False) -> Obj:
        """Strategic-merge-patch a Deployment: lists of containers and env merge by name."""
        what = f'deployments.apps "{name}" in namespace "{namespace}"'
        return self._json("patch", DEPLOYMENTS, what, lambda: self._apps
                          .patch_namespaced_deployment(
            name, namespace, patch, dry_run="All" if dry_run else None,
            field_validation="Strict", _content_type=STRATEGIC_MERGE_PATCH,
            _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)))

    def create(self, kind: Kind, namespace: str, body: Obj, *, dry_run: bool = False) -> Obj:
        """Create a custom object; unknown fields are an error, never silently pruned."""
        what = f'{kind.resource} "{name_of(body)}" in namespace "{namespace}"'
        return self._json("create", kind, what, lambda: self._custom
                          .create_namespaced_custom_object(
            kind.group, kind.version, namespace, kind.plural, body,
            dry_run="All" if dry_run else None, field_validation="Strict",
            _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)))

    def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        """Ask for deletion of a custom object; False if it was already gone."""
        what = f'{kind.resource} "{name}" in namespace "{namespace}"'
        try:
            self._json("delete", kind, what, lambda: self._custom.delete_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, name,
                _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)))
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    # --- watching -----------------------------------------------------------------------

    def watch(self, sel: Selection, resource_version: str,
              timeout: float) -> Iterator[tuple[str, Obj]]:
        """Events after ``resource_version`` for at most ``timeout`` seconds (server-side).

        Raises ``_Expired`` when the version is too old; a stream cut short just ends.
        """
        seconds = max(1, math.ceil(timeout))
        lister = self._lister(sel.kind)
        try:
            response = self._call("watch", sel.kind, sel.describe(), lambda: lister(
                namespace=sel.namespace, label_selector=sel.labels, field_selector=sel.fields,
                resource_version=resource_version or None, timeout_seconds=seconds,
                allow_watch_bookmarks=True, watch=True, _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, seconds + WATCH_GRACE)))
        except ApiError as e:
            if e.status == 410:
                raise _Expired(str(e)) from e
            raise
        try:
            for line in _lines(response):
                event = json.loads(line)
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    _raise_watch_error(obj, sel)
                yield kind, obj
        except (urllib3.exceptions.HTTPError, OSError) as e:
            log.debug("watch of %s ended early: %s", sel.describe(), e)
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
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return None
            started = self.clock.monotonic()
            try:
                for kind, obj in self.watch(sel, version, min(remaining, every)):
                    version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        state.pop(name_of(obj), None)
                    else:
                        state[name_of(obj)] = obj
                    found = until(state)
                    if found is not None:
                        return found
                    if poll is not None:
                        poll(state)
            except _Expired:
                log.debug("watch of %s expired; listing again", sel.describe())
                state, version = self._snapshot(sel)
                continue
            if self.clock.monotonic() - started < 0.05:
                self.clock.sleep(0.05)  # a server that ends every watch at once: do not spin

    def _snapshot(self, sel: Selection) -> tuple[dict[str, Obj], str]:
        items, version = self.list(sel)
        return {name_of(o): o for o in items}, version


def _lines(response: Any) -> Iterator[str]:
    """The lines of a chunked watch response, as they arrive."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line.decode("utf-8", errors="replace")
    if buffer.strip():
        yield buffer.decode("utf-8", errors="replace")


def _raise_watch_error(status: Obj, sel: Selection) -> None:
    code = status.get("code")
    if code == 410:
        raise _Expired(str(status.get("message", "")))
    message = str(status.get("message", status))
    raise ApiError(describe_failure(code, message, "watch", sel.describe(), sel.kind.resource),
                   code)


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
        raise PrerequisiteError(f"target.kubernetes.kubeconfig: {kubeconfig} does not exist")
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
                "(KUBERNETES_SERVICE_HOST is unset). Set target.kubernetes.kubeconfig or "
                "KUBECONFIG, or run autotune in the cluster with a service account "
                "(see deploy/).")
    except config.ConfigException as e:
        if not existing:
            raise PrerequisiteError(f"cannot use the in-cluster service account: {e}") from e
        where = f" (context {context!r})" if context else ""
        raise PrerequisiteError(f"cannot use the kubeconfig {', '.join(map(str, existing))}"
                                f"{where}: {e}") from e
    # Our own loop retries (with the clock, bounded); urllib3 must not retry underneath it.
    cfg.retries = False
    return cfg


def connect(clock: Clock, *, context: str | None = None, kubeconfig: str | None = None) -> Kube:
    return Kube(client.ApiClient(configuration(context=context, kubeconfig=kubeconfig)), clock)
