"""The Kubernetes error vocabulary: what went wrong, typed, instead of HTTP status checks.

Every failed request becomes one ``ApiError`` subclass (``NotFound``, ``Conflict``, ``Gone``,
``Forbidden``, ...). They are user/environment errors, never bugs: exit code 1, like every
``AutotuneError``. ``reraise_as`` turns them into the caller's family (``TargetError``,
``ChaosError``), which exits 1 as well; ``TargetProblem`` and ``ChaosProblem`` are the families'
members for what this package itself finds wrong with the cluster (a missing Deployment, a
missing CRD, a paused rollout).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from autotune.errors import AutotuneError, ChaosError, TargetError


class ApiError(AutotuneError):
    """A request to the API server failed; ``status`` is the HTTP status (None: unreachable)."""

    status: int | None = None

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None or type(self).status is None:
            self.status = status


class BadRequest(ApiError):
    """400 or 422: the server (or a CRD schema, or Strict field validation) refused the body."""


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    """403: RBAC, or an admission webhook, refused the request."""

    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    """409: the object already exists, or was modified meanwhile."""

    status = 409


class Gone(ApiError):
    """410: a watch's resourceVersion is older than the server's history: list again."""

    status = 410


class ServerError(ApiError):
    """429 or 5xx after our retries (or inside a watch stream)."""

    transient = True  # a control plane upgraded at night answers 503 for minutes


class Unreachable(ApiError):
    """No HTTP answer at all (connection refused, DNS, TLS, timeout) after our retries."""

    transient = True


_BY_STATUS: dict[int, type[ApiError]] = {400: BadRequest, 422: BadRequest, 401: Unauthorized,
                                         403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone}


def api_error(message: str, status: int | None) -> ApiError:
    """The typed error for an HTTP status."""
    if status is None:
        return Unreachable(message, None)
    cls = _BY_STATUS.get(status, ServerError)
    return cls(message, status)


class TargetProblem(TargetError):
    """The Deployment cannot be used as configured (not found, paused, no container...)."""


class ChaosProblem(ChaosError):
    """Chaos Mesh cannot be used here (CRD missing, access denied, webhook denial...)."""


@contextmanager
def reraise_as(family: type[AutotuneError]) -> Iterator[None]:
    """Report API failures as the caller's error family (TargetError, ChaosError, ...), keeping
    their cause. The exit code needs no carrying over: every family exits 1 (the environment,
    not a bug) by its type."""
    try:
        yield
    except ApiError as e:
        if isinstance(e, family):
            raise
        raise family(str(e)) from e
