"""SIGINT/SIGTERM reach the command wherever they land: from the first line of main(), and
even when Python runs the handler where an exception cannot propagate."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from autotune.errors import ExitCode


def _python(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONUNBUFFERED": "1"})


# A signal in a command that changes nothing is still the command's: 130 and its own message.
SIGTERM_IN_STATUS = """
import os, signal, sys
from autotune import cli
from autotune.commands import status as command

def status(args):
    os.kill(os.getpid(), signal.SIGTERM)
    print("status went on after SIGTERM")
    return 0

command.main = status
sys.exit(cli.main(["status", "exp.yaml"]))
"""


def test_sigterm_is_handled_from_the_start_of_every_command(tmp_path: Path) -> None:
    """As PID 1 a process without a handler never even sees the signal: so the handlers are
    installed by main() for every command, not only around a run's trials."""
    done = _python(SIGTERM_IN_STATUS, tmp_path)
    assert done.returncode == ExitCode.INTERRUPTED, (done.returncode, done.stderr)
    assert done.returncode != -signal.SIGTERM
    assert "status went on" not in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "interrupted (SIGTERM)"


# The kill matrix's seed 4 (SIGTERM as stress-ng starts): subprocess.Popen with a preexec_fn runs
# the at-fork callbacks, logging's lock release among them; a handler that raises there is
# "ignored" by Python, and the run measured on as if no signal had come.
SIGTERM_IN_AN_AT_FORK_CALLBACK = """
import os, signal, sys, time
from autotune.study.interrupts import Interrupted, signals_as_exceptions

armed = []

def after_fork_in_parent():
    if armed:
        armed.clear()
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs here, inside the callback
            pass

os.register_at_fork(after_in_parent=after_fork_in_parent)
with signals_as_exceptions():
    try:
        armed.append(True)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        deadline = time.monotonic() + 10  # raised on the way: milliseconds
        while time.monotonic() < deadline:
            time.sleep(0.01)
        print("the signal was lost")
        sys.exit(1)
    except Interrupted as e:
        print("interrupted by", e.signame)
"""


def test_a_signal_handled_in_an_at_fork_callback_is_not_lost(tmp_path: Path) -> None:
    done = _python(SIGTERM_IN_AN_AT_FORK_CALLBACK, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "interrupted by SIGTERM"
    assert "Exception ignored" not in done.stderr, done.stderr
