"""Several workers share one study through a real PostgreSQL server (each has its own target)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune.experiment import parse_experiment
from tests.support.postgres import postgres_server
from tests.unit.test_pool import DOC, applied, members, run

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_server(prefix="autotune-pg-") as server:
        yield server.url()


def _experiment(tmp: Path, worker: int) -> Path:
    doc = {
        "name": "shared",
        "target": {"simulated": {"optimum": {"GOMAXPROCS": 2}, "unset": {"GOMAXPROCS": 8},
                                 "state_file": f"world-{worker}.json"}},
        "parameters": [{"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 16}],
        "baseline": {"repeats": 2},
        "chaos": {"stress": {"workers": 1, "load": 50}},
        "measure": {"warmup": "50ms", "window": "300ms"},
        "metrics": {"p99": "surface"},
        "objective": {"minimize": "p99"},
        # early_stop off: the test counts the budget (converged workers stop below it)
        "study": {"trials": 8, "sampler": "tpe", "seed": worker, "early_stop": None},
    }
    path = tmp / f"exp-{worker}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_two_workers_share_one_study(tmp_path: Path, postgres_url: str) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-m", "autotune.cli", "run",
                          str(_experiment(tmp_path, w)), "--storage", postgres_url, "--plain"],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for w in (1, 2)
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "autotune@127.0.0.1" in outs[0] and "***" not in outs[0]  # no password to hide
    study = optuna.load_study(study_name="shared", storage=postgres_url)
    trials = study.get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    # Both workers count the same budget; at most one trial per extra worker overshoots it.
    assert 8 <= len(complete) <= 9, outs
    workers = {t.user_attrs["worker"]["pid"] for t in trials}
    assert len(workers) == 2, "both workers ran trials"
    assert len({t.number for t in trials}) == len(trials)
    reference = optuna.load_study(study_name="shared:reference", storage=postgres_url)
    assert len([t for t in reference.get_trials() if t.state == TrialState.COMPLETE]) >= 2


def test_a_pools_members_share_one_study_in_postgresql(tmp_path: Path, postgres_url: str) -> None:
    """The pool (autotune.study.pool): threads of one process on one PostgreSQL study."""
    exp = parse_experiment(yaml.safe_dump({**DOC, "name": "pooled-pg"}))
    pool = members(tmp_path, exp, 3)
    result, _ = run(tmp_path, pool, exp, url=postgres_url)
    assert result.completed == 9
    study = optuna.load_study(study_name="pooled-pg", storage=postgres_url)
    complete = study.get_trials(states=[TrialState.COMPLETE])
    assert len(complete) == 9  # not one over
    assert {t.user_attrs["member"] for t in complete} == {"copy-0", "copy-1", "copy-2"}
    reference = optuna.load_study(study_name="pooled-pg:reference", storage=postgres_url)
    baseline = [t.user_attrs["member"] for t in reference.get_trials(states=[TrialState.COMPLETE])]
    assert sorted(baseline) == sorted(["copy-0", "copy-1", "copy-2"] * 2)
    assert len({t.params["GOMAXPROCS"] for t in complete}) == 9  # no configuration twice
    assert applied(pool) == [None, None, None]
