"""Nights against a real PostgreSQL server: the CronJob's own script (deploy/cronjob.yaml) on the
simulated target, and two nights of the real local stack (Go demo service, stress-ng, Prometheus)
whose CPU limit changes in between."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from tests.nightly.conftest import ROOT, cli, simulated_doc, write

pytestmark = pytest.mark.integration


def _cronjob_container() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "cronjob.yaml").read_text()))
    [cron] = [d for d in docs if d["kind"] == "CronJob"]
    [container] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _night_job(workdir: Path, experiment: Path, env: dict[str, str]) -> tuple[int, str]:
    """The CronJob container's command and args, with the experiment file here, run in its
    working directory with its env (the Secret's URL and the promotion settings replaced)."""
    c = _cronjob_container()
    argv = [*c["command"], *(experiment.as_posix() if a.startswith("/etc/autotune/") else a
                             for a in c["args"])]
    job_env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    bin_dir = str(Path(sys.executable).parent)
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **job_env, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                               "PYTHONUNBUFFERED": "1", **env})
    return done.returncode, done.stdout + done.stderr


def test_the_cronjob_script_runs_nights_against_postgres(tmp_path: Path,
                                                         postgres_url: str) -> None:
    doc = simulated_doc()
    doc["name"] = "pg-nightly"
    exp = write(tmp_path / "api.yaml", doc)
    env = {"AUTOTUNE_STORAGE": postgres_url, "AUTOTUNE_PROMOTE_DIR": str(tmp_path / "promote"),
           "AUTOTUNE_PROMOTE_FORMAT": "env"}
    promoted = tmp_path / "promote" / "pg-nightly.env"

    code, out = _night_job(tmp_path, exp, env)
    assert code == 0, out
    assert "verdict: ADOPT" in out and f"wrote {promoted}" in out
    first_promotion = promoted.read_text()

    doc["target"]["simulated"]["noise"] = 0.04  # a new environment: a new, warm-started study
    write(exp, doc)
    code, out = _night_job(tmp_path, exp, env)
    assert code == 0, out
    studies = {s.study_name: s for s in optuna.get_all_study_summaries(postgres_url)
               if s.study_name.startswith("pg-nightly")}
    [new] = [n for n in studies if n.startswith("pg-nightly@") and ":" not in n]
    assert {"pg-nightly", "pg-nightly:reference", new, f"{new}:reference"} == set(studies)
    search = optuna.load_study(study_name=new, storage=postgres_url)
    first = min(search.get_trials(), key=lambda t: t.number)
    assert first.user_attrs["origin"] == "warm-start"
    assert search.user_attrs["warm_start"]["changes"] == ["noise: 0.02 -> 0.04"]
    assert "drift: still best: the last recommendation" in out
    # What is promoted is tonight's recommendation (the file changes only with its variables).
    now = cli(tmp_path, "export", str(exp), "--format", "env",
              env={"AUTOTUNE_STORAGE": postgres_url})
    assert now.returncode == 0, now.stderr
    assert _variables(promoted.read_text()) == _variables(now.stdout)
    assert (promoted.read_text() == first_promotion) == (
        _variables(first_promotion) == _variables(now.stdout))

    doc["target"]["simulated"]["optimum"] = {"GOMAXPROCS": 8, "gc": 0}  # production is best now
    write(exp, doc)
    before = promoted.stat().st_mtime_ns
    code, out = _night_job(tmp_path, exp, env)
    assert code == 4, out  # the Job fails: something to alert on
    assert "drift: drifted: production" in out
    assert promoted.stat().st_mtime_ns == before, "a drifted night promotes nothing"

    history = json.loads((tmp_path / "results" / "pg-nightly" / "nights.json").read_text())
    assert [n["study"] for n in history] == ["pg-nightly", new, new]
    assert [n["drift"] for n in history] == ["skipped", "still best", "drifted"]
    assert (tmp_path / "results" / "pg-nightly" / "nights.png").stat().st_size > 0
    assert (tmp_path / "results" / "pg-nightly" / "report.md").exists()


def _variables(env_file: str) -> list[str]:
    return [line for line in env_file.splitlines() if line and not line.startswith("#")]


def _local(tmp: Path, cpus: float) -> Path:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "experiments" / "local.yaml").read_text())
    doc["name"] = "pg-local"
    doc["target"]["local"]["cpus"] = cpus
    doc["target"]["local"]["load"] = {"rate": 150, "path": "/", "connections": 32}
    doc["parameters"] = [{"name": "GOMAXPROCS", "type": "int", "values": [1, 2, 4]},
                         {"name": "GOGC", "type": "int", "values": [100, 400]}]
    doc["baseline"] = {"repeats": 1, "params": {"GOMAXPROCS": None, "GOGC": None}}
    doc["measure"] = {"warmup": "1s", "window": "4s",
                      "noise_guard": {"max_foreign_cores": 1.5, "retries": 1}}
    doc["study"] = {"trials": 2, "sampler": "random", "seed": 5}
    path = tmp / "local.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_two_local_nights_with_a_changed_cpu_limit(tmp_path: Path, postgres_url: str) -> None:
    storage = {"AUTOTUNE_STORAGE": postgres_url}
    options = ["--plain", "--top", "1", "--repeats", "1", "--extra", "0"]
    first = cli(tmp_path, "run", str(_local(tmp_path, 1.0)), *options, env=storage, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "study pg-local (new)" in first.stdout

    second = cli(tmp_path, "run", str(_local(tmp_path, 0.8)), *options, env=storage,
                 timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "(cpus: 1.0 -> 0.8): study pg-local@" in second.stdout

    history = cli(tmp_path, "history", str(_local(tmp_path, 0.8)), "--json", env=storage)
    nights = json.loads(history.stdout)
    assert [n["status"] for n in nights] == ["finished", "finished"]
    assert nights[0]["study"] == "pg-local" and nights[1]["study"].startswith("pg-local@")
    assert nights[0]["environment"] != nights[1]["environment"]
    assert all(n["search_trials"] == 2 for n in nights)
    assert all(n["candidate"] is not None and n["baseline"] is not None for n in nights)
    old = optuna.load_study(study_name="pg-local", storage=postgres_url)
    fields = old.user_attrs["environment"]["fields"]
    assert fields["target"] == "local" and fields["workload"] == "demo"
    assert fields["cpus"] == 1.0 and isinstance(fields["host_cpus"], int)
    assert fields["load"]["rate"] == 150
    # The build, read from the binary before the first trial (local/gobuild.binary_facts).
    assert fields["go_version"].startswith("go") and len(fields["binary_sha256"]) == 64
    new = optuna.load_study(study_name=nights[1]["study"], storage=postgres_url)
    assert new.user_attrs["environment"]["fields"]["cpus"] == 0.8
    origins = [t.user_attrs.get("origin") for t in sorted(new.get_trials(),
                                                          key=lambda t: t.number)]
    assert origins[0] == "warm-start", origins
    assert new.user_attrs["environment"]["fields"]["go_version"] == fields["go_version"]
