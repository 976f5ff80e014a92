"""How a command (or one step of ``nightly``) ends: its exit code, or an exception turned into
a message and the code the error's type carries (``autotune.errors``). Interrupts are not
caught here: they end the whole command (autotune/cli.py)."""

from __future__ import annotations

import logging
import sqlite3
import sys
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from autotune import redaction
from autotune.errors import AutotuneError, ExitCode, ExperimentError, ExperimentUnreadable

log = logging.getLogger("autotune")


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
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return e.exit_code
    except Exception as e:
        failure = storage_failure(e)
        if failure is not None:
            print(f"error: the study storage failed: {failure}; the trials completed so far are "
                  "kept: run the same command again once it is fixed", file=sys.stderr)
            return ExitCode.CONFIG
        log.exception("internal error (a bug in autotune; please report it with this trace)")
        return ExitCode.INTERNAL


def storage_failure(e: BaseException) -> str | None:
    """The database's own words if ``e`` came from the study storage (locked, disk full).

    Recognised here, at the edge, rather than wrapped where it happens: Optuna's RDB storage is
    called from everywhere in the study (every trial, every user attr) and talks to every
    database through SQLAlchemy, which wraps the driver's error (sqlite3, psycopg2) in one of
    its own; an exception of that family anywhere in the chain is the storage's."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, SQLAlchemyError | sqlite3.Error):
            return redaction.scrub(
                str(getattr(seen, "orig", None) or seen).strip().splitlines()[0])
        seen = seen.__cause__ or seen.__context__
    return None
