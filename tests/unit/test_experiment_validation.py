"""Bad experiment files are rejected before anything starts, each problem named by its path."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.errors import ExperimentError
from autotune.experiment import load_experiment, parse_experiment

VALID = textwrap.dedent("""
    name: t
    target:
      simulated:
        optimum: {GOMAXPROCS: 2, gc: 500}
        unset: {GOMAXPROCS: 4, gc: 0}
    parameters:
      - {name: GOMAXPROCS, type: int, low: 1, high: 8}
      - {name: gc, env: FORCEGC_INTERVAL_MS, type: int, values: [0, 500, 2000]}
    baseline: {params: {GOMAXPROCS: null, gc: 0}}
    chaos: {stress: {workers: 2, load: 50}}
    measure: {warmup: 1s, window: 5s}
    metrics: {p99: surface, stress: stress}
    objective: {minimize: p99}
    constraints: ['p99 <= 1']
    study: {trials: 5}
""")


def _with(old: str, new: str) -> str:
    assert old in VALID, old
    return VALID.replace(old, new)


CASES = [
    ("empty file", "", "the file is empty"),
    ("not a mapping", "- a\n- b\n", "must be a mapping"),
    ("yaml syntax", "name: t\ntarget: {simulated: {optimum: {\n", "line 3, column 1: YAML syntax"),
    ("duplicate key", VALID + "name: again\n", "duplicate key 'name'"),
    ("unknown top-level key", VALID + "colour: blue\n", "colour: unknown key"),
    ("missing name", VALID.replace("name: t\n", ""), "name: required"),
    ("bad name", _with("name: t", "name: Bad Name"), "name: 'Bad Name' does not match"),
    ("trials zero", _with("trials: 5", "trials: 0"), "study.trials: must be >= 1"),
    ("unknown study key", _with("trials: 5}", "trials: 5, workers: 3}"),
     "study.workers: unknown key"),
    ("bad duration", _with("warmup: 1s", "warmup: 10 parsecs"),
     "measure.warmup: not a duration: '10 parsecs'"),
    ("negative duration", _with("window: 5s", "window: -5"),
     "measure.window: must not be negative"),
    ("wrong type", _with("workers: 2", "workers: many"), "chaos.stress.workers:"),
    ("workers zero", _with("workers: 2", "workers: 0"),
     "chaos.stress: workers is 0 and there is no memory stress"),
    ("workers too many", _with("workers: 2", "workers: 9000"),
     "chaos.stress.workers: must be <= 8192"),
    ("load over 100", _with("load: 50", "load: 150"), "chaos.stress.load: must be <= 100"),
    ("value of wrong type", _with("values: [0, 500, 2000]", "values: [0, 500, fast]"),
     "parameters[1].values: every value of an int parameter must be an integer; not 'fast' "
     "(numbers are written unquoted)"),
    # Issue 18: one line for a list of quoted numbers, not one per value.
    ("quoted numbers", _with("values: [0, 500, 2000]", "values: ['0', '500', '2000']"),
     "parameters[1].values: every value of an int parameter must be an integer; not '0', "
     "'500', '2000' (numbers are written unquoted)"),
    # Issue 18: the line PyYAML stopped at, shown, and where an indentation mistake is.
    ("indentation", _with("study: {trials: 5}", "study:\n  trials: 5\n   seed: 1"),
     "YAML syntax error: mapping values are not allowed here\n    18 |    seed: 1\n    "
     "(usually indentation"),
    ("duplicate value", _with("values: [0, 500, 2000]", "values: [0, 500, 500]"),
     "parameters[1].values[2]: duplicate value 500"),
    ("empty values", _with("values: [0, 500, 2000]", "values: []"),
     "parameters[1].values: must not be empty"),
    ("values and range", _with("values: [0, 500, 2000]", "values: [0], low: 0, high: 9"),
     "parameters[1]: give either values or low/high"),
    ("high below low", _with("low: 1, high: 8", "low: 8, high: 1"),
     "parameters[0].high: must be > low"),
    ("missing high", _with("low: 1, high: 8", "low: 1"), "parameters[0].high: required"),
    ("log with zero low",
     _with("type: int, low: 1, high: 8", "type: float, low: 0, high: 8, log: true"),
     "parameters[0].low: must be > 0 when log is true"),
    ("unknown type", _with("type: int, low", "type: integer, low"),
     "parameters[0].type: 'integer' is not one of"),
    ("duplicate name", _with("name: gc, env", "name: GOMAXPROCS, env"),
     "parameters[1].name: duplicate parameter name 'GOMAXPROCS'"),
    ("duplicate env", _with("env: FORCEGC_INTERVAL_MS", "env: GOMAXPROCS"),
     "parameters[1].env: environment variable GOMAXPROCS is already set by parameters[0]"),
    ("bad env name", _with("env: FORCEGC_INTERVAL_MS", "env: 'FORCE-GC'"),
     "parameters[1].env: 'FORCE-GC' does not match"),
    ("baseline unknown parameter", _with("gc: 0}}", "gc: 0, GOGC: 100}}"),
     "baseline.params.GOGC: unknown parameter"),
    ("baseline outside range", _with("GOMAXPROCS: null, gc", "GOMAXPROCS: 64, gc"),
     "baseline.params.GOMAXPROCS: 64 is not a value of the parameter (must be in [1, 8]"),
    ("baseline not a value", _with("GOMAXPROCS: null, gc: 0}}", "GOMAXPROCS: null, gc: 7}}"),
     "baseline.params.gc: 7 is not a value of the parameter (must be one of [0, 500, 2000]"),
    ("objective unknown metric", _with("minimize: p99}", "minimize: p999}"),
     "objective.minimize: unknown metric 'p999'"),
    ("objective both", _with("minimize: p99}", "minimize: p99, maximize: p99}"),
     "objective: give exactly one of minimize, maximize"),
    ("constraint unknown metric", _with("'p99 <= 1'", "'gc_pause_p99 <= 0.005'"),
     "constraints[0]: unknown metric 'gc_pause_p99'"),
    ("constraint syntax", _with("'p99 <= 1'", "'p99 is small'"),
     "constraints[0]: cannot parse constraint 'p99 is small'"),
    ("unknown placeholder", _with("p99: surface", "p99: 'rate(x{ {{selectr}} }[1m])'"),
     "metrics.p99: unknown placeholder(s) {{selectr}}"),
    ("two targets", _with("target:\n", "target:\n  local: {}\n"),
     "target: must have exactly one of local, kubernetes, simulated, replay (found local, "
     "simulated)"),
    ("no metrics", _with("metrics: {p99: surface, stress: stress}", "metrics: {}"),
     "metrics: must have at least 1 item"),
    ("burst longer than every", _with("measure:", "  pattern: {every: 2s, burst: 3s}\nmeasure:")
     .replace("chaos: {stress: {workers: 2, load: 50}}\n  pattern",
              "chaos:\n  stress: {workers: 2, load: 50}\n  pattern"),
     "chaos.pattern.burst: must be shorter than every"),
    ("grid needs discrete", _with("trials: 5}", "trials: 5, sampler: grid}")
     .replace("type: int, low: 1, high: 8", "type: float, low: 1, high: 8"),
     "parameters[0]: the grid sampler needs values or a step"),
    ("grid too large", _with("trials: 5}", "trials: 5, sampler: grid}")
     .replace("type: int, low: 1, high: 8", "type: int, low: 1, high: 20000"),
     "parameters[0]: more than 10000 values is too many for the grid sampler"),
    ("unknown sampler", _with("trials: 5}", "trials: 5, sampler: cmaes}"),
     "study.sampler: 'cmaes' is not one of"),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in CASES],
                         ids=[c[0] for c in CASES])
def test_invalid_files_name_the_field(text: str, expected: str) -> None:
    with pytest.raises(ExperimentError) as err:
        parse_experiment(text)
    assert any(expected in p for p in err.value.problems), err.value.problems


def _problems(text: str) -> list[str]:
    with pytest.raises(ExperimentError) as err:
        parse_experiment(text)
    return err.value.problems


SIMULATED = ("  simulated:\n    optimum: {GOMAXPROCS: 2, gc: 500}\n"
             "    unset: {GOMAXPROCS: 4, gc: 0}\n")


def _local(spec: str) -> str:
    return _with(SIMULATED, f"  local: {spec}\n")


# An error inside a mapping names the key; the union member pydantic tried ("int", "Goal",
# "tuple[Goal, ...]", "constrained-float") never appears, even where a key is spelled like one.
KEY_PATHS = [
    ("simulated optimum", _with("optimum: {GOMAXPROCS: 2,", "optimum: {GOMAXPROCS: [1],"),
     ["target.simulated.optimum.GOMAXPROCS"]),
    ("simulated unset", _with("unset: {GOMAXPROCS: 4,", "unset: {GOMAXPROCS: {},"),
     ["target.simulated.unset.GOMAXPROCS"]),
    ("key spelled like a type", _with("optimum: {GOMAXPROCS: 2,", "optimum: {int: [1],"),
     ["target.simulated.optimum.int"]),
    ("metric value", _with("stress: stress}", "stress: stress, float: 3}"), ["metrics.float"]),
    ("metric field", _with("p99: surface", "p99: {query: ''}"), ["metrics.p99"]),
    ("metric schedtrace", _with("p99: surface", "p99: {schedtrace: runq_nope}"),
     ["metrics.p99.schedtrace"]),  # not also "p99: not a valid string" (the text member)
    ("baseline params", _with("GOMAXPROCS: null, gc", "GOMAXPROCS: [1], gc"),
     ["baseline.params.GOMAXPROCS"]),
    ("local env", _local("{env: {GODEBUG: 1}}"), ["target.local.env.GODEBUG"]),
    ("load headers", _local("{load: {headers: {X-Token: 1}}}"),
     ["target.local.load.headers.X-Token"]),
    ("load rate", _local("{load: {rate: fast}}"), ["target.local.load.rate"]),
    ("prometheus headers", VALID + "prometheus: {headers: {X-Scope-OrgID: 1}}\n",
     ["prometheus.headers.X-Scope-OrgID"]),
    ("objective weight", _with("minimize: p99}", "minimize: {Goal: heavy}}"),
     ["objective.minimize.Goal"]),
    ("objectives weight",
     _with("objective: {minimize: p99}", "objective: [{minimize: p99}, {maximize: {str: x}}]"),
     ["objective[1].maximize.str"]),
    ("enqueue entry", _with("trials: 5}", "trials: 5, enqueue: [{GOMAXPROCS: 2, bool: [0]}]}"),
     ["study.enqueue[0].bool"]),
    ("design points", _with("trials: 5}", "trials: 5, design: {points: many}}"),
     ["study.design.points"]),
]


@pytest.mark.parametrize(("text", "paths"), [(t, p) for _, t, p in KEY_PATHS],
                         ids=[c[0] for c in KEY_PATHS])
def test_errors_inside_mappings_name_the_key(text: str, paths: list[str]) -> None:
    problems = _problems(text)
    assert sorted(p.split(": ", 1)[0] for p in problems) == paths, problems


def test_a_key_that_is_not_text_is_named() -> None:
    assert _problems(_with("gc: 0}}", "gc: 0, 1: 2}}")) == [
        "baseline.params.1: a key must be text (got 1; quote it)"]


ENQUEUED = "trials: 5, enqueue: [{GOMAXPROCS: 2, gc: 0}, {GOMAXPROCS: 8, gc: 2000}]}"

CROSS_FIELD = [
    ("enqueue unknown parameter",
     _with("trials: 5}", "trials: 5, enqueue: [{GOMAXPROC: 2, GOMAXPROCS: 2, gc: 0}]}"),
     "study.enqueue[0].GOMAXPROC: unknown parameter (known: GOMAXPROCS, gc)"),
    ("enqueue missing parameter", _with("trials: 5}", ENQUEUED.replace(", gc: 2000", "")),
     "study.enqueue[1]: missing gc"),
    ("enqueue outside range",
     _with("trials: 5}", ENQUEUED.replace("GOMAXPROCS: 8", "GOMAXPROCS: 9")),
     "study.enqueue[1].GOMAXPROCS: 9 is not a value of the parameter (must be in [1, 8])"),
    ("enqueue not a value", _with("trials: 5}", ENQUEUED.replace("gc: 0", "gc: 7")),
     "study.enqueue[0].gc: 7 is not a value of the parameter (must be one of [0, 500, 2000])"),
    ("design points negative", _with("trials: 5}", "trials: 5, design: {points: -1}}"),
     "study.design.points: must be >= 0"),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in CROSS_FIELD],
                         ids=[c[0] for c in CROSS_FIELD])
def test_study_cross_field_checks(text: str, expected: str) -> None:
    assert _problems(text) == [expected]


def test_enqueued_candidates_and_design_points_that_fit_are_valid() -> None:
    exp = parse_experiment(_with("trials: 5}", ENQUEUED[:-1] + ", design: {points: 0}}"))
    assert exp.study.enqueue == ({"GOMAXPROCS": 2, "gc": 0}, {"GOMAXPROCS": 8, "gc": 2000})
    assert exp.study.design.points == 0


def test_at_least_twenty_distinct_cases() -> None:
    assert len({expected for _, _, expected in CASES}) >= 20


def test_several_problems_are_all_reported() -> None:
    text = _with("trials: 5", "trials: 0").replace("workers: 2", "workers: 0")
    with pytest.raises(ExperimentError) as err:
        parse_experiment(text)
    assert len(err.value.problems) == 2


def test_valid_file_parses_into_frozen_models() -> None:
    exp = parse_experiment(VALID)
    assert exp.parameter("gc").env_var == "FORCEGC_INTERVAL_MS"
    assert exp.baseline_settings() == {"GOMAXPROCS": None, "gc": 0}
    assert exp.measure.window == 5.0
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        exp.study.trials = 9  # type: ignore[misc]


# Experiment files, not the Kubernetes manifests that sit beside them as examples.
EXPERIMENTS = [p for p in sorted((Path(__file__).parents[2] / "experiments").glob("*.yaml"))
               if "apiVersion:" not in p.read_text()]


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_shipped_experiments_are_valid(path: Path) -> None:
    load_experiment(path)


def test_cli_validate_exit_codes_and_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(VALID)
    assert main(["validate", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(_with("trials: 5", "trials: 0").replace("workers: 2", "workers: 0"))
    assert main(["validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "study.trials: must be >= 1" in err
    assert "chaos.stress: workers is 0 and there is no memory stress" in err
    assert "Traceback" not in err
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 1
    assert capsys.readouterr().err == f"{tmp_path / 'missing.yaml'}: not found\n"
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "cannot read the file" in err and "invalid experiment" not in err


@pytest.mark.parametrize(("edit", "expected"), [
    (("measure", "warm_up", "2s"), "measure.warm_up: unknown key (did you mean 'warmup'?)"),
    (("study", "triels", 3), "study.triels: unknown key (did you mean 'trials'?)"),
    ((None, "capture", True), "capture: unknown key here: 'capture' belongs under measure"),
    ((None, "zzz", 1), "zzz: unknown key (allowed here: baseline, chaos, constraints, "
                       "description, measure, metrics, name, objective, parameters, "
                       "prometheus, study, target)"),
])
def test_an_unknown_key_is_told_what_was_meant(edit: tuple[str | None, str, object],
                                               expected: str) -> None:
    """Issue 18 ("messages that teach"): a misspelt key gets the near key allowed there, a key at
    the wrong level the section it belongs in, anything else the keys allowed there."""
    section, key, value = edit
    doc = yaml.safe_load(VALID)
    (doc[section] if section else doc)[key] = value
    with pytest.raises(ExperimentError) as e:
        parse_experiment(yaml.safe_dump(doc))
    assert expected in e.value.problems, e.value.problems


def test_a_mapping_where_text_or_a_model_goes_names_only_the_models_own_error() -> None:
    """Review finding: a misspelt key inside a metric's mapping first said "input should be a
    valid string (got {...})": true of the text member of the union, and no help."""
    doc = yaml.safe_load(VALID)
    name = next(iter(doc["metrics"]))
    doc["metrics"][name] = {"query": "x", "descripton": "y"}
    doc["objective"] = {"minimise": name}
    with pytest.raises(ExperimentError) as e:
        parse_experiment(yaml.safe_dump(doc))
    assert [p for p in e.value.problems if p.startswith("metrics")] == [
        f"metrics.{name}.descripton: unknown key"], e.value.problems
    assert "objective.minimise: unknown key (did you mean 'minimize'?)" in e.value.problems
    # Review of that change: a mapping none of whose keys the model takes may be text YAML
    # read as a mapping (unquoted PromQL): that is said.
    doc["metrics"][name] = {'job="api"': None}
    with pytest.raises(ExperimentError) as e:
        parse_experiment(yaml.safe_dump(doc))
    assert (f"metrics.{name}: must be text (in quotes: YAML reads {{...}} and key: value as a "
            "mapping), not {'job=\"api\"': None}") in e.value.problems, e.value.problems


