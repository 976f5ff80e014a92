"""Showing a run: a live panel on a terminal, one log line per event otherwise."""

from __future__ import annotations

import logging
import time
from typing import Any

from rich.console import Console
from rich.live import Live as RichLive
from rich.markup import escape
from rich.table import Table

from autotune.experiment.durations import format_duration
from autotune.experiment.models import Setting

log = logging.getLogger("autotune.run")


def _fmt_settings(settings: dict[str, Setting]) -> str:
    return " ".join(f"{k}={'unset' if v is None else v}" for k, v in settings.items())


def _fmt_values(values: Any) -> str:
    if not values:
        return "-"
    return ", ".join(f"{v:.4g}" for v in values)


class SilentProgress:
    """Shows nothing: for runs nobody watches (a benchmark's thousand replays, the tests)."""

    def study_started(self, info: dict[str, Any]) -> None:
        return None

    def trial_started(self, number: int, kind: str, settings: dict[str, Setting]) -> None:
        return None

    def phase(self, name: str) -> None:
        return None

    def trial_finished(self, record: dict[str, Any], best: dict[str, Any] | None) -> None:
        return None


class PlainProgress:
    """Log lines, for CI logs, cron jobs and pipes."""

    def __init__(self) -> None:
        self.budget = 0
        self.done = 0
        self.best: tuple[Any, Any] | None = None
        """The best search trial last logged: a confirmation run does not change it, and a log
        that repeated it after each one read as if it were news."""

    def study_started(self, info: dict[str, Any]) -> None:
        self.budget, self.done = info["budget"], info["completed"]
        log.info("study %s (%s): %d/%d search trials complete; target %s",
                 info["study"], info["storage"], self.done, self.budget,
                 info["target"].get("kind"))

    def trial_started(self, number: int, kind: str, settings: dict[str, Setting]) -> None:
        log.info("trial %d [%s] %s", number, kind, _fmt_settings(settings))

    def phase(self, name: str) -> None:
        log.debug("  phase %s", name)

    def trial_finished(self, record: dict[str, Any], best: dict[str, Any] | None) -> None:
        if record.get("state") == "COMPLETE":
            if record.get("kind") == "search":
                self.done += 1
            log.info("trial %s COMPLETE value=%s feasible=%s (%.1fs)", record.get("number"),
                     _fmt_values(record.get("values")), record.get("feasible"),
                     record.get("seconds", 0.0))
        elif record.get("state") == "SCREENED":
            self.done += 1
            log.info("trial %s SCREENED (%.1fs): %s", record.get("number"),
                     record.get("seconds", 0.0), record.get("screened"))
        else:
            log.warning("trial %s FAIL: %s", record.get("number"), record.get("failure"))
        if best and "values" in best and (best["number"], best["values"]) != self.best:
            self.best = best["number"], best["values"]
            log.info("best search trial so far: #%s value=%s %s", best["number"],
                     _fmt_values(best["values"]), _fmt_settings(best["settings"]))


class RichProgress:
    """A live panel: trial i/N, phase, elapsed/ETA, best so far, last failure."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.live = RichLive(console=self.console, refresh_per_second=2, transient=False)
        self.started = time.monotonic()
        self.budget = self.done = 0
        self.current = "-"
        self.phase_name = "-"
        self.best = "-"
        self.last_failure = "-"
        self.durations: list[float] = []
        self.study = ""

    def _render(self) -> Table:
        table = Table.grid(padding=(0, 2))
        elapsed = time.monotonic() - self.started
        left = self.budget - self.done
        eta = (format_duration(left * sum(self.durations) / len(self.durations))
               if self.durations and left > 0 else "-")
        table.add_row("study", self.study)
        table.add_row("trials", f"{self.done}/{self.budget} complete")
        table.add_row("current", self.current)
        table.add_row("phase", self.phase_name)
        table.add_row("elapsed / ETA", f"{format_duration(elapsed)} / {eta}")
        table.add_row("best so far", self.best)
        table.add_row("last failure", self.last_failure)
        return table

    def _refresh(self) -> None:
        self.live.update(self._render())

    def study_started(self, info: dict[str, Any]) -> None:
        self.study = escape(f"{info['study']} ({info['storage']})")
        self.budget, self.done = info["budget"], info["completed"]
        self.live.start()
        self._refresh()

    def trial_started(self, number: int, kind: str, settings: dict[str, Setting]) -> None:
        self.current = escape(f"#{number} [{kind}] {_fmt_settings(settings)}")
        self._refresh()

    def phase(self, name: str) -> None:
        self.phase_name = name
        self._refresh()

    def trial_finished(self, record: dict[str, Any], best: dict[str, Any] | None) -> None:
        if record.get("state") == "COMPLETE":
            self.durations.append(float(record.get("seconds", 0.0)))
            if record.get("kind") == "search":
                self.done += 1
        elif record.get("state") == "SCREENED":
            self.done += 1
        else:
            self.last_failure = escape(f"#{record.get('number')}: {record.get('failure')}")
        if best and "values" in best:
            self.best = escape(f"#{best['number']} {_fmt_values(best['values'])} "
                               f"{_fmt_settings(best['settings'])}")
        self.phase_name = "-"
        self._refresh()

    def stop(self) -> None:
        self.live.stop()
