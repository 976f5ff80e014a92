"""The one error hierarchy. The CLI maps these to exit codes; trials record them as reasons."""

from __future__ import annotations

from collections.abc import Sequence


class AutotuneError(Exception):
    """Base of every error autotune raises on purpose. Its message is meant for the user."""

    exit_code = 3


class ExperimentError(AutotuneError):
    """The experiment file (or a command-line override of it) is invalid.

    Carries one line per problem, each naming the path of the field in the file.
    """

    exit_code = 1

    def __init__(self, problems: list[str], source: str = "") -> None:
        self.problems = problems
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + "; ".join(problems))


class TargetError(AutotuneError):
    """The target could not be configured, did not become live, or changed under us."""


class ChaosError(AutotuneError):
    """Stress could not be injected, or could not be confirmed gone."""


class StressNotRecovered(ChaosError):
    """Stress could not be confirmed gone: it may still run where the next trial would measure.

    The study stops at the first one (never runs another trial on a possibly stressed target).
    ``objects``: what was injected (StressChaos names, stress-ng PIDs); ``pods``: where stress
    may still run (Kubernetes).
    """

    exit_code = 1

    def __init__(self, message: str, *, namespace: str = "", objects: Sequence[str] = (),
                 pods: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.objects = tuple(objects)
        self.pods = tuple(pods)


class MetricsError(AutotuneError):
    """A metric could not be read. Never replaced by a default value."""


class StudyError(AutotuneError):
    """The persisted study cannot be used as asked (changed space, direction, storage problem).

    Carries one line per problem; the message joins them (never a Python list's repr)."""

    exit_code = 1

    def __init__(self, problems: Sequence[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class PrerequisiteError(AutotuneError):
    """Something the run needs is missing on this machine (a binary, cgroup access, a cluster)."""

    exit_code = 1