def test_a_list_written_as_text_is_told_to_be_a_list() -> None:
    doc = yaml.safe_load(VALID)
    doc["constraints"] = "error_rate <= 0.01"
    with pytest.raises(ExperimentError) as e:
        parse_experiment(yaml.safe_dump(doc))
    assert e.value.problems == ["constraints: must be a list (a '- item' line each, or [a, b]), "
                                "not 'error_rate <= 0.01'"]


def test_cli_usage_error_is_exit_2() -> None:
    assert main(["run"]) == 2
    assert main(["run", "x.yaml", "--trials", "0"]) == 2


def test_schema_is_generated_from_the_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"name", "target", "parameters", "chaos", "metrics", "objective"} <= set(
        schema["properties"])
    assert "name" in schema["required"]
    assert schema["additionalProperties"] is False


def test_validate_live_on_a_local_target_says_why_and_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 18: it printed "valid", then failed with exit 1 ("not a kubernetes experiment")."""
    root = Path(__file__).parents[2]
    assert main(["validate", str(root / "experiments" / "local.yaml"), "--live"]) == 2
    err = capsys.readouterr().err
    assert "--live: this experiment has a local target" in err and "autotune doctor" in err
    # Review finding: a simulated or replayed target exited 1 ("metrics: 1 problem(s)").
    for name in ("simulated", "replay"):
        assert main(["validate", str(root / "experiments" / f"{name}.yaml"), "--live"]) == 2
        assert f"--live: this experiment has a {name} target" in capsys.readouterr().err
    # Review finding: "FILE: valid" was printed on stdout before the usage error (exit 2).
    assert main(["validate", str(root / "experiments" / "simulated.yaml"), "--cluster"]) == 2
    out = capsys.readouterr()
    assert "--cluster: this experiment has no kubernetes target" in out.err
    assert "valid" not in out.out
    # Review finding: --context on a file without a cluster was accepted silently.
    assert main(["validate", str(root / "experiments" / "local.yaml"), "--context", "prod"]) == 2
    out = capsys.readouterr()
    assert "--context: this experiment has no kubernetes target" in out.err
    assert "valid" not in out.out
    assert main(["validate", str(root / "experiments" / "api.yaml"), "--context", "prod"]) == 2
    assert "--context goes with --cluster or --live" in capsys.readouterr().err


def test_a_trial_that_starts_a_load_generator_pod_is_given_its_start_up_time() -> None:
    """Review finding: the longest trial (the run Lease's duration, the orphan timeout) left out
    the generator pod's ready_timeout, so a slow image pull could outlive the Lease and let
    `autotune cleanup` take over a live run."""
    root = Path(__file__).parents[2]
    text = (root / "experiments" / "api.yaml").read_text()
    plain = parse_experiment(text)
    loaded = parse_experiment(text.replace(
        "    # load: {url:", "    load: {ready_timeout: 90s, url:", 1))
    assert loaded.target.kubernetes is not None and loaded.target.kubernetes.load is not None
    tries = 1 + plain.measure.noise_guard.retries
    assert loaded.max_trial_seconds - plain.max_trial_seconds == 90 * tries
    # The generator's pod: the bound without the rollout it starts after (review finding: the
    # whole bound kept a killed run's load on production for 31 minutes).
    assert loaded.load_seconds == loaded.max_trial_seconds - 300 * tries
