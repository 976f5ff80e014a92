"""A runtime trace and a CPU profile of the baseline and the recommendation, under stress
(``measure.capture``), for ``go tool trace`` / ``go tool pprof``.

Each configuration is applied like a trial (the service must expose net/http/pprof: the local
target starts the demo with ``DEBUG_PPROF=1`` when captures are asked for; a Kubernetes target
reaches ``target.kubernetes.pprof_port`` of one pod through the API server's pod proxy), warmed
up, stressed
like a measurement window, and captured for at most one window (5 s by default: a trace of a
busy service grows by megabytes per second). The stress is always removed and the target
restored. What was captured is kept in the search study's user attr ``captures`` for the report.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import redaction
from autotune.chaos.base import Injector
from autotune.clock import Clock
from autotune.errors import AutotuneError, NotUndone, StressNotRecovered
from autotune.experiment.models import Experiment, Setting
from autotune.insight import capture as fetch
from autotune.live import Live
from autotune.study import storage as st
from autotune.study.interrupts import deliver_pending, shielded
from autotune.study.loop import finish_env
from autotune.study.space import to_env
from autotune.study.trial import DEAD_MAN_MARGIN, Backends
from autotune.targets.base import Env, PprofSource

log = logging.getLogger(__name__)

CAPTURES_ATTR = "captures"
SECONDS = 5.0


def _one(exp: Experiment, backends: Backends, clock: Clock, name: str,
         settings: Mapping[str, Setting], out_dir: Path, seconds: float) -> dict[str, Any]:
    target, injector = backends.target, backends.injector
    entry: dict[str, Any] = {"name": name, "settings": dict(settings)}
    try:
        live = target.apply(to_env(exp, dict(settings)))
        service = target.pprof(live) if isinstance(target, PprofSource) else (
            "this target cannot reach the service's net/http/pprof")
        if isinstance(service, str):
            raise AutotuneError(service)
        clock.sleep(exp.measure.warmup)
        entry["files"] = _stressed(exp, injector, live, service, name, out_dir, seconds)
    except StressNotRecovered as e:
        # Not a failed capture: a stress still running (on a cluster in the pods the baseline
        # capture stressed: production's own) ends the command as a trial's does (exit 1).
        raise NotUndone([f"stress not recovered after the capture of {name}: "
                         f"{redaction.scrub(str(e))}"]) from e
    except AutotuneError as e:
        entry["failure"] = redaction.scrub(str(e))  # recorded in the study, shown in reports
        log.warning("capture of %s failed: %s", name, entry["failure"])
    except Exception as e:  # a capture boundary, like a trial's: it fails, never the run
        entry["failure"] = redaction.scrub(f"{type(e).__name__}: {e}")
        log.exception("capture of %s failed unexpectedly", name)
    return entry


def _stressed(exp: Experiment, injector: Injector, live: Live, service: fetch.Transport,
              name: str, out_dir: Path, seconds: float) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/managed-by": "autotune", "autotune/study": exp.name,
              "autotune/trial": f"capture-{name}"}
    # Under the first scenario's stress (with several, the first that has one).
    stresses = exp.chaos.stresses
    injection = (injector.inject(live, stresses[0], seconds + DEAD_MAN_MARGIN, labels)
                 if stresses else None)
    try:
        got = fetch.capture(service, list(exp.measure.capture), seconds, out_dir, name)
    finally:
        if injection is not None:
            with shielded():
                injector.recover(injection)
    return [{"kind": c.kind, "path": str(c.path), "bytes": c.bytes, "open_with": c.open_with,
             "seconds": c.seconds} for c in got]


def _kept(exp: Experiment, studies: st.Studies) -> Env | None:
    """What the run left on the target (``on_finish: best``): the capture ends with it too, as
    the run's own end did, not with the original."""
    try:
        return finish_env(exp, studies.search)
    except Exception as e:  # the original is the safe side
        log.error("could not read the best trial (%s); restoring the original instead", e)
        return None


def capture_pair(exp: Experiment, studies: st.Studies, backends: Backends, clock: Clock,
                 recommended: Mapping[str, Setting] | None,
                 seconds: float | None = None) -> list[dict[str, Any]]:
    """Capture the baseline and ``recommended`` (when there is one); record and return what was
    written (per configuration: files, or the failure's reason)."""
    if not exp.measure.capture:
        return []
    seconds = min(seconds or SECONDS, exp.measure.window)
    out_dir = st.results_dir(exp) / "captures"
    pairs: Sequence[tuple[str, Mapping[str, Setting]]] = [("baseline", exp.baseline_settings())]
    if recommended is not None:
        pairs = [*pairs, ("recommended", recommended)]
    done = []
    try:
        for name, settings in pairs:
            # A signal held back while the last capture's stress was removed (which failed:
            # a failed capture) stops here, before the next candidate goes to production.
            deliver_pending()
            done.append(_one(exp, backends, clock, name, settings, out_dir, seconds))
    finally:
        with shielded():
            backends.target.restore(_kept(exp, studies))
    studies.search.set_user_attr(CAPTURES_ATTR, done)
    return done
