"""The platforms a study runs on, side by side and independent of each other:

- ``local``: the service as a process on this machine, stress-ng in its cgroup, a private
  Prometheus;
- ``kubernetes``: a Deployment's container, Chaos Mesh StressChaos, the cluster's Prometheus;
- ``simulated``: a modelled service, for trying autotune without any tool;
- ``replay``: a recorded grid of measurements, played back.

Each builds the study's backends (``autotune.study.trial.Backends``) from the Protocols in
``autotune.targets``, ``autotune.chaos`` and ``autotune.metrics``; ``autotune.backends`` picks
one. They import the layers below them (study, report, metrics...), never each other.
"""
