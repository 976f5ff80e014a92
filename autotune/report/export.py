"""The recommendation, ready to apply: a kustomize strategic-merge patch, an env file, JSON, or a
Helm values snippet.

Only a verdict of "adopt" is exported unless ``force``; the text then says it was forced (a YAML
or env comment, a JSON field) so a forced export cannot pass for a recommendation.

``write_to`` drops an adopted export into a directory a GitOps pipeline watches
(``<experiment>-patch.yaml``, ``<experiment>.env``, ``<experiment>.json``,
``<experiment>-values.yaml``). The file is replaced atomically, and only when what it would apply
changes (the variables, not the evidence in its comments), so the pipeline sees a change only
when there is something new to promote. It is written to a temporary file that is fsynced before
the rename, and the directory is fsynced after it: a crash leaves the old file or the new one,
whole. Only a file autotune wrote is replaced: one that starts with ``MARKER`` (a JSON export:
carries ``"written_by": MARKER``), or one written before the marker existed (the export's own
header for this experiment). Someone who edits the file and wants to keep it removes that line;
``overwrite`` (``export --write-to --overwrite``) replaces it anyway.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from autotune import files
from autotune.errors import AutotuneError
from autotune.evidence import significance as sig
from autotune.report.model import Configuration, Report

FORMATS = ("kustomize", "env", "json", "helm-values")

EXIT_OK, EXIT_NOT_ADOPTED = 0, 1


def export(report: Report, fmt: str, *, force: bool = False) -> tuple[str, int]:
    """Return (text, exit code). With 0 the text is the export (stdout); with 1 it is the reason
    nothing was exported (stderr): the verdict is not "adopt" and ``force`` is False, there is
    no candidate at all, or the format does not fit the target."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; one of {', '.join(FORMATS)}")
    chosen = report.configuration(report.best_candidate)
    if report.verdict != "adopt" and not force:
        hint = (f"; use --force to export the best candidate ({chosen.id}) anyway"
                if chosen is not None else "")
        return (f"nothing exported: the verdict is {report.verdict!r}: {report.reason}{hint}",
                EXIT_NOT_ADOPTED)
    if chosen is None:
        return f"nothing exported: there is no candidate configuration ({report.reason})", \
            EXIT_NOT_ADOPTED
    if fmt == "kustomize" and report.deployment is None:
        return ("nothing exported: the kustomize format patches a Deployment and needs a "
                "kubernetes target; use --format env, json or helm-values"), EXIT_NOT_ADOPTED
    return RENDERERS[fmt](report, chosen), EXIT_OK


def _header(report: Report, chosen: Configuration) -> list[str]:
    lines = [f"autotune recommendation for {report.experiment} (study {report.study}): "
             f"{chosen.id}, verdict {report.verdict}"]
    if chosen.comparisons:
        lines.append(sig.describe(chosen.comparisons[0]))
    if report.verdict != "adopt":
        lines.append(f"FORCED: not a recommendation ({report.verdict}): {report.reason}")
    elif report.evidence == "search":
        # Review finding: an ADOPT on single search measurements (the 20% fallback margin, no
        # rank test) looked like a confirmed one in the exported file.
        lines.append("UNCONFIRMED: adopted on search measurements alone (the whole interval "
                     f"above {sig.FALLBACK_MARGIN:.0%}, no confirmation runs); `autotune "
                     "confirm` makes it firmer")
    return lines


def _comments(lines: list[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)


def _set(chosen: Configuration) -> list[tuple[str, str]]:
    return [(k, v) for k, v in chosen.env.items() if v is not None]


def _unset(chosen: Configuration) -> list[str]:
    return [k for k, v in chosen.env.items() if v is None]


def kustomize(report: Report, chosen: Configuration) -> str:
    """A strategic-merge patch of the container's env: entries are merged by ``name``; an
    ``{name, $patch: delete}`` entry removes a variable that must be left unset. ``valueFrom:
    null`` drops a reference production may set the variable with (``GOMAXPROCS`` from
    ``resourceFieldRef: limits.cpu``): merged into it, a bare value would leave an entry with
    both, which the API server refuses (review finding; the run's own patch does the same)."""
    d = report.deployment
    assert d is not None
    env: list[dict[str, str | None]] = [{"name": k, "value": v, "valueFrom": None}
                                        for k, v in _set(chosen)]
    env += [{"name": k, "$patch": "delete"} for k in _unset(chosen)]
    patch: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": d.name, "namespace": d.namespace},
        "spec": {"template": {"spec": {"containers": [{"name": d.container, "env": env}]}}},
    }
    return _comments(_header(report, chosen)) + yaml.safe_dump(patch, sort_keys=False)


def env_file(report: Report, chosen: Configuration) -> str:
    lines = [f"{k}={v}" for k, v in _set(chosen)]
    lines += [f"# {k} unset: remove it from the environment" for k in _unset(chosen)]
    return _comments(_header(report, chosen)) + "\n".join(lines) + "\n"


