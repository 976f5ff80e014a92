"""autotune: find Go runtime settings that hold up under CPU contention, with evidence.

The house, top down (each layer imports only those below it; pyproject.toml's import-linter
contracts enforce it): ``cli`` > ``commands`` > ``backends``, ``doctor`` > ``platforms`` >
``report``, ``advice`` > ``study`` > ``metrics``, ``targets``, ``chaos`` (the Protocols) >
``progress`` > ``experiment`` > ``insight``, ``evidence`` > ``runlock``, ``deadline``,
``readiness`` > ``errors``, ``clock``, ``live``, ``pids``, ``redaction``.
"""

__version__ = "0.1.0"
