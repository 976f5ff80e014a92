"""Absurd values in an experiment file (issue 16): NaN and infinities in any number, Go settings
Go would ignore or refuse (GOMAXPROCS=-4, GOGC=-1, GOMEMLIMIT=64M) and chaos/schedtrace periods
the platform cannot deliver. Each is refused at validation, naming the field and what is allowed.

The NaN/infinity cases are not a list written by hand: they walk the models' types, so a float
field added later is covered without touching this file.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from autotune.errors import ExperimentError
from autotune.experiment import parse_experiment
from autotune.experiment.models import Experiment

BASE: dict[str, Any] = {
    "name": "absurd",
    "target": {"simulated": {"optimum": {"GOMAXPROCS": 2, "gc": 500},
                             "unset": {"GOMAXPROCS": 4, "gc": 0}}},
    "parameters": [
        {"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 8},
        {"name": "gc", "env": "FORCEGC_INTERVAL_MS", "type": "int", "values": [0, 500, 2000]},
    ],
    "baseline": {"params": {"GOMAXPROCS": None, "gc": 0}},
    "chaos": {"stress": {"workers": 2, "load": 50}, "pattern": {"every": "4s", "burst": "1s"}},
    "measure": {"warmup": "1s", "window": "8s", "load": {"metric": "p99"}},
    "metrics": {"p99": "surface", "stress": "stress"},
    "objective": {"minimize": {"p99": 1.0}},
    "study": {"trials": 5, "deadline": "1h", "enqueue": [{"GOMAXPROCS": 2, "gc": 0}]},
}


def _problems(doc: dict[str, Any] | str) -> list[str]:
    text = doc if isinstance(doc, str) else yaml.safe_dump(doc)
    with pytest.raises(ExperimentError) as err:
        parse_experiment(text)
    return err.value.problems


def _with(section: str, **fields: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    node = doc
    for part in section.split("."):
        node = node[part]
    node.update(fields)
    return doc


def test_the_base_document_is_valid() -> None:
    parse_experiment(yaml.safe_dump(BASE))


# --- NaN and infinities in every float field ------------------------------------------------------

KEY = "<key>"
"""A path part standing for any key of a mapping."""

FieldPath = tuple[str | int, ...]


def _float_paths(tp: Any, path: FieldPath = (),
                 seen: frozenset[type] = frozenset()) -> Iterator[FieldPath]:
    """Every place in the models where a float may stand, as a path of field names, 0 (an item of
    a tuple) and KEY (a value of a mapping). A type the walk does not know fails the test, so a
    field typed Any or a new kind of container cannot escape it."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    origin = get_origin(tp)
    if origin in (Union, UnionType):
        for member in get_args(tp):
            yield from _float_paths(member, path, seen)
    elif tp is float:
        yield path
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        assert tp not in seen, f"recursive model at {path}"
        for name, field in tp.model_fields.items():
            yield from _float_paths(field.annotation, (*path, field.alias or name), seen | {tp})
    elif origin in (tuple, list):
        for item in {a for a in get_args(tp) if a is not Ellipsis}:
            yield from _float_paths(item, (*path, 0), seen)
    elif origin is dict:
        yield from _float_paths(get_args(tp)[1], (*path, KEY), seen)
    else:
        assert tp in (str, int, bool, NoneType) or origin is Literal, \
            f"{'.'.join(map(str, path))}: the walk does not know the type {tp!r}"


FLOAT_PATHS = sorted(set(_float_paths(Experiment)), key=str)


def _put(node: Any, path: FieldPath, value: Any) -> tuple[Any, str]:
    """``node`` with ``value`` at ``path`` (missing or differently shaped containers made as the
    path needs them), and the path as a problem names it (``a.b[0].c``)."""
    if not path:
        return value, ""
    part, rest = path[0], path[1:]
    if part == 0:
        items = list(node) if isinstance(node, list) and node else [{}]
        items[0], shown = _put(items[0], rest, value)
        return items, f"[0]{shown}"
    mapping = dict(node) if isinstance(node, dict) else {}
    key = str(part) if part != KEY else next(iter(mapping), "p99")
    mapping[key], shown = _put(mapping.get(key), rest, value)
    return mapping, f".{key}{shown}"


