"""`autotune init` against a Go service that is not ours (tests/fixtures/outside_service: its
own flag for the address, readiness on /ready, a histogram of its own name, client_golang's
collector without the /cpu/classes metrics): it starts the command once, finds what is there,
says what is not, writes a file that validates, and leaves no process behind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.experiment import load_experiment
from autotune.platforms.local import gobuild

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parents[1] / "fixtures" / "outside_service"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The outside service, built as its team would: `go build` with its own go.mod and the
    module proxy the machine is configured with (client_golang is a real dependency)."""
    binary = tmp_path_factory.mktemp("inventory") / "inventory"
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0",
           "GOFLAGS": "-mod=readonly"}
    done = subprocess.run([gobuild.find_go(), "build", "-o", str(binary), "."], cwd=FIXTURE,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return binary


def _running(binary: Path) -> list[int]:
    """PIDs of processes whose executable is ``binary``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.readlink(proc / "exe") == str(binary):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_init_writes_a_valid_experiment_from_what_the_service_exports(
        inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "inventory.yaml"
    code = main(["init", "--command", f"{inventory} -listen 127.0.0.1:{{port}}",
                 "--health", "/ready", "--path", "/items", "-o", str(out)])
    said = capsys.readouterr()
    assert code == 0, said.err
    exp, _ = load_experiment(out)
    local = exp.target.local
    assert local is not None
    assert local.command == (str(inventory), "-listen", "127.0.0.1:{port}")
    assert (local.health, local.load.path) == ("/ready", "/items")
    # Its own histogram (exported only after a first request: init sends one) is the objective.
    assert "inventory_http_request_duration_seconds_bucket" in exp.metric("p99_latency").query
    assert {"gc_pause_p99", "sched_latency_p99", "gc_rate", "gomaxprocs"} <= set(exp.metrics)
    assert "p_idle_fraction" not in exp.metrics, "it exports no /cpu/classes series"
    assert "p_idle_fraction" in said.out, "and init says so"
    assert exp.parameters[0].values == (1, 2)
    assert _running(inventory) == [], "the probed service is stopped"


def test_init_says_why_when_the_service_does_not_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["init", "--command",
                 "/bin/sh -c 'echo cannot bind {port} >&2; exit 3' --password=hunter2",
                 "-o", str(tmp_path / "x.yaml")])
    err = capsys.readouterr().err
    assert code == 1
    assert "exited with 3 before serving /metrics" in err and "cannot bind" in err
    assert "hunter2" not in err, "a secret in the command line is masked in the message"
    assert not (tmp_path / "x.yaml").exists()


def test_init_never_replaces_a_file_unasked(
        inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine.yaml"
    out.write_text("# my own experiment\n")
    code = main(["init", "--command", f"{inventory} -listen 127.0.0.1:{{port}}",
                 "--health", "/ready", "-o", str(out)])
    assert code == 2 and "--force" in capsys.readouterr().err
    assert out.read_text() == "# my own experiment\n"
    assert _running(inventory) == []


def test_init_refuses_a_load_path_the_service_does_not_serve(
        inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found in the walkthrough: the default path `/` answers 404 in this service; a study of
    404s would count every request as an error."""
    code = main(["init", "--command", f"{inventory} -listen 127.0.0.1:{{port}}",
                 "-o", str(tmp_path / "x.yaml")])
    assert code == 1
    err = capsys.readouterr().err
    assert "GET / answered 404" in err and "--path" in err
    assert not (tmp_path / "x.yaml").exists()
    assert _running(inventory) == []