HELM_LISTS = ("Helm replaces a list, it does not merge it: given with -f over your values, "
              "this env: list REPLACES the chart's whole env (every other variable goes). "
              "Copy these entries into your values' env list instead.")
"""Review finding: the file looked like an overlay to layer with ``-f``."""


def helm_values(report: Report, chosen: Configuration) -> str:
    values = {"env": [{"name": k, "value": v} for k, v in _set(chosen)]}
    unset = [f"{k}: leave unset (remove it from the chart's env if it is there)"
             for k in _unset(chosen)]
    return (_comments([*_header(report, chosen), HELM_LISTS])
            + yaml.safe_dump(values, sort_keys=False) + _comments(unset))


def as_json(report: Report, chosen: Configuration) -> str:
    cmp = chosen.comparisons[0] if chosen.comparisons else None
    data = {
        "experiment": report.experiment,
        "study": report.study,
        "verdict": report.verdict,
        "forced": report.verdict != "adopt",
        "reason": report.reason,
        "configuration": chosen.id,
        "trial": chosen.trial,
        "settings": chosen.settings,
        "env": chosen.env,
        "unset": _unset(chosen),
        "improvement": None if cmp is None else {
            "metric": cmp.metric, "direction": cmp.direction, "median": cmp.improvement,
            "ci95": [cmp.low, cmp.high], "confidence": cmp.confidence,  # ci95's level
            "candidate_median": cmp.candidate_median,
            "baseline_median": cmp.baseline_median, "n_candidate": cmp.n_candidate,
            "n_baseline": cmp.n_baseline,
        },
        "evidence": report.evidence,
        "deployment": None if report.deployment is None else {
            "namespace": report.deployment.namespace, "name": report.deployment.name,
            "container": report.deployment.container},
    }
    return json.dumps(data, indent=2) + "\n"


FILENAMES = {"kustomize": "{name}-patch.yaml", "env": "{name}.env", "json": "{name}.json",
             "helm-values": "{name}-values.yaml"}


def filename(experiment: str, fmt: str) -> str:
    return FILENAMES[fmt].format(name=experiment)


def applied(text: str, fmt: str) -> Any:
    """What an export would apply, without the evidence around it (comments; the JSON's
    numbers): two nights that recommend the same thing give equal results."""
    if fmt == "json":
        data = json.loads(text)
        return {k: data.get(k) for k in ("env", "unset", "deployment", "forced")}
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


MARKER = "written by autotune export --write-to: replaced when the recommendation changes"
"""The first line of a file ``write_to`` writes (a comment; JSON: the ``written_by`` field)."""


class NotOurs(AutotuneError):
    """``write_to`` would replace a file autotune did not write (exit 1)."""


def _marked(text: str, fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"written_by": MARKER, **json.loads(text)}, indent=2) + "\n"
    return f"# {MARKER}; remove this line to keep your edits\n{text}"


def written_by_autotune(text: str, fmt: str, experiment: str) -> bool:
    """The file carries the marker, or is an export of ``experiment`` from before it."""
    if fmt == "json":
        try:
            data = json.loads(text)
        except ValueError:
            return False
        return isinstance(data, dict) and (
            data.get("written_by") == MARKER
            or (data.get("experiment") == experiment and "configuration" in data
                and "evidence" in data))
    first = text.split("\n", 1)[0]
    return (first.startswith(f"# {MARKER}")
            or first.startswith(f"# autotune recommendation for {experiment} (study "))


def write_to(directory: Path, experiment: str, fmt: str, text: str, *,
             overwrite: bool = False) -> tuple[Path, bool]:
    """Write an export into ``directory``; return the path and whether it was (re)written.
    ``NotOurs`` when the file there was not written by autotune, unless ``overwrite``."""
    if directory.exists() and not directory.is_dir():
        raise NotOurs(f"--write-to {directory} is a file, not a directory: nothing written")
    path = directory / filename(experiment, fmt)
    try:
        current: str | None = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        current = None  # no file there (nor a directory for it: mkdir below says so)
    except (OSError, ValueError):
        current = ""  # unreadable: nobody can tell whose it is
    if current is not None:
        with contextlib.suppress(ValueError):
            if applied(current, fmt) == applied(text, fmt):
                return path, False
        if not overwrite and not written_by_autotune(current, fmt, experiment):
            raise NotOurs(f"{path} was not written by autotune (its first line is not "
                          f"'# {MARKER}...'): not replaced. Remove it, or put that line back, "
                          "or run `autotune export --write-to ... --overwrite`")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # Durable, and never through a link planted in the shared directory (autotune.files).
        files.replace(path, _marked(text, fmt), durable=True)
    except OSError as e:  # a directory we may not write, a full disk: the user's to fix
        raise NotOurs(f"cannot write {path}: {e.strerror or e}; the file there is as it "
                      "was") from None
    return path, True


RENDERERS: dict[str, Callable[[Report, Configuration], str]] = {
    "kustomize": kustomize,
    "env": env_file,
    "json": as_json,
    "helm-values": helm_values,
}