def test_the_walk_finds_the_float_fields_of_the_issue() -> None:
    shown = {_put(copy.deepcopy(BASE), p, 0.0)[1].lstrip(".") for p in FLOAT_PATHS}
    assert {"measure.window", "measure.warmup", "study.heartbeat", "study.deadline",
            "chaos.pattern.every", "chaos.pattern.burst", "parameters[0].low",
            "parameters[0].high", "parameters[0].step", "parameters[0].values[0]",
            "target.kubernetes.rollout_timeout", "measure.schedtrace",
            "baseline.params.GOMAXPROCS", "study.enqueue[0].GOMAXPROCS",
            "objective.minimize.p99", "target.local.cpus",
            "measure.noise_guard.max_foreign_cores"} <= shown, sorted(shown)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("path", FLOAT_PATHS, ids=lambda p: ".".join(map(str, p)))
def test_nan_and_infinities_are_refused_in_every_float_field(path: FieldPath,
                                                             value: float) -> None:
    doc, shown = _put(copy.deepcopy(BASE), path, value)
    where = shown.lstrip(".")
    problems = _problems(doc)
    mine = [p for p in problems if p.startswith(f"{where}: ")]
    assert mine, problems
    assert all("must be a finite number" in p for p in mine), mine


@pytest.mark.parametrize("raw", [".NaN", ".Inf", "-.INF", "'nan'", "'inf'",
                                 "1" + "0" * 400 + "s"],  # a number that overflows to infinity
                         ids=["NaN", "Inf", "-INF", "text-nan", "text-inf", "huge"])
def test_non_finite_durations_in_any_spelling_are_refused(raw: str) -> None:
    text = yaml.safe_dump(BASE).replace("window: 8s", f"window: {raw}")
    assert f"window: {raw}" in text
    problems = _problems(text)
    assert any(p.startswith("measure.window: ") for p in problems), problems


@pytest.mark.parametrize("text", ["nan", "inf", "-Infinity"])
def test_non_finite_numbers_spelled_as_text_are_refused(text: str) -> None:
    doc = _with("measure", noise_guard={"max_foreign_cores": text})
    problems = _problems(doc)
    assert any(p.startswith("measure.noise_guard.max_foreign_cores: must be a number, not the "
                            f"text '{text}'") for p in problems), problems


@pytest.mark.parametrize(("path", "value", "message"), [
    (("parameters", 0, "low"), True, "must be a number, not the boolean true"),
    (("parameters", 0, "high"), "8", "must be a number, not the text '8'"),
    (("parameters", 0, "step"), False, "must be a number, not the boolean false"),
    (("study", "trials"), True, "must be a whole number, not the boolean true"),
    (("study", "trials"), 2.5, "must be a whole number"),
])
def test_a_boolean_or_text_where_a_number_belongs_is_refused(
        path: FieldPath, value: object, message: str) -> None:
    """Review finding: pydantic's lax mode made `low: true` the number 1 and `high: "8"` the
    number 8; a YAML boolean or a quoted string where a number belongs is a mistake to name."""
    doc, shown = _put(copy.deepcopy(BASE), path, value)
    problems = _problems(doc)
    assert any(p.startswith(f"{shown.lstrip('.')}: {message}") for p in problems), problems


@pytest.mark.parametrize("path", [("study", "heartbeat"), ("measure", "window"),
                                  ("study", "deadline")])
def test_a_duration_longer_than_a_year_is_refused(path: FieldPath) -> None:
    doc, _ = _put(copy.deepcopy(BASE), path, 1e300)
    problems = _problems(doc)
    assert any(p.startswith(f"{'.'.join(map(str, path))}: must be at most 365d")
               for p in problems), problems


