"""Ctrl-C, SIGTERM and SIGHUP (unless ignored: ``nohup``) become an exception, except while we
are undoing something.

Undo steps (recover the stress, restore the target) run inside ``shielded()``: a signal that
arrives then is remembered and raised when the undo is complete, so an impatient second Ctrl-C
can never leave stress running or a target half-configured. ``shielded(deliver=False)`` keeps it
pending after the block instead, for ``deliver_pending()`` to raise where an interrupt loses
nothing (recording a finished trial must not turn it into a failed one). An undo step that
fails keeps its own error: the signal then stays pending (see ``shielded``).

The CLI installs the handlers for the whole of a command, before anything else: as PID 1 of a
PID namespace (a container) the process gets only the signals it handles, the others are
discarded by the kernel, not deferred (pid_namespaces(7)).
"""

from __future__ import annotations

import _thread
import errno
import logging
import os
import signal
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)


class Interrupted(KeyboardInterrupt):
    """Raised on SIGINT/SIGTERM/SIGHUP. A KeyboardInterrupt so Optuna records the trial as
    FAIL."""

    def __init__(self, signame: str = "SIGINT") -> None:
        super().__init__(signame)
        self.signame = signame


_state = threading.local()


def _depth() -> int:
    return getattr(_state, "depth", 0)


_signalled = threading.Event()
"""A SIGINT/SIGTERM reached this command, raised or held back (whatever became of it since: an
undo's error may have taken its place)."""


def _silence_hung_up_terminal() -> None:
    """Point stdout and stderr at /dev/null when their terminal has hung up.

    After a dropped SSH session every write to the terminal fails with EIO: the "interrupted"
    message, a log line or the live panel's last frame then raised out of the undo's end, and
    the run exited 1 (or 3) with the stress removed and the target restored (review finding).
    Nobody is there to read them; the exit code (130) is what a caller sees. Done on the file
    descriptors, so every writer (print, logging's handler, rich's console and its redirection
    of sys.stderr) is covered. The kernel marks the terminal hung up before it sends SIGHUP, and
    a hung-up terminal answers tcgetattr with EIO: a `kill -HUP` from a live terminal, a pipe or
    a file keeps its output."""
    for fd in (1, 2):
        try:
            termios.tcgetattr(fd)
        except termios.error as e:
            if e.args and e.args[0] == errno.EIO:
                null = os.open(os.devnull, os.O_WRONLY)
                try:
                    os.dup2(null, fd)
                finally:
                    os.close(null)
        except OSError:
            pass  # not open: nothing will be written there


def _handler(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    _signalled.set()
    if signum == signal.SIGHUP:
        _silence_hung_up_terminal()
    if _depth() > 0 or threading.current_thread() is not threading.main_thread():
        _state.pending = name
        return
    _state.pending = None  # raised now: not once more at the next delivery point
    raise Interrupted(name)


def _unraisable_hook(previous: Callable[[sys.UnraisableHookArgs], Any]
                     ) -> Callable[[sys.UnraisableHookArgs], None]:
    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        exc = unraisable.exc_value
        if not (isinstance(exc, Interrupted) and exc.signame in signal.Signals.__members__):
            previous(unraisable)
            return
        # Raised where Python can only report an exception, never propagate it: in an at-fork
        # callback while a child process starts (logging's lock release, when stress-ng starts
        # with a preexec_fn: seen in the kill matrix) or in a __del__. Lost, it would leave the
        # run going until the SIGKILL after the grace period. So it is pending (raised at the
        # next delivery point at the latest) and sent again, from another thread: sent from
        # here, the handler would run in this hook, where it is lost the same way. The main
        # thread then raises it in ordinary code (or, in a callback again, comes back here).
        _state.depth = _depth() + 1  # a handler run in this hook only marks it pending
        try:
            _state.pending = exc.signame
            _thread.start_new_thread(os.kill, (os.getpid(), signal.Signals[exc.signame]))
        finally:
            _state.depth -= 1

    return hook


@contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """Install the handlers for the duration of a command; restore the previous ones after."""
    # SIGHUP too (review finding: a dropped SSH session ended the run by the default action,
    # nothing undone), unless it is ignored (`nohup`): then the run goes on, as asked.
    hup = () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (signal.SIGHUP,)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, *hup)}
    previous_hook = sys.unraisablehook
    _state.pending = None  # not one held back from an earlier run in this process
    _signalled.clear()
    sys.unraisablehook = _unraisable_hook(previous_hook)
    for s in previous:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sys.unraisablehook = previous_hook
        # One still held back (an undo's own error outranked it) ends with the command: raised
        # later, it would interrupt whatever this process does next.
        _state.pending = None
        _signalled.clear()


@contextmanager
def shielded(*, deliver: bool = True) -> Iterator[None]:
    """Defer SIGINT/SIGTERM until the block is done (only effective in the main thread).

    ``deliver=False``: a signal that arrived in the block stays pending after it, until
    ``deliver_pending()`` (or the end of the next delivering ``shielded()`` block) raises it.

    When the block itself raises (an undo step that failed), its error goes on and the signal
    stays pending: what could not be undone outranks the interrupt, and in its place the run
    would say "stress removed and target restored" and exit 130 with the target not restored.
    Likewise a block run while an error is already on its way (an ``except``/``finally`` that
    cleans up and re-raises): that error goes on, not the signal in its place.
    """
    _state.depth = _depth() + 1
    try:
        yield
    except BaseException:
        _state.depth -= 1
        _said_pending()
        raise
    _state.depth -= 1
    if sys.exc_info()[1] is not None:
        _said_pending()
    elif deliver:
        deliver_pending()


def _said_pending() -> None:
    if getattr(_state, "pending", None) and _depth() == 0:
        log.warning("%s arrived while undoing; the error on its way is reported instead",
                    _state.pending)


def deliver_pending() -> None:
    """Raise the interrupt that arrived in a shielded block, if any (outside every block)."""
    pending = getattr(_state, "pending", None)
    if _depth() == 0 and pending:
        _state.pending = None
        raise Interrupted(pending)


def signalled() -> bool:
    """Whether a SIGINT/SIGTERM reached this command: its stop was asked for."""
    return _signalled.is_set()


def shielding() -> bool:
    """Whether this thread is inside a ``shielded()`` block (undoing something)."""
    return _depth() > 0


class StopRequest:
    """Tells the threads of a pool (``autotune.study.pool``) to stop: only the main thread gets
    signals. ``check()`` raises the signal's ``Interrupted`` once requested, except while the
    thread undoes something; ``clock(c)`` is ``c`` whose waits end early on a request."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signame = "SIGINT"

    def request(self, signame: str) -> None:
        self.signame = signame
        self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set() and not shielding():
            raise Interrupted(self.signame)

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` of real time; True when a stop was requested meanwhile."""
        return self._event.wait(seconds)
