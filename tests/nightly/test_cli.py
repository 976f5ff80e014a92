"""The nightly surface of the CLI, as processes on the simulated world: `run --fail-on-drift`,
`history`, `export --write-to`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.nightly.conftest import cli, simulated_doc, write


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    write(tmp_path / "exp.yaml", simulated_doc())
    return tmp_path


def test_two_nights_drift_alert_history_and_promotion(workdir: Path) -> None:
    first = cli(workdir, "run", "exp.yaml", "--plain", "--fail-on-drift")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "verdict: ADOPT" in first.stdout
    assert "study nightly (new)" in first.stdout
    assert "drift: no drift check: no earlier night adopted a recommendation" in first.stdout

    promoted = cli(workdir, "export", "exp.yaml", "--format", "env", "--write-to", "promote")
    assert promoted.returncode == 0, promoted.stderr
    path = workdir / "promote" / "nightly.env"
    assert promoted.stdout.strip() == f"wrote {Path('promote') / 'nightly.env'}"
    text = path.read_text()
    assert "verdict adopt" in text and "FORCED" not in text
    assert any(line.startswith("GOMAXPROCS=") for line in text.splitlines())
    mtime = path.stat().st_mtime_ns
    again = cli(workdir, "export", "exp.yaml", "--format", "env", "--write-to", "promote")
    assert again.returncode == 0 and again.stdout.startswith("unchanged ")
    assert path.stat().st_mtime_ns == mtime

    # The service changes under the same environment: its defaults are now the best.
    doc = simulated_doc()
    doc["target"]["simulated"]["optimum"] = {"GOMAXPROCS": 8, "gc": 0}
    write(workdir / "exp.yaml", doc)
    second = cli(workdir, "run", "exp.yaml", "--plain", "--fail-on-drift")
    assert second.returncode == 4, second.stdout + second.stderr
    assert "(continued)" in second.stdout
    assert "drift: drifted: production (GOMAXPROCS=unset gc=0) is now significantly better" \
        in second.stdout
    # Without the flag the same finding is reported, and the exit code stays 0.
    third = cli(workdir, "run", "exp.yaml", "--plain")
    assert third.returncode == 0 and "drift: drifted: " in third.stdout

    history = cli(workdir, "history", "exp.yaml", "--json")
    assert history.returncode == 0, history.stderr
    nights = json.loads(history.stdout)
    assert [n["drift"] for n in nights] == ["skipped", "drifted", "drifted"]
    assert [n["status"] for n in nights] == ["finished"] * 3
    assert nights[0]["verdict"] == "adopt" and nights[0]["search_trials"] == 6
    assert nights[0]["candidate"] < nights[0]["baseline"]
    assert 0.95 <= nights[0]["confidence"] < 1  # the level of its interval (ci95), said
    assert len({n["environment"] for n in nights}) == 1
    for name in ("nights.md", "nights.json", "nights.png"):
        assert (workdir / "results" / "nightly" / name).stat().st_size > 0
    assert "% CI +" in (workdir / "results" / "nightly" / "nights.md").read_text()
    table = cli(workdir, "history", "exp.yaml").stdout
    assert table.splitlines()[0].split()[:3] == ["night", "(UTC)", "study"]
    assert table.count("drifted") >= 2


def test_a_changed_fingerprint_is_said_and_the_history_shows_both_studies(
        workdir: Path) -> None:
    assert cli(workdir, "run", "exp.yaml", "--plain", "--trials", "3").returncode == 0
    doc = simulated_doc()
    doc["target"]["simulated"]["noise"] = 0.04
    write(workdir / "exp.yaml", doc)
    second = cli(workdir, "run", "exp.yaml", "--plain", "--trials", "3")
    assert second.returncode == 0, second.stderr
    assert "(noise: 0.02 -> 0.04): study nightly@" in second.stdout
    assert "replaces nightly, warm-started with" in second.stdout
    nights = json.loads(cli(workdir, "history", "exp.yaml", "--json").stdout)
    assert nights[0]["study"] == "nightly" and nights[1]["study"].startswith("nightly@")
    assert nights[1]["opened"] == "new environment" and nights[1]["warm_started"] >= 1
    assert nights[1]["changes"] == ["noise: 0.02 -> 0.04"]
    md = (workdir / "results" / "nightly" / "nights.md").read_text()
    assert md.startswith("## Night by night") and "environment changed (noise: 0.02 -> 0.04)" in md
    assert cli(workdir, "report", "exp.yaml").returncode == 0
    report = (workdir / "results" / "nightly" / "report.md").read_text()
    assert "## Night by night" in report and "environment changed (noise" in report
    # And in the HTML, the copy that is mailed around (review finding: it was in the .md only),
    # its plot embedded.
    page = (workdir / "results" / "nightly" / "report.html").read_text()
    assert "Night by night</h2>" in page and "environment changed (noise" in page
    assert page.count("data:image/png;base64,") == report.count(".png)")


def test_nothing_is_promoted_without_adopt_and_never_by_force(workdir: Path) -> None:
    doc = simulated_doc(trials=3)
    doc["target"]["simulated"]["optimum"] = {"GOMAXPROCS": 8, "gc": 0}  # production is best
    write(workdir / "exp.yaml", doc)
    run = cli(workdir, "run", "exp.yaml", "--plain")
    assert run.returncode == 0 and "verdict: ADOPT" not in run.stdout, run.stdout
    out = cli(workdir, "export", "exp.yaml", "--format", "env", "--write-to", "promote")
    assert out.returncode == 1 and "nothing exported: the verdict is" in out.stderr
    assert not (workdir / "promote").exists()
    forced = cli(workdir, "export", "exp.yaml", "--format", "env", "--write-to", "promote",
                 "--force")
    assert forced.returncode == 2 and "--write-to promotes adopted recommendations only" \
        in forced.stderr
    assert not (workdir / "promote").exists()


def test_history_of_an_unknown_experiment_is_an_error(workdir: Path) -> None:
    out = cli(workdir, "history", "exp.yaml")
    assert out.returncode == 1 and "no study database at results/nightly/study.db" in out.stderr
    assert not (workdir / "results").exists()
    # a database holding another experiment's study
    other = workdir / "other.db"
    sqlite3.connect(other).close()
    out = cli(workdir, "history", "exp.yaml", "--storage", f"sqlite:///{other}")
    assert out.returncode == 1 and "no study named 'nightly'" in out.stderr


def test_report_out_never_replaces_files_no_report_wrote(workdir: Path) -> None:
    # Review finding: `report --out DIR` replaced report.md and deleted every plot name it did
    # not draw (history.png...) in whatever directory it was given.
    assert cli(workdir, "run", "exp.yaml", "--plain", "--trials", "3").returncode == 0
    mine = workdir / "docs"
    mine.mkdir()
    (mine / "report.md").write_text("my notes\n")
    (mine / "importance.png").write_bytes(b"my picture")
    refused = cli(workdir, "report", "exp.yaml", "--out", "docs")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "docs holds report.md, importance.png, not written by autotune" in refused.stderr
    assert (mine / "report.md").read_text() == "my notes\n"
    assert (mine / "importance.png").read_bytes() == b"my picture"
    for _ in range(2):  # a new directory, then the same one again: its files are ours
        written = cli(workdir, "report", "exp.yaml", "--out", "fresh")
        assert written.returncode == 0, written.stderr
    assert (workdir / "fresh" / "report.json").exists()
    # What `autotune history --out` wrote is autotune's too (review finding: refused).
    assert cli(workdir, "history", "exp.yaml", "--out", "nights").returncode == 0
    written = cli(workdir, "report", "exp.yaml", "--out", "nights")
    assert written.returncode == 0, written.stderr


def test_history_out_never_replaces_files_no_autotune_wrote(workdir: Path) -> None:
    # Review finding: `history --out DIR` replaced nights.md/json/png wherever it was pointed.
    assert cli(workdir, "run", "exp.yaml", "--plain", "--trials", "3").returncode == 0
    mine = workdir / "docs"
    mine.mkdir()
    (mine / "nights.md").write_text("my nights\n")
    refused = cli(workdir, "history", "exp.yaml", "--out", "docs")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "docs holds nights.md, not written by autotune" in refused.stderr
    assert (mine / "nights.md").read_text() == "my nights\n"
    assert sorted(p.name for p in mine.iterdir()) == ["nights.md"]
    # a report.md of the user's is not the history's business: history writes beside it
    (workdir / "notes").mkdir()
    (workdir / "notes" / "report.md").write_text("mine\n")
    for _ in range(2):  # a new directory, then the same one again: its files are ours
        assert cli(workdir, "history", "exp.yaml", "--out", "notes").returncode == 0
    assert (workdir / "notes" / "report.md").read_text() == "mine\n"
