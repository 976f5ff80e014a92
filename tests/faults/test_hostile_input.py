"""Hostile experiment files: label values that try to break out of PromQL, names that are paths,
a huge file, YAML alias bombs. Each is escaped correctly or refused at validation, naming the
field, quickly and in little memory.

``autotune validate`` runs in-process where nothing can hang, and in a child process with a time
and memory limit where a regression could (a huge file, a bomb), so that the suite survives it.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.cli import main
from autotune.experiment import load_experiment
from autotune.live import Matcher
from autotune.metrics import promql
from autotune.platforms.kubernetes.envpatch import any_of as pods_regex
from tests.faults.prom_proxy import Exporter, PrometheusProcess

pytestmark = pytest.mark.faults

AUTOTUNE = str(Path(sys.executable).with_name("autotune"))


def _simulated(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "hostile",
        "target": {"simulated": {"optimum": {"GOMAXPROCS": 2}, "unset": {"GOMAXPROCS": 4}}},
        "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 8}],
        "baseline": {"repeats": 1, "params": {"GOMAXPROCS": None}},
        "chaos": {"stress": {"workers": 1, "load": 10}},
        "measure": {"warmup": "10ms", "window": "50ms"},
        "metrics": {"p99": "surface"},
        "objective": {"minimize": "p99"},
        "study": {"trials": 1, "sampler": "random", "seed": 1,
                  "design": {"prior": False, "points": 0}},
    }
    doc.update(changes)
    return doc


def _kubernetes(namespace: str, **prometheus: Any) -> dict[str, Any]:
    return _simulated(
        target={"kubernetes": {"namespace": namespace, "deployment": "api", "container": "api"}},
        prometheus={"url": "http://127.0.0.1:9", **prometheus},
        measure={"warmup": "1s", "window": "10s", "load": {"metric": "rate"}},
        metrics={"p99": "hostile_info{ {{selector}} }",
                 "rate": "sum(rate(http_requests_total{ {{selector}} }[{{window}}]))"},
    )


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return path


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    return code, out.out + out.err


# --- label values that reach a PromQL selector ---------------------------------------------------

# The namespace of a Kubernetes target is the one label value a user writes that reaches a
# selector verbatim ({{selector}} = namespace="...",pod=~"..."); pod names come from the API server
# (a hostile or broken one could send these too) and become an escaped regex.
HOSTILE = {
    "breakout": 'shop"} or vector(1) or up{job="',
    "quote": 'a"b',
    "backslash": "a\\b",
    "trailing-backslash": "back\\",
    "escaped-quote": 'a\\"b',
    "newline": "line\nbreak",
    "cr-tab": "cr\rtab\t",
    "braces": "{brace}",
    "close-brace": "}",
    "placeholder": "{{window}}",
    "backtick": "`raw`",
    "unicode": "ünïcødé ✓",
    "nul": "nul\x00byte",
    "line-separator": "\u2028sep",
    "regex": "a.b*c+(d)|[e]^$?",
}


@pytest.fixture(scope="module")
def prom_hostile_series(prom_server: PrometheusProcess,
                        prom_hostile_exporter: Exporter) -> Iterator[PrometheusProcess]:
    """Prometheus, once it holds one ``hostile_info`` series per hostile value."""
    prom_hostile_exporter.label_values = list(HOSTILE.values())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        result = prom_server.query('count(hostile_info{job="hostile"})')
        if result and int(result[0]["value"][1]) == len(HOSTILE):
            break
        time.sleep(0.05)
    else:
        up = prom_server.query('up{job="hostile"}')
        raise RuntimeError(f"the hostile series were not scraped: {up}")
    yield prom_server
    prom_hostile_exporter.label_values = []


@pytest.mark.integration
@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_namespace_is_escaped_or_refused(
        value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        prom_hostile_series: PrometheusProcess) -> None:
    path = _write(tmp_path / "exp.yaml", _kubernetes(value))
    code, out = _validate(path, capsys)
    if code != 0:
        assert code == 1 and "target.kubernetes.namespace" in out, out
        return
    exp, _ = load_experiment(path)
    assert exp.target.kubernetes is not None and exp.target.kubernetes.namespace == value
    # The candidate's scope as KubernetesTarget.apply builds it, rendered as a trial renders it.
    scope = (Matcher("namespace", exp.target.kubernetes.namespace),
             Matcher("pod", pods_regex([value, "api-5d9c7-x2x4q"]), regex=True))
    query = promql.render(exp.metric("p99").query,
                          {"selector": promql.render_selector(scope), "window": "1s"})
    # Parsed by the real Prometheus (a parse error is a 400) and selects exactly that series.
    result = prom_hostile_series.query(query)
    assert [(r["metric"]["namespace"], r["metric"]["pod"]) for r in result] == [(value, value)]


@pytest.mark.integration
@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
def test_promql_any_of_matches_exactly_the_values(
        value: str, prom_hostile_series: PrometheusProcess) -> None:
    scope = (Matcher("pod", promql.any_of([value, "other"]), regex=True),)
    result = prom_hostile_series.query(f"hostile_info{{{promql.render_selector(scope)}}}")
    assert [r["metric"]["pod"] for r in result] == [value]


@pytest.mark.parametrize("name, value", [
    ("X-Scope-OrgID", "tenant\r\nX-Injected: 1"),
    ("X-Scope-OrgID", "tenant\n"),
    ("Bad Header:", "x"),
])
def test_a_header_that_cannot_be_sent_is_refused_at_validation(
        name: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "exp.yaml", _kubernetes("shop", headers={name: value}))
    code, out = _validate(path, capsys)
    assert code == 1 and "prometheus.headers" in out, out


# --- names that are paths ------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "../x", "a/b", "/etc/cron.d/x", "..", ".", "a\\b", "x/../../y", "~/x", "a\x00b",
    "results/../../x", "-rf", "A",
])
def test_a_name_that_could_leave_results_is_refused_and_nothing_is_written(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path / "in" / "exp.yaml", _simulated(name=name))
    code, out = _validate(path, capsys)
    assert code == 1 and re.search(r"^\s*name: ", out, re.MULTILINE), out
    assert main(["run", str(path), "--plain", "--no-confirm"]) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["in"], "a refused run wrote nothing"


@pytest.mark.parametrize("name", ["a..", "a.-_", "0", "x" * 63])
def test_an_accepted_name_writes_only_under_results(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path / "exp.yaml", _simulated(name=name))
    assert main(["run", str(path), "--plain", "--no-confirm"]) == 0
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != path]
    assert written
    own = (tmp_path / "results" / name).resolve()
    assert all(p.resolve().is_relative_to(own) for p in written), written


# --- absurd numbers (issue 16) -------------------------------------------------------------------

_STUDY = _simulated()["study"]
_BURSTS = {"stress": {"workers": 1, "load": 10}, "pattern": {"every": "2ms", "burst": "1ms"}}

ABSURD: dict[str, tuple[dict[str, Any], list[str]]] = {
    # Each ran before: every trial failed in its sleep, or the run died with exit 3.
    "nan-window": ({"measure": {"warmup": "10ms", "window": float("nan")}},
                   ["measure.window: must be a finite number"]),
    "inf-heartbeat": ({"study": {**_STUDY, "heartbeat": float("inf")}},
                      ["study.heartbeat: must be a finite number"]),
    "nan-deadline": ({"study": {**_STUDY, "deadline": float("nan")}},
                     ["study.deadline: must be a finite number"]),
    "infinite-range": ({"parameters": [{"name": "ratio", "env": "RATIO", "type": "float",
                                        "low": float("-inf"), "high": float("inf")}],
                        "target": {"simulated": {"optimum": {"ratio": 1.0}}},
                        "baseline": {"repeats": 1, "params": {"ratio": None}}},
                       ["parameters[0].low: must be a finite number",
                        "parameters[0].high: must be a finite number"]),
    "gomaxprocs-unset": ({"parameters": [{"name": "GOMAXPROCS", "type": "int", "low": -4,
                                          "high": 100000}]},
                         ["parameters[0].low: -4 is not a value Go takes for GOMAXPROCS",
                          "parameters[0].high: 100000 is not a value Go takes for GOMAXPROCS"]),
    "millisecond-bursts": ({"chaos": _BURSTS}, ["chaos.pattern.burst: 1ms is shorter than 1s",
                                                "chaos.pattern.every: must be at least 1s"]),
    "schedtrace-flood": ({"measure": {"warmup": "10ms", "window": "50ms", "schedtrace": 0.0001}},
                         ["measure.schedtrace: 0.1ms is outside 100ms..500ms"]),
}


@pytest.mark.parametrize("case", list(ABSURD))
def test_an_absurd_number_is_refused_before_anything_runs(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    changes, expected = ABSURD[case]
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path / "in" / "exp.yaml", _simulated(**changes))
    code, out = _validate(path, capsys)
    assert code == 1 and "Traceback" not in out, out
    for text in expected:
        assert re.search(rf"^\s*{re.escape(text)}", out, re.MULTILINE), (text, out)
    assert main(["run", str(path), "--plain", "--no-confirm"]) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["in"], "a refused run wrote nothing"


# --- files built to exhaust the parser ------------------------------------------------------------

MEMORY_LIMIT = 2 << 30
"""Address space of the child that validates a hostile file: a regression fails, not the host."""


@dataclass
class Outcome:
    code: int
    output: str
    seconds: float
    max_rss_mb: float


def _validate_bounded(path: Path | str, timeout: float = 30.0) -> Outcome:
    """``autotune validate`` in a child with a memory limit, killed after ``timeout``; its own
    peak memory from ``wait4`` (not the maximum over every child this test process had)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    with tempfile.TemporaryFile() as out:
        t0 = time.monotonic()
        child = subprocess.Popen([AUTOTUNE, "validate", str(path)], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 preexec_fn=limit)
        killer = threading.Timer(timeout, child.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            killer.cancel()
        seconds = time.monotonic() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        output = out.read().decode(errors="replace")
    return Outcome(child.returncode, output, seconds, usage.ru_maxrss / 1024)


def _laughs(levels: int = 9) -> list[str]:
    """The "billion laughs": each anchor a list of nine aliases of the previous one."""
    lines = ["lol:", '  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return lines


def _mapping_laughs(levels: int = 8) -> list[str]:
    """The same with mappings: each anchor maps nine keys to the previous one."""
    lines = ["lol:", "  q0: &q0 {a: x, b: x, c: x, d: x, e: x, f: x, g: x, h: x, i: x}"]
    for i in range(1, levels + 1):
        keys = ", ".join(f"k{j}: *q{i - 1}" for j in range(9))
        lines.append(f"  q{i}: &q{i} {{{keys}}}")
    return lines


def _with_yaml(tmp: Path, head: list[str], **fields: str) -> Path:
    """A valid experiment after the ``head`` lines, with some top-level fields as raw YAML."""
    doc = _simulated()
    for field in fields:
        doc.pop(field, None)
    lines = [*head, yaml.safe_dump(doc), *(f"{field}: {raw}" for field, raw in fields.items())]
    path = tmp / "exp.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


BOMBS = {
    # Everything downstream walks the expanded values; an error message repr()s them.
    "laughs-in-a-string": (_laughs(), {"description": "*a9"}, r"lol\.a\d: expands to more than"),
    "laughs-as-values": (_laughs(), {"parameters": "[{name: G, type: int, values: *a9}]"},
                         r"lol\.a\d: expands to more than"),
    "laughs-as-metrics": (_mapping_laughs(), {"metrics": "*q8"},
                          r"lol\.q\d: expands to more than"),
    "recursive-alias": ([], {"description": "&r [*r]"}, r"description\[0\]: a YAML alias"),
    "deeply-nested": ([], {"description": "[" * 5000 + "]" * 5000}, r"nested too deeply"),
}


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_a_yaml_bomb_is_refused_quickly_in_little_memory(bomb: str, tmp_path: Path) -> None:
    head, fields, message = BOMBS[bomb]
    outcome = _validate_bounded(_with_yaml(tmp_path, head, **fields))
    assert outcome.code == 1, outcome
    assert re.search(message, outcome.output), outcome.output
    assert "internal error" not in outcome.output
    assert outcome.seconds < 10 and outcome.max_rss_mb < 300, outcome


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("w") as f:
        f.write(yaml.safe_dump(_simulated()))
        padding = "# " + "x" * 1021 + "\n"  # 1 KiB of comment, 50 MiB in all: valid YAML
        f.writelines(padding for _ in range(50 * 1024))
    outcome = _validate_bounded(path)
    assert outcome.code == 1, outcome
    assert re.search(r"too large .*52\.\d MB", outcome.output), outcome.output
    assert outcome.seconds < 5 and outcome.max_rss_mb < 300, outcome


def test_an_endless_file_is_refused(tmp_path: Path) -> None:
    outcome = _validate_bounded("/dev/zero")
    assert outcome.code == 1 and "too large" in outcome.output, outcome
    assert outcome.seconds < 5 and outcome.max_rss_mb < 300, outcome
