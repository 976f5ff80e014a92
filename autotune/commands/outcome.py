"""How a command (or one step of ``nightly``) ends: its exit code, or an exception turned into
a message and the code the error's type carries (``autotune.errors``). Interrupts are not
caught here: they end the whole command (autotune/cli.py)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from autotune import redaction
from autotune.errors import (
    AutotuneError,
    ExitCode,
    ExperimentError,
    ExperimentUnreadable,
    NotUndone,
)

log = logging.getLogger("autotune")

UNDO_ADVICE = ("what the error names is left as it is: once its cause is fixed, `autotune "
               "cleanup <experiment file>` removes the stress autotune started and puts back "
               "the env it saved (on a cluster once this run's Lease has expired: the longest "
               "trial plus a margin; this run is over, so `kubectl -n <namespace> delete "
               "lease autotune-<deployment>` lets the cleanup run at once)")


def guarded(step: Callable[[], int]) -> ExitCode:
    """``step()``'s exit code; an exception becomes a message on stderr and its exit code."""
    try:
        return ExitCode(step())
    except ExperimentUnreadable as e:
        print(f"{e.source}: {'; '.join(e.problems)}", file=sys.stderr)
        return e.exit_code
    except ExperimentError as e:
        where = f"{e.source}: " if e.source else ""
        print(f"{where}invalid experiment:", file=sys.stderr)
        for problem in e.problems:
            print(f"  {problem}", file=sys.stderr)
        return e.exit_code
    except AutotuneError as e:
        problems = getattr(e, "problems", None) or [str(e)]
        for problem in problems:  # a URL's credentials in a library's words: masked
            print(f"error: {redaction.scrub(str(problem))}", file=sys.stderr)
        if isinstance(e, NotUndone):  # what the operator paged at 3 a.m. does next
            print(UNDO_ADVICE, file=sys.stderr)
        return e.exit_code
    except Exception:
        log.exception("internal error (a bug in autotune; please report it with this trace)")
        return ExitCode.INTERNAL

