"""Ctrl-C and SIGTERM become an exception, except while we are undoing something.

Undo steps (recover the stress, restore the target) run inside ``shielded()``: a signal that
arrives then is remembered and raised when the undo is complete, so an impatient second Ctrl-C
can never leave stress running or a target half-configured. ``shielded(deliver=False)`` keeps it
pending after the block instead, for ``deliver_pending()`` to raise where an interrupt loses
nothing (recording a finished trial must not turn it into a failed one).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Interrupted(KeyboardInterrupt):
    """Raised on SIGINT/SIGTERM. A KeyboardInterrupt so Optuna records the trial as FAIL."""

    def __init__(self, signame: str = "SIGINT") -> None:
        super().__init__(signame)
        self.signame = signame


_state = threading.local()


def _depth() -> int:
    return getattr(_state, "depth", 0)


def _handler(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _depth() > 0 or threading.current_thread() is not threading.main_thread():
        _state.pending = name
        return
    raise Interrupted(name)


@contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """Install the handlers for the duration of a run; restore the previous ones after."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    _state.pending = None  # not one held back from an earlier run in this process
    for s in previous:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def shielded(*, deliver: bool = True) -> Iterator[None]:
    """Defer SIGINT/SIGTERM until the block is done (only effective in the main thread).

    ``deliver=False``: a signal that arrived in the block stays pending after it, until
    ``deliver_pending()`` (or the end of the next delivering ``shielded()`` block) raises it.
    """
    _state.depth = _depth() + 1
    try:
        yield
    finally:
        _state.depth -= 1
        if deliver:
            deliver_pending()


def deliver_pending() -> None:
    """Raise the interrupt that arrived in a shielded block, if any (outside every block)."""
    pending = getattr(_state, "pending", None)
    if _depth() == 0 and pending:
        _state.pending = None
        raise Interrupted(pending)
