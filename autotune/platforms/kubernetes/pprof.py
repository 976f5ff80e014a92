"""A pod's net/http/pprof through the API server's pod proxy (``measure.capture`` on a cluster).

``GET /api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy/debug/pprof/trace?seconds=5``: the API
server dials the pod's IP and streams the answer back with its status (kubernetes
``pkg/registry/core/pod/rest/subresources.go`` ProxyREST, ``pkg/registry/core/pod/strategy.go``
ResourceLocation). It needs ``get pods/proxy`` (deploy/rbac-capture.yaml) and nothing on the
service but the pprof handlers on that port: no Service, no port-forward.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from autotune.deadline import chunks
from autotune.errors import MetricsError
from autotune.insight.capture import CHUNK, Answer
from autotune.platforms.kubernetes.client import CONNECT_TIMEOUT, Kube, proxy_path
from autotune.platforms.kubernetes.errors import ApiError, Forbidden, NotFound

# What a 502/503/504 from the pod proxy means: the API server itself could not reach the pod.
_UNREACHABLE = (
    ". The API server could not reach the pod's port: nothing listens there "
    "(target.kubernetes.pprof_port), a NetworkPolicy denies ingress from the control plane "
    "(a default-deny policy: allow the port from the API server's address), or a private "
    "control plane has no route to pods on that port (e.g. a GKE private cluster needs a "
    "firewall rule from the control plane's range)")


@dataclass(frozen=True)
class PodProxy:
    kube: Kube
    namespace: str
    pod: str
    port: int

    def where(self, path: str) -> str:
        route, sep, query = path.partition("?")
        return f"{self.kube.host}{proxy_path(self.namespace, self.pod, self.port, route)}" \
               f"{sep}{query}"

    @contextlib.contextmanager
    def get(self, path: str, timeout: float) -> Iterator[Answer]:
        deadline = time.monotonic() + CONNECT_TIMEOUT + timeout
        try:
            response = self.kube.proxy_get(self.namespace, self.pod, self.port, path, timeout)
        except NotFound as e:  # the pod's own 404 comes back as the proxy's
            response, missing = None, str(e)
        except Forbidden as e:
            raise MetricsError(f"{self.where(path)}: {e} (apply deploy/rbac-capture.yaml)") \
                from None
        except ApiError as e:
            hint = _UNREACHABLE if e.status in (502, 503, 504) else ""
            raise MetricsError(f"{self.where(path)}: {e}{hint}") from None
        if response is None:
            yield Answer(404, missing, iter(()))
            return
        try:
            yield Answer(int(response.status), str(response.reason or ""),
                         chunks(response, deadline, CHUNK))
        finally:
            # Closed, not only released: a capture cut at its deadline or its size cap leaves
            # the rest of the answer on the connection, which must not go back to the pool.
            response.close()
            response.release_conn()
