"""The one error hierarchy and the one table of exit codes. The CLI maps errors to exit codes;
trials record them as reasons."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from enum import IntEnum
from typing import ClassVar


class ExitCode(IntEnum):
    """What ``autotune`` exits with. The values are a contract (README, --help, alert rules);
    ``EXIT_CODE_MEANINGS`` says what each means."""

    OK = 0
    CONFIG = 1
    USAGE = 2
    INTERNAL = 3
    DRIFT = 4
    # SIGTERM too, not 128 + 15: the outcome is the same as for SIGINT (trial recorded as
    # interrupted, stress removed, target restored, resumable), and scripts and alert rules
    # have matched 130 for both since the first release.
    INTERRUPTED = 130


EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "ok",
    ExitCode.CONFIG: "invalid experiment, unusable study or environment (storage, results "
                     "directory, target, Chaos Mesh, Prometheus, RBAC, another run's Lease), or "
                     "stress or target not undone (named, with `autotune cleanup`); export: "
                     "nothing to export (the verdict is not ADOPT)",
    ExitCode.USAGE: "usage (bad command line)",
    ExitCode.INTERNAL: "internal error: a bug in autotune (the log has the trace)",
    ExitCode.DRIFT: "drift detected (run/nightly --fail-on-drift)",
    ExitCode.INTERRUPTED: "interrupted by SIGINT, SIGTERM or SIGHUP (the running trial is "
                          "recorded as FAIL and retried on resume; stress removed and target "
                          "restored first)",
}


def exit_codes_text(width: int = 95) -> str:
    """The table for --help: each code and its meaning, wrapped under the meaning."""
    return "\n".join(textwrap.fill(EXIT_CODE_MEANINGS[code], width,
                                   initial_indent=f"  {int(code):<4d}", subsequent_indent=" " * 6)
                     for code in ExitCode)


class AutotuneError(Exception):
    """Base of every error autotune raises on purpose. Its message is meant for the user.

    Raised on purpose means the user or the environment has to act (a file, a cluster, a
    Prometheus, a disk), never autotune's code: so every subclass exits ``CONFIG``, and
    ``INTERNAL`` stays for exceptions nobody raised on purpose. A class attribute, never set on
    an instance: an error's code follows from its type alone.
    """

    exit_code: ClassVar[ExitCode] = ExitCode.CONFIG
    transient: ClassVar[bool] = False
    """The same request may well succeed in a minute (an API server restarting, a 503): an undo
    step that failed so is tried again (``is_transient``)."""


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` or what caused it (``raise ... from``) is ``transient``."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        if isinstance(e, AutotuneError) and e.transient:
            return True
        seen.add(id(e))
        e = e.__cause__
    return False


class ExperimentError(AutotuneError):
    """The experiment file (or a command-line override of it) is invalid.

    Carries one line per problem, each naming the path of the field in the file.
    """

    def __init__(self, problems: list[str], source: str = "") -> None:
        self.problems = problems
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + "; ".join(problems))


class ExperimentUnreadable(ExperimentError):
    """The experiment file could not be read at all (missing, a directory, not allowed): not an
    invalid experiment, and said so."""


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

    def __init__(self, problems: Sequence[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class NotUndone(StudyError):
    """A stress that could not be removed or a target that could not be restored: someone must
    look (``autotune cleanup``)."""


class StorageError(StudyError):
    """The study's database failed under us (locked past the wait, disk full, server gone).

    Raised by ``autotune.study.storage`` in place of the driver's exception, with the database's
    own words: what completed before is in the database, so running the same command again once
    the cause is fixed resumes the study."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(f"the study storage failed: {why}; the trials completed so far are "
                         "kept: run the same command again once it is fixed")


class PrerequisiteError(AutotuneError):
    """Something the run needs is missing on this machine (a binary, cgroup access, a cluster)."""
