"""report.json of a fixed study, compared with tests/report/golden/report.json.

Regenerate after an intended change: AUTOTUNE_REGEN_GOLDEN=1 pytest tests/report/test_golden.py
(and review the diff).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from autotune.report import Report
from autotune.report.serialize import as_data
from tests.report.builder import Builder

GOLDEN = Path(__file__).parent / "golden" / "report.json"

# Fields that depend on where and with which release the test runs.
VOLATILE = {("environment", "autotune_version"): "<version>",
            ("environment", "storage"): "<storage>"}


def normalized(report: Report) -> dict[str, Any]:
    data = as_data(report)
    for (section, key), placeholder in VOLATILE.items():
        data[section][key] = placeholder
    return data


def _diff(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Where two JSON values differ; floats within a relative 1e-9."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{path}.{k}: missing" for k in expected.keys() - actual.keys()]
        out += [f"{path}.{k}: unexpected" for k in actual.keys() - expected.keys()]
        for k in expected.keys() & actual.keys():
            out += _diff(expected[k], actual[k], f"{path}.{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items expected, {len(actual)} found"]
        return [d for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for d in _diff(e, a, f"{path}[{i}]")]
    if isinstance(expected, float) and isinstance(actual, int | float):
        return [] if actual == pytest.approx(expected, rel=1e-9) else [
            f"{path}: {expected!r} expected, {actual!r} found"]
    return [] if expected == actual else [f"{path}: {expected!r} expected, {actual!r} found"]


def test_report_json_matches_the_golden_file(golden: tuple[Builder, Report]) -> None:
    actual = json.loads(json.dumps(normalized(golden[1])))
    if os.environ.get("AUTOTUNE_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(actual, indent=2) + "\n")
    expected = json.loads(GOLDEN.read_text())
    problems = _diff(expected, actual)
    assert not problems, "report.json differs from the golden file:\n" + "\n".join(problems[:40])


def test_golden_study_verdict_and_evidence(golden: tuple[Builder, Report]) -> None:
    """The headline facts, stated once more so a regenerated golden file cannot hide them."""
    report = golden[1]
    assert report.verdict == "adopt" and report.recommendation == "#1"
    assert report.evidence == "confirmation"
    assert [c.id for c in report.candidates] == ["#1", "#6", "#3"]
    one = report.candidates[0]
    # #1 is judged on its three confirmation runs (its search trial, which got it chosen, is
    # shown apart); the baseline pools its three repeats and its three interleaved runs.
    assert [r.round for r in one.runs] == [1, 2, 3] and one.search_values == (0.0031,)
    assert report.baseline is not None
    assert [r.values[0] for r in report.baseline.runs] == [0.012, 0.032, 0.018,
                                                          0.015, 0.029, 0.011]
    assert one.comparisons[0].low is not None and one.comparisons[0].low > 0
    # Three candidates: each judged at 1 - 5% / 3 (Bonferroni), so the report's three chances
    # of a wrong "better" stay within 5%.
    assert round(one.comparisons[0].confidence, 4) == 0.9833
    assert "3 candidates, each judged at 98.33%" in report.method
    # A failed confirmation run is a failure, not evidence; its retry is.
    six = report.configuration("#6")
    assert six is not None and len(six.runs) == 3
    # #1 and #6 overlap: the report says so rather than pretending #1 is better.
    assert report.separation is not None and report.separation.startswith(
        "#1 and the runner-up #6 are not told apart by these runs: #1 is between 9.7% worse and "
        "25.0% better")
    assert {f.number: f.reason for f in report.failures} == {
        2: "inject: no pod matched the selector (Chaos Mesh Warning event Failed)",
        9: "recover: stress still present 60s after delete",
    }
    three = report.configuration("#3")
    assert three is not None
    idle = next(m for m in three.metrics if m.name == "p_idle_fraction")
    assert idle.unavailable == 1 and "GC cycles < 2" in idle.reasons[0]  # a confirmation run
    env = report.environment
    assert (env.go_version, env.cpu_limit) == ("go1.25.4", "1 (limits.cpu of the container)")
    assert env.gomaxprocs_default.startswith("GOMAXPROCS unset: Go >= 1.25")
    assert env.stress == "2 CPU worker(s) at 40% load, bursts of 5s every 30s"
    assert env.generated == "2026-12-01T12:00:00+00:00"
    assert report.diagnostics == ("gc_pause_p99", "p_idle_fraction", "request_rate")
    assert len(report.trials) == 3 + 8 + 13
