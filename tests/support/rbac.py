"""RBAC in the tests of the Kubernetes stack: autotune uses exactly what it is granted."""

from __future__ import annotations

from collections.abc import Iterable

from autotune.platforms.kubernetes.permissions import Permission


def assert_used_exactly_granted(used: set[tuple[str, str]],
                                granted: Iterable[Permission]) -> None:
    """``used`` (each request's (verb, resource), as RBAC names them) is exactly ``granted``:
    no request the Role and ClusterRole do not allow, no permission asked for and unused."""
    wanted = {(p.verb, p.kind.plural) for p in granted}
    # Every wait lists, then watches only if the list did not already show what it waits for:
    # on a slow host the pods may be ready by the first list (seen once with the CPUs busy).
    # A granted watch is then unused in this run, not unneeded; its list must have been used.
    unwatched = {("watch", resource) for verb, resource in wanted - used
                 if verb == "watch" and ("list", resource) in used}
    assert used | unwatched == wanted, (f"used, not granted: {sorted(used - wanted)}; "
                                        f"granted, unused: {sorted(wanted - used - unwatched)}")
