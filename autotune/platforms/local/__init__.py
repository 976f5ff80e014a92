"""The local platform: everything that runs on this machine instead of a cluster.

``stack.build()`` wires it: the service (``service``) restarted per trial in a CPU-limited cgroup
(``cgroups``), CPU stress from stress-ng inside that cgroup (``stress_ng``), a private Prometheus
(``prometheus``), every child process tracked by PID (``proc``), the Go workloads built from
source (``gobuild``), and the prerequisite checks (``doctor``). Nothing outside this package
imports it except the backend registry, the CLI's ``doctor`` and the benchmarks.
"""