@pytest.mark.parametrize(("low", "high"), [(-1e308, 1e308), (0, 2.0 ** 60)])
def test_a_range_too_wide_to_sample_exactly_is_refused(low: float, high: float) -> None:
    doc = copy.deepcopy(BASE)
    doc["parameters"].append({"name": "x", "env": "X", "type": "float", "low": low,
                              "high": high})
    doc["target"]["simulated"]["optimum"]["x"] = 1.0
    problems = _problems(doc)
    assert any(p.startswith("parameters[2].high: must be within ±2^53") for p in problems), \
        problems


# --- Go settings Go would ignore or refuse ------------------------------------------------------

def _go(*parameters: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """An experiment on a local target tuning ``parameters`` (only validated: nothing starts)."""
    return {
        "name": "go",
        "target": {"local": {"cpus": 1.0, **({"env": env} if env else {})}},
        "parameters": list(parameters),
        "chaos": {"stress": {"workers": 1}},
        "metrics": {"p99": "x"},
        "objective": {"minimize": "p99"},
    }


FORCEGC = {"name": "gc", "env": "FORCEGC_INTERVAL_MS", "type": "int", "values": [0, 500]}
"""A parameter that is not a Go runtime setting."""

GO_REFUSED = [
    ("GOMAXPROCS range below 1 and huge",
     _go({"name": "GOMAXPROCS", "type": "int", "low": -4, "high": 100000}),
     ["parameters[0].low: -4 is not a value Go takes for GOMAXPROCS: allowed: an integer from "
      "1 to 1024",
      "parameters[0].high: 100000 is not a value Go takes for GOMAXPROCS: allowed: an integer "
      "from 1 to 1024"]),
    ("GOMAXPROCS zero in values", _go({"name": "GOMAXPROCS", "type": "int", "values": [0, 2]}),
     ["parameters[0].values[0]: 0 is not a value Go takes for GOMAXPROCS"]),
    ("GOMAXPROCS by env", _go({"name": "procs", "env": "GOMAXPROCS", "type": "int", "low": 0,
                               "high": 4}),
     ["parameters[0].low: 0 is not a value Go takes for GOMAXPROCS"]),
    ("GOMAXPROCS float", _go({"name": "GOMAXPROCS", "type": "float", "low": 1, "high": 4}),
     ["parameters[0].type: GOMAXPROCS takes integers: use type int"]),
    ("GOMAXPROCS text", _go({"name": "GOMAXPROCS", "type": "categorical",
                             "values": ["auto", "2"]}),
     ["parameters[0].values[0]: 'auto' is not a value Go takes for GOMAXPROCS"]),
    ("GOGC negative", _go({"name": "GOGC", "type": "int", "low": -1, "high": 400}),
     ["parameters[0].low: -1 is not a value Go takes for GOGC: allowed: an integer from 0 to "
      "2147483647, or off"]),
    ("GOGC beyond int32", _go({"name": "GOGC", "type": "int", "values": [100, 3000000000]}),
     ["parameters[0].values[1]: 3000000000 is not a value Go takes for GOGC"]),
    ("GOGC OFF", _go({"name": "GOGC", "type": "categorical", "values": ["OFF", 100]}),
     ["parameters[0].values[0]: 'OFF' is not a value Go takes for GOGC"]),
    ("GOGC float", _go({"name": "GOGC", "type": "float", "low": 10, "high": 1000}),
     ["parameters[0].type: GOGC takes integers: use type int"]),
    ("GOMEMLIMIT without IEC unit",
     _go({"name": "GOMEMLIMIT", "type": "categorical", "values": ["64M", "128MB", "1.5GiB"]}),
     ["parameters[0].values[0]: '64M' is not a value Go takes for GOMEMLIMIT: allowed: a byte "
      "count",
      "parameters[0].values[1]: '128MB' is not a value Go takes for GOMEMLIMIT",
      "parameters[0].values[2]: '1.5GiB' is not a value Go takes for GOMEMLIMIT"]),
    ("GOMEMLIMIT overflow",
     _go({"name": "GOMEMLIMIT", "type": "categorical", "values": ["9999999TiB", "off"]}),
     ["parameters[0].values[0]: '9999999TiB' is not a value Go takes for GOMEMLIMIT"]),
    ("GOMEMLIMIT range meant in MiB",
     _go({"name": "GOMEMLIMIT", "type": "int", "low": 64, "high": 512}),
     ["parameters[0].low: 64 is not a value Go takes for GOMEMLIMIT",
      "parameters[0].high: 512 is not a value Go takes for GOMEMLIMIT"]),
    ("GOMEMLIMIT float", _go({"name": "GOMEMLIMIT", "type": "float", "low": 1e8, "high": 1e9}),
     ["parameters[0].type: GOMEMLIMIT takes integers: use type int (bytes) or categorical"]),
    # Go reads only the upper-case names: the whole study would run Go's defaults.
    ("gomaxprocs lower case", _go({"name": "gomaxprocs", "type": "int", "values": [1, 2]}),
     ["parameters[0].name: Go reads GOMAXPROCS, not gomaxprocs (environment variables are "
      "case-sensitive): write name: GOMAXPROCS"]),
    ("Gogc by env", _go({"name": "gc", "env": "Gogc", "type": "int", "values": [100, 400]}),
     ["parameters[0].env: Go reads GOGC, not Gogc"]),
    # Review: an exported env file is one VAR=value a line; a value with a line break added one.
    ("line break in a value", _go({"name": "MODE", "type": "categorical",
                                   "values": ["a", "x\nLD_PRELOAD=/tmp/e.so"]}),
     ["parameters[0].values[1]: 'x\\nLD_PRELOAD=/tmp/e.so' has a line break or a control "
      "character"]),
    ("local env GOMEMLIMIT",
     _go(FORCEGC, env={"GOMEMLIMIT": "64M"}),
     ["target.local.env.GOMEMLIMIT: '64M' is not a value Go takes for GOMEMLIMIT"]),
    ("local env GOMAXPROCS",
     _go(FORCEGC, env={"GOMAXPROCS": "-4"}),
     ["target.local.env.GOMAXPROCS: '-4' is not a value Go takes for GOMAXPROCS"]),
]


@pytest.mark.parametrize(("doc", "expected"), [(d, e) for _, d, e in GO_REFUSED],
                         ids=[c[0] for c in GO_REFUSED])
def test_go_values_outside_what_go_takes_are_refused(doc: dict[str, Any],
                                                     expected: list[str]) -> None:
    problems = _problems(doc)
    for text in expected:
        assert any(p.startswith(text) for p in problems), (text, problems)


GO_ACCEPTED = [
    ("GOMAXPROCS 1..1024", _go({"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 1024})),
    ("GOMAXPROCS values", _go({"name": "GOMAXPROCS", "type": "categorical",
                               "values": [1, "2", 4]})),
    ("GOGC 0 and off", _go({"name": "GOGC", "type": "categorical", "values": [0, 100, "off"]})),
    ("GOGC log range", _go({"name": "GOGC", "type": "int", "low": 25, "high": 800,
                            "log": True})),
    ("GOMEMLIMIT units", _go({"name": "GOMEMLIMIT", "type": "categorical",
                              "values": ["64MiB", "1GiB", "1048576", "2097152B", "1TiB",
                                         "off"]})),
    ("GOMEMLIMIT bytes", _go({"name": "GOMEMLIMIT", "type": "int", "low": 67108864,
                              "high": 536870912, "step": 67108864})),
    ("local env", _go(FORCEGC,
                      env={"GOMEMLIMIT": "off", "GOMAXPROCS": "2", "GOGC": "off"})),
]


@pytest.mark.parametrize("doc", [d for _, d in GO_ACCEPTED], ids=[c[0] for c in GO_ACCEPTED])
def test_go_values_go_takes_are_accepted(doc: dict[str, Any]) -> None:
    parse_experiment(yaml.safe_dump(doc))


def test_a_baseline_outside_the_go_domain_cannot_hide_behind_the_range() -> None:
    doc = _go({"name": "GOMAXPROCS", "type": "int", "low": 1, "high": 8})
    doc["baseline"] = {"params": {"GOMAXPROCS": -4}}
    assert any(p.startswith("baseline.params.GOMAXPROCS: -4 is not a value of the parameter")
               for p in _problems(doc))


# --- periods the platform cannot deliver ---------------------------------------------------------

PERIODS_REFUSED = [
    ("pulses of milliseconds", _with("chaos.pattern", every="2ms", burst="1ms"),
     ["chaos.pattern.burst: 1ms is shorter than 1s",
      "chaos.pattern.every: must be at least 1s longer than burst"]),
    ("no pause between bursts", _with("chaos.pattern", every="1500ms", burst="1s"),
     ["chaos.pattern.every: must be at least 1s longer than burst"]),
    ("burst longer than every", _with("chaos.pattern", every="2s", burst="3s"),
     ["chaos.pattern.burst: must be shorter than every"]),
    ("schedtrace flood", _with("measure", schedtrace=0.0001),
     ["measure.schedtrace: 0.1ms is outside 100ms..500ms"]),
    ("schedtrace zero", _with("measure", schedtrace="0s"),
     ["measure.schedtrace: 0ms is outside 100ms..500ms"]),
    ("schedtrace too coarse", _with("measure", schedtrace="2s"),
     ["measure.schedtrace: 2s is outside 100ms..500ms"]),
]


@pytest.mark.parametrize(("doc", "expected"), [(d, e) for _, d, e in PERIODS_REFUSED],
                         ids=[c[0] for c in PERIODS_REFUSED])
def test_periods_the_platform_cannot_deliver_are_refused(doc: dict[str, Any],
                                                         expected: list[str]) -> None:
    problems = _problems(doc)
    for text in expected:
        assert any(p.startswith(text) for p in problems), (text, problems)


@pytest.mark.parametrize("doc", [
    _with("chaos.pattern", every="2s", burst="1s"),  # the cluster tests' pattern
    {**_with("chaos.pattern", every="30s", burst="5s"),
     "measure": {"warmup": "1s", "window": "60s", "load": {"metric": "p99"}}},
    _with("measure", schedtrace=True),
    _with("measure", schedtrace="100ms"),
    _with("measure", schedtrace="250ms"),
    _with("measure", schedtrace="500ms"),
], ids=["2s-1s", "30s-5s", "schedtrace-true", "100ms", "250ms", "500ms"])
def test_periods_the_platform_delivers_are_accepted(doc: dict[str, Any]) -> None:
    parse_experiment(yaml.safe_dump(doc))


@pytest.mark.parametrize(("env", "value"), [("GOGC", "+50"), ("GOMAXPROCS", "+4")])
def test_a_plus_sign_go_ignores_is_refused(env: str, value: str) -> None:
    """Review finding: Go's runtime atoi takes no "+", so GOGC=+50 runs as GOGC=100."""
    from autotune.experiment.checks import go_value_fits

    assert not go_value_fits(env, value)
    assert go_value_fits(env, value.lstrip("+"))


def test_a_duration_of_hundreds_of_digits_is_a_message_not_a_crash() -> None:
    from autotune.experiment.durations import parse_duration

    with pytest.raises(ValueError, match="too large"):
        parse_duration(10 ** 400)


@pytest.mark.parametrize("value", [0, "0s"])
def test_a_zero_timeout_is_refused_before_anything_starts(value: object) -> None:
    """Review finding: `prometheus.timeout: 0` and the load generator's `timeout: 0` validated,
    and then every trial failed (the generator refuses a zero timeout; no query can answer in
    0 s)."""
    doc, _ = _put(copy.deepcopy(BASE), ("prometheus", "timeout"), value)
    assert "prometheus.timeout: must be > 0.0" in _problems(doc)
    local = yaml.safe_load((Path(__file__).parents[2] / "experiments" / "local.yaml").read_text())
    local["target"]["local"]["load"]["timeout"] = value
    assert "target.local.load.timeout: must be > 0.0" in _problems(local)


@pytest.mark.parametrize("value", [0, "0s"])
def test_a_zero_scrape_interval_is_refused(value: object) -> None:
    """Review finding: `prometheus.scrape_interval: 0` validated; the private Prometheus would
    then have scraped every millisecond (rounded up to 1 ms), loading the host it measures."""
    doc, _ = _put(copy.deepcopy(BASE), ("prometheus", "scrape_interval"), value)
    assert "prometheus.scrape_interval: must be > 0.0" in _problems(doc)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
@pytest.mark.parametrize("flag", ["--cpus", "--ready-timeout"])
def test_init_refuses_a_number_that_is_not_finite_and_positive(
        flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Review finding: `init --cpus nan` crashed with a traceback (exit 3, "a bug"), and
    `--cpus -1` was reported against fields of the generated file, not the flag typed."""
    from autotune.cli import main

    code = main(["init", "--command", "./svc -addr 127.0.0.1:{port}", "--url",
                 "http://127.0.0.1:1", flag, value, "-o", "/nonexistent/x.yaml"])
    assert code == 2
    assert f"argument {flag}: must be a finite number > 0" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--deployment", "shop/api"], "--deployment needs --prometheus URL"),
    (["--deployment", "badformat", "--prometheus", "http://127.0.0.1:1"], "write NAMESPACE/NAME"),
    (["--deployment", "shop/api/x", "--prometheus", "http://127.0.0.1:1"], "write NAMESPACE/NAME"),
    # Review finding (a first-time user): the options below were dropped without a word, or
    # checked only after the cluster was asked (exit 1, naming a field of an unwritten file).
    (["--command", "./svc -addr 127.0.0.1:8080", "--url", "http://127.0.0.1:1"],
     "--command must contain {port}"),
    (["--command", "./svc -addr 127.0.0.1:{port}", "--prometheus", "http://127.0.0.1:1"],
     "--prometheus: only with --deployment"),
    (["--deployment", "shop/api", "--prometheus", "http://127.0.0.1:1", "--cpus", "2"],
     "--cpus: only with --command"),
    (["--deployment", "shop/api", "--prometheus", "http://127.0.0.1:1", "--name", "My Service"],
     "--name: 'My Service' does not match"),
    (["--deployment", "shop/api", "--prometheus", "notaurl"],
     "--prometheus: must start with http:// or https://"),
])
def test_init_calls_a_bad_deployment_flag_a_bad_command_line(
        argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Review finding: these exited 1 (a configuration problem), not 2 (a bad command line).
    No cluster is asked: KUBECONFIG names none."""
    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    assert main(["init", *argv]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("field", "value"), [
    ("namespace", "../../etc"), ("namespace", "Shop"), ("deployment", "API Server/x"),
    ("deployment", "api/../../x"), ("container", "Api_1"), ("namespace", "a" * 64)])
def test_kubernetes_names_the_api_server_would_refuse_are_refused_here(field: str,
                                                                      value: str) -> None:
    """Review finding: any text validated; the namespace and Deployment also name the saved
    original's file (results/<name>/original-env.<namespace>.<deployment>.json), so ``../..``
    pointed it outside the results directory."""
    doc = yaml.safe_load(Path("experiments/api.yaml").read_text())
    doc["target"]["kubernetes"][field] = value
    assert any(p.startswith(f"target.kubernetes.{field}:") for p in _problems(doc)), \
        _problems(doc)


def test_what_run_would_refuse_is_refused_by_validate() -> None:
    """Review finding: these validated ("valid", exit 0) and failed only once the run had
    started: a storage URL whose port is not a number (then a traceback, exit 3), load
    headers the generator refuses, and a Prometheus URL with a password next to a token."""
    doc = copy.deepcopy(BASE)
    doc["study"]["storage"] = "postgresql://u:CANARYpw@db:bad/autotune"
    problems = _problems(doc)
    assert any(p.startswith("study.storage: not a database URL") for p in problems), problems
    assert not any("CANARYpw" in p for p in problems)

    local = yaml.safe_load(Path("experiments/local.yaml").read_text())
    local["target"]["local"]["load"]["headers"] = {"Bad Name": "v", "X-A": "a\nb"}
    problems = _problems(local)
    assert "target.local.load.headers: 'Bad Name' is not a valid HTTP header name" in problems
    assert any(p.startswith("target.local.load.headers.X-A: the value has a line break")
               for p in problems), problems

    api = yaml.safe_load(Path("experiments/api.yaml").read_text())
    api["prometheus"]["url"] = "https://u:CANARYpw@prom.example:9090"
    api["prometheus"]["headers"] = {"Authorization": "Bearer x"}
    problems = _problems(api)
    assert any(p.startswith("prometheus.url has a user and password") for p in problems)
    assert not any("CANARYpw" in p for p in problems)


def test_init_refuses_an_output_directory_that_is_not_there_before_starting_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review finding: `init -o /missing/dir/x.yaml` started and probed the service, then
    failed writing with a traceback (exit 3, "a bug")."""
    from autotune.cli import main

    started = tmp_path / "started"
    code = main(["init", "--command", f"touch {started} {{port}}", "-o",
                 str(tmp_path / "missing" / "x.yaml")])
    assert code == 2 and "missing is not a directory" in capsys.readouterr().err
    assert not started.exists(), "the command ran"


def test_cleanup_force_without_a_namespace_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Review finding: `cleanup --force FILE` ignored --force silently."""
    from autotune.cli import main

    assert main(["cleanup", "--force", "experiments/local.yaml"]) == 2
    assert "--force goes with --namespace" in capsys.readouterr().err
    assert main(["cleanup"]) == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["--cpus", "300"], "--cpus: must be <= 256.0"),
    (["--path", "api"], "--path: must start with /"),
    (["--health", "ready"], "--health: 'ready' does not match ^/"),
    (["--metrics-path", "metrics"], "--metrics-path: 'metrics' does not match ^/"),
    (["--forcegc-env", "1GC"], "--forcegc-env: '1GC' does not match"),
    (["--name", "My Service"], "--name: 'My Service' does not match"),
])
def test_init_names_the_option_the_file_would_refuse_before_it_starts_the_service(
        argv: list[str], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Review finding: `init --cpus 300` started the service, waited for its /metrics and then
    reported `target.local.cpus`, a field of a file the user had not written yet."""
    from autotune.cli import main

    started = tmp_path / "started"
    code = main(["init", "--command", f"sh -c 'touch {started}' {{port}}", *argv, "-o",
                 str(tmp_path / "x.yaml")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"autotune init: error: {message}" in err
    assert "target.local" not in err and not started.exists(), "the command ran"


def test_init_still_says_what_the_command_lacks_in_its_own_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Review finding: the draft checked first reported `target.local.port`, a field of the
    file, instead of how to write --command."""
    from autotune.cli import main

    assert main(["init", "--command", "./server -addr :8080", "-o", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    # a usage error, said as init's other option errors are (it was exit 1, an environment's)
    assert "autotune init: error: --command must contain {port}" in err
    assert "target.local" not in err
    # Review finding: without -o the file's name is read from --command first, whose open
    # quote was an internal error (exit 3, a traceback).
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--command", "./server 'x {port}"]) == 2
    assert "autotune init: error: --command: No closing quotation" in capsys.readouterr().err


@pytest.mark.parametrize("spec", [{"query": ""}, {"unit": "1/s"}])
def test_a_metric_mapping_without_its_query_is_told_what_it_lacks_not_its_form(
        spec: dict[str, str]) -> None:
    """Review finding (a first-time user): "must be text (in quotes ...)" came first, as if the
    documented mapping form were the mistake."""
    doc = copy.deepcopy(BASE)
    doc["metrics"]["errs"] = spec
    assert _problems(doc) == ["metrics.errs: give exactly one of query (PromQL) and schedtrace"]


def test_a_yaml_error_names_what_was_being_parsed_and_where_it_began() -> None:
    """Review finding: an unclosed quote on line 1 was reported at the file's end alone."""
    [problem] = _problems("name: 'absurd\ntarget:\n  simulated: {}\n")
    assert problem.startswith("line 4, column 1: YAML syntax error: found unexpected end of "
                              "stream (while scanning a quoted scalar that began at line 1, "
                              "column 7)"), problem
