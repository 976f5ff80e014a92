"""The Kubernetes platform: a Deployment's env as the target, Chaos Mesh StressChaos as the stress.

- ``client``: the only importer of the ``kubernetes`` package; one request path with timeouts,
  retries and typed errors (``errors``); watches that survive broken streams.
- ``objects``: kinds, selections, labels, ``PodPlacement`` (where a candidate runs).
- ``rollout``: pure, is a rollout complete (kubectl's and the controllers' rules).
- ``deployment``: the Target (apply / check / restore / cleanup of the env).
- ``stresschaos``: the Injector (render, validate against the CRD, inject, recover).
- ``permissions``: the RBAC table the code needs (deploy/rbac.yaml is tested against it).
- ``stack``: build the backends, validate a cluster, clean a namespace.
"""
