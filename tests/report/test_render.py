"""The written report: files, self-contained HTML, plots of a real simulated study."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from autotune.report import Report, build_report, document, markdown, write_report
from autotune.study.confirmation.run import confirm
from tests.report.builder import Builder
from tests.report.simstudy import run_sim

PNG = b"\x89PNG\r\n\x1a\n"
MIN_PNG_BYTES = 5_000


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG), path
    assert len(data) > MIN_PNG_BYTES, f"{path.name}: only {len(data)} bytes"


def test_writes_markdown_html_json_and_every_plot(written: tuple[Path, list[Path]]) -> None:
    out, paths = written
    names = [p.name for p in paths]
    assert names[:3] == ["report.md", "report.html", "report.json"]
    assert sorted(names[3:]) == sorted(f"{k}.png" for k in (
        "history", "slice", "contour", "importance", "candidates", "diagnostics"))
    for p in paths[3:]:
        _assert_png(p)
    assert json.loads((out / "report.json").read_text())["verdict"] == "adopt"
    assert not list(out.glob("*.tmp"))


def test_html_is_self_contained(written: tuple[Path, list[Path]]) -> None:
    html = (written[0] / "report.html").read_text()
    assert "http://" not in html and "https://" not in html
    refs = re.findall(r"""\b(?:src|href)\s*=\s*["']?([^"'\s>]+)""", html)
    # The only links are to the page's own sections (the line of links under the verdict).
    sections = [r for r in refs if r.startswith("#")]
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert sections and all(r[1:] in ids for r in sections), (sections, ids)
    figures = [r for r in refs if not r.startswith("#")]
    assert all(r.startswith("data:image/png;base64,") for r in figures), figures
    assert len(figures) == 6, "the figures are missing"
    assert not re.search(r"<link|<script|@import|url\(", html, re.IGNORECASE)


def test_markdown_states_verdict_environment_failures_and_unavailable(
    written: tuple[Path, list[Path]], golden: tuple[Builder, Report]
) -> None:
    md = (written[0] / "report.md").read_text()
    assert "## Verdict: ADOPT: #1 (GOMAXPROCS=2 GOGC=400)" in md
    assert ("Runner-up: #1 and the runner-up #6 are not told apart by these runs: #1 is between "
            "9.7% worse and 25.0% better") in md
    assert "98.33% CI +70.4% .. +90.2%" in md  # each of 3 candidates at 1 - 5% / 3
    for fact in ("Go version of the service: go1.25.4",
                 "CPU limit: 1 (limits.cpu of the container)",
                 "GOMAXPROCS when unset (the baseline): GOMAXPROCS unset: Go >= 1.25",
                 "stress: 2 CPU worker(s) at 40% load", "sampler: tpe", "autotune version: ",
                 "report generated: 2026-12-01T12:00:00+00:00"):
        assert fact in md, fact
    assert "inject: no pod matched the selector" in md
    assert r"unavailable in 1 run(s): no series for rate(a\[1m\])" in md  # escaped
    # The configuration table: one row per configuration with the GC pause and p99 columns.
    header = next(line for line in md.splitlines() if line.startswith("| configuration | "
                                                                       "settings | runs | p99"))
    assert "gc_pause_p99" in header
    for figure in ("history.png", "slice.png", "contour.png", "importance.png", "candidates.png",
                   "diagnostics.png"):
        assert f"]({figure})" in md


def test_a_real_three_trial_study_renders_every_plot(tmp_path: Path) -> None:
    sim = run_sim(tmp_path / "study", trials=3)
    confirm(sim.exp, sim.studies, sim.runner, top=2, repeats=2, seed=3)
    report = build_report(sim.exp, sim.studies)
    assert report.evidence == "confirmation"
    env = report.environment
    assert (env.cpu_limit, env.go_version) == ("none (simulated target)", "not recorded")
    assert env.target["kind"] == "simulated"
    out = tmp_path / "out"
    paths = write_report(report, out, sim.studies)
    pngs = {p.name for p in paths if p.suffix == ".png"}
    assert pngs == {"history.png", "slice.png", "contour.png", "candidates.png", "diagnostics.png"}
    for name in pngs:
        _assert_png(out / name)
    # Too few trials for importance: said, not drawn.
    assert report.importance is None and "at least 5" in report.importance_note
    md = (out / "report.md").read_text()
    assert "Parameter importance: not computed: needs at least 5" in md
    # A declared diagnostic the world cannot answer is "unavailable" with the recorded reason.
    assert "unavailable: no series for 'go_gc_pause_p99'" in md
    # Without the study the contour is a heat map drawn from the report; the stale contour goes.
    paths = write_report(report, out)
    assert {p.name for p in paths if p.suffix == ".png"} == pngs - {"contour.png"} | {
        "heatmap.png"}
    assert not (out / "contour.png").exists()
    _assert_png(out / "heatmap.png")


def test_a_capture_of_what_is_no_longer_recommended_says_so(
        golden: tuple[Builder, Report]) -> None:
    # Review finding: the captures keep the name given when the run ended; re-reported after
    # the verdict changed, "recommended" stood next to another recommendation (or none).
    report = golden[1]
    assert report.recommendation is not None
    now = report.configuration(report.recommendation)
    assert now is not None
    files = [{"kind": "trace", "seconds": 5.0, "bytes": 10, "open_with": "go tool trace x"}]
    captured = ({"name": "baseline", "settings": {"GOMAXPROCS": None}, "files": files},
                {"name": "recommended", "settings": {"GOMAXPROCS": 8, "GOGC": 25},
                 "files": files})
    stale = markdown.render(document.build(dataclasses.replace(report, captures=captured), {}))
    assert "- recommended when captured, not now (GOMAXPROCS=8 GOGC=25), trace" in stale
    current = (captured[0], {**captured[1], "settings": dict(now.settings)})
    fresh = markdown.render(document.build(dataclasses.replace(report, captures=current), {}))
    assert "- recommended (GOMAXPROCS=2 GOGC=400), trace" in fresh
