"""Jobs spread over worker processes that stop with the benchmark, however it stops.

A ``ProcessPoolExecutor``'s workers outlive a parent killed by SIGTERM: Python's default
action ends the parent without running the pool's shutdown, and the workers wait on a pipe
nobody writes. Found on 2026-12-05: two ``whole_run`` workers still alive 80 minutes after
their parent was stopped. Here SIGINT and SIGTERM raise in the parent
(``autotune.study.interrupts.signals_as_exceptions``) and the pool's ``terminate()`` stops
every worker by PID on every way out. (SIGKILL cannot be caught: nothing here survives it
but the workers, which exit when their next job cannot be read.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from multiprocessing import get_context
from typing import TypeVar

from autotune.study.interrupts import signals_as_exceptions

In = TypeVar("In")
Out = TypeVar("Out")


def map_jobs(job: Callable[[In], Out], work: Sequence[In], jobs: int,
             initializer: Callable[[], None] | None = None) -> list[Out]:
    """``[job(w) for w in work]`` in ``jobs`` spawned worker processes, in order. Spawn, not
    fork: torch in a forked child of a process that used threads can hang."""
    with signals_as_exceptions(), get_context("spawn").Pool(jobs, initializer=initializer) as pool:
        return pool.map(job, work, chunksize=1)
