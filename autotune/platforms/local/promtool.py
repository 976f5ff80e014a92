"""The experiment's PromQL checked by Prometheus's own parser: ``promtool check rules`` on a
rules file holding one query (the prometheus package the local stack installs ships promtool).

A query is parsed with its placeholders filled as a trial fills them (``{{selector}}`` and
``{{load_selector}}`` with a label matcher, ``{{window}}`` with a duration), so a missing ``)``
or a misspelt function is found by ``validate``, not by the first trial's failed read. Parsing
needs no server and no data: a query that parses may still find no series (``validate --live``
tries them on a cluster).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import yaml

from autotune import redaction
from autotune.experiment.models import Experiment
from autotune.metrics import promql
from autotune.platforms.local import proc

SAMPLE = {"selector": 'job="autotune-check"', "load_selector": 'job="autotune-check-load"',
          "window": "30s"}
"""What fills the placeholders for parsing (any valid matcher and duration parse alike)."""

_PROBLEM = re.compile(r'could not parse expression: (?:\d+:\d+: )?(?:parse error: )?(.*)$', re.M)


def check_queries(exp: Experiment) -> list[str] | str:
    """One problem per metric whose query Prometheus cannot parse (``metrics.<name>: ...``);
    a string when the check cannot be made (promtool missing), saying so."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return ("PromQL not checked: promtool not found (it comes with Prometheus: "
                "apt-get install prometheus)")
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="autotune-promql-") as tmp:
        for i, name in enumerate(exp.metrics):
            query = exp.metric(name).query
            if not query or exp.target.kind in ("simulated", "replay"):
                continue  # a schedtrace figure, or a simulated target's surface names
            problem = _parse(promtool, Path(tmp) / f"{i}.yml",
                             promql.render(query, SAMPLE))
            if problem is not None:
                problems.append(f"metrics.{name}: PromQL does not parse: {problem}")
    return problems


def _parse(promtool: str, path: Path, query: str) -> str | None:
    rules = {"groups": [{"name": "autotune", "rules": [{"record": "autotune:check",
                                                         "expr": query}]}]}
    path.write_text(yaml.safe_dump(rules))
    code, out = proc.run([promtool, "check", "rules", str(path)], env=redaction.tool_env(),
                         timeout=30)
    if code == 0:
        return None
    found = _PROBLEM.search(out)
    return found.group(1).strip() if found else out.strip().splitlines()[-1]
