"""Exports: the kustomize patch is a valid Deployment patch that applies cleanly."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from kubernetes_validate.utils import schema_contents

from autotune.experiment import Setting
from autotune.report import FORMATS, Report, build_report, export
from tests.report.builder import Builder, experiment, m

K8S = kubernetes_validate.latest_version()

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop, labels: {app: api}}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
        - name: api
          image: registry.example/api:1.4.2
          resources: {limits: {cpu: "1"}}
          env:
            - {name: LOG_LEVEL, value: info}
            - {name: GOMAXPROCS, value: "8"}
            - {name: GOGC, value: "100"}
        - name: proxy
          image: registry.example/proxy:2.0
          env:
            - {name: GOMAXPROCS, value: "1"}
"""


# --- a small strategic merge (merge key "name", `$patch: delete`), enough for env lists ---------

def strategic_merge(original: Any, patch: Any) -> Any:
    if isinstance(original, dict) and isinstance(patch, dict):
        out = dict(original)
        for key, value in patch.items():
            if value is None:  # null deletes the field
                out.pop(key, None)
                continue
            out[key] = strategic_merge(original[key], value) if key in original else \
                _strip_directives(value)
        return out
    if isinstance(original, list) and isinstance(patch, list) and all(
            isinstance(p, dict) and "name" in p for p in patch):
        merged = [copy.deepcopy(o) for o in original]
        for item in patch:
            index = next((i for i, o in enumerate(merged) if o.get("name") == item["name"]), None)
            if item.get("$patch") == "delete":
                if index is not None:
                    del merged[index]
            elif index is None:
                merged.append(_strip_directives(item))
            else:
                merged[index] = strategic_merge(merged[index], item)
        return merged
    return _strip_directives(patch)


def _strip_directives(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip_directives(v) for k, v in x.items()
                if not k.startswith("$") and v is not None}
    if isinstance(x, list):
        return [_strip_directives(v) for v in x]
    return x


def test_the_test_merge_follows_strategic_merge_semantics() -> None:
    original = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    patch = {"env": [{"name": "B", "$patch": "delete"}, {"name": "A", "value": "3"},
                     {"name": "C", "value": "4"}]}
    assert strategic_merge(original, patch) == {
        "env": [{"name": "A", "value": "3"}, {"name": "C", "value": "4"}]}


def patch_schema_errors(patch: dict[str, Any]) -> list[str]:
    """Errors of the patch against the strict Deployment schema, except missing required fields
    (a patch names only what it changes) and the `$patch` directive (not an API field)."""
    version = f"v{K8S}-local-strict"
    schema = schema_contents(f"kubernetes-json-schema/{version}/deployment-apps-v1.json", K8S)
    defs = schema_contents(f"kubernetes-json-schema/{version}/_definitions.json", K8S)
    registry: referencing.Registry[Any] = (
        referencing.Resource.from_contents(schema)
        @ (referencing.Resource.from_contents(defs) @ referencing.Registry()))
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [e.message for e in validator.iter_errors(_strip_directives(patch))
            if e.validator != "required"]


def test_the_schema_check_catches_mistakes() -> None:
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
           "spec": {"template": {"spec": {"containers": [
               {"name": "api", "env": [{"name": "GOGC", "value": 400}], "envv": []}]}}}}
    errors = patch_schema_errors(bad)
    assert any("400" in e for e in errors) and any("envv" in e for e in errors)


# --- tests ---------------------------------------------------------------------------------------

def _patch(report: Report, experiment_name: str = "golden") -> dict[str, Any]:
    text, code = export(report, "kustomize")
    assert code == 0, text
    assert text.startswith(f"# autotune recommendation for {experiment_name}")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def _with_unset(report: Report, variable: str) -> Report:
    """The golden recommendation with one variable to be left unset (``None``)."""
    best = report.candidates[0]
    name = next(p.name for p in report.parameters if p.env == variable)
    changed = dataclasses.replace(best, settings={**best.settings, name: None},
                                  env={**best.env, variable: None})
    return dataclasses.replace(report, candidates=(changed, *report.candidates[1:]))


def test_kustomize_patch_is_a_valid_deployment_patch(golden: tuple[Builder, Report]) -> None:
    patch = _patch(golden[1])
    assert patch["apiVersion"] == "apps/v1" and patch["kind"] == "Deployment"
    assert patch["metadata"] == {"name": "api", "namespace": "shop"}
    containers = patch["spec"]["template"]["spec"]["containers"]
    assert containers == [{"name": "api", "env": [
        {"name": "GOMAXPROCS", "value": "2", "valueFrom": None},
        {"name": "GOGC", "value": "400", "valueFrom": None}]}]
    assert patch_schema_errors(patch) == []


def test_a_variable_production_sets_by_reference_gets_the_value_alone(
        golden: tuple[Builder, Report]) -> None:
    # Review finding: merged into `GOMAXPROCS: valueFrom: resourceFieldRef: limits.cpu`, a bare
    # value left an entry with both, which the API server refuses (a failed sync at 3 a.m.).
    deployment = yaml.safe_load(DEPLOYMENT)
    api = deployment["spec"]["template"]["spec"]["containers"][0]
    api["env"][1] = {"name": "GOMAXPROCS", "valueFrom": {
        "resourceFieldRef": {"containerName": "api", "resource": "limits.cpu"}}}
    patched = strategic_merge(deployment, _patch(golden[1]))
    env = patched["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "LOG_LEVEL", "value": "info"}, {"name": "GOMAXPROCS", "value": "2"},
                   {"name": "GOGC", "value": "400"}]


def test_kustomize_patch_applies_cleanly(golden: tuple[Builder, Report]) -> None:
    deployment = yaml.safe_load(DEPLOYMENT)
    patched = strategic_merge(deployment, _patch(_with_unset(golden[1], "GOGC")))
    assert kubernetes_validate.validate(patched, K8S, strict=True)
    api, proxy = patched["spec"]["template"]["spec"]["containers"]
    assert api["env"] == [{"name": "LOG_LEVEL", "value": "info"},
                          {"name": "GOMAXPROCS", "value": "2"}]
    assert api["image"] == "registry.example/api:1.4.2"
    assert proxy == deployment["spec"]["template"]["spec"]["containers"][1]
    assert patched["spec"]["selector"] == deployment["spec"]["selector"]


def test_unset_becomes_a_delete_directive(golden: tuple[Builder, Report]) -> None:
    patch = _patch(_with_unset(golden[1], "GOGC"))
    env = patch["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "GOGC", "$patch": "delete"} in env
    assert patch_schema_errors(patch) == []


def test_applies_to_the_shipped_example_deployment(tmp_path: Path) -> None:
    """experiments/api.yaml's recommendation applied to experiments/api-deployment.yaml."""
    root = Path(__file__).parents[2] / "experiments"
    deployment = next(d for d in yaml.safe_load_all((root / "api-deployment.yaml").read_text())
                      if d and d.get("kind") == "Deployment")
    b = Builder(experiment((root / "api.yaml").read_text()), tmp_path)
    base = b.exp.baseline_settings()
    best: dict[str, Setting] = {"GOMAXPROCS": 1, "GOGC": 400, "forcegc_interval_ms": 2000}
    for i, (v, w) in enumerate([(0.030, 0.004), (0.028, 0.0041), (0.033, 0.0039)], start=1):
        b.add("reference", "confirm", base, m(v), candidate="baseline", round=i)
        b.add("reference", "confirm", best, m(w), candidate=0, round=i)
    b.add("search", "search", best, m(0.004))
    report = build_report(b.exp, b.studies)
    assert report.verdict == "adopt"
    patch = _patch(report, "api-gomaxprocs-forcegc")
    assert patch["metadata"] == {"name": deployment["metadata"]["name"],
                                 "namespace": deployment["metadata"]["namespace"]}
    assert patch_schema_errors(patch) == []
    patched = strategic_merge(deployment, patch)
    assert kubernetes_validate.validate(patched, K8S, strict=True)
    before = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    after = patched["spec"]["template"]["spec"]["containers"][0]["env"]
    assert after == [*before, {"name": "GOMAXPROCS", "value": "1"},
                     {"name": "GOGC", "value": "400"},
                     {"name": "FORCEGC_INTERVAL_MS", "value": "2000"}]
    # Back to the baseline (both unset): the delete directives restore the original manifest.
    undo = strategic_merge(patched, _patch(_with_unset(_with_unset(_with_unset(
        report, "GOMAXPROCS"), "GOGC"), "FORCEGC_INTERVAL_MS"), "api-gomaxprocs-forcegc"))
    assert undo == deployment


def test_env_file(golden: tuple[Builder, Report]) -> None:
    text, code = export(_with_unset(golden[1], "GOGC"), "env")
    assert code == 0
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["GOMAXPROCS=2"]
    assert "# GOGC unset: remove it from the environment" in text


def test_an_adopt_on_search_measurements_alone_says_so(golden: tuple[Builder, Report]) -> None:
    # Review finding: `run --no-confirm`'s ADOPT (single search measurements, the 20% margin)
    # read like a confirmed one in the file a GitOps step commits.
    unconfirmed = dataclasses.replace(golden[1], evidence="search")
    for fmt in ("env", "kustomize", "helm-values"):
        text, code = export(unconfirmed, fmt)
        assert code == 0 and "# UNCONFIRMED: adopted on search measurements alone" in text
    assert "UNCONFIRMED" not in export(golden[1], "env")[0]


def test_json_and_helm_values(golden: tuple[Builder, Report]) -> None:
    data = json.loads(export(golden[1], "json")[0])
    assert (data["verdict"], data["configuration"], data["forced"]) == ("adopt", "#1", False)
    assert data["env"] == {"GOMAXPROCS": "2", "GOGC": "400"}
    assert data["improvement"]["ci95"][0] > 0
    # The interval's level goes with it: with several candidates each is judged at more than
    # 95% (review finding: a field named ci95 alone read as 95%).
    cmp = next(c for c in golden[1].candidates if c.id == "#1").comparisons[0]
    assert data["improvement"]["confidence"] == cmp.confidence
    text = export(_with_unset(golden[1], "GOGC"), "helm-values")[0]
    assert yaml.safe_load(text) == {"env": [{"name": "GOMAXPROCS", "value": "2"}]}
    # Review finding: layered with -f it would replace the chart's whole env list; it says so.
    assert "REPLACES the chart's whole env" in text


def _keep_current(report: Report) -> Report:
    return dataclasses.replace(report, verdict="keep current", recommendation=None,
                               reason="no candidate is significantly better")


@pytest.mark.parametrize("fmt", FORMATS)
def test_without_adopt_nothing_is_exported_unless_forced(
    golden: tuple[Builder, Report], fmt: str
) -> None:
    report = _keep_current(golden[1])
    text, code = export(report, fmt)
    assert code == 1
    assert "keep current" in text and "--force" in text
    forced, code = export(report, fmt, force=True)
    assert code == 0
    assert "FORCED" in forced if fmt != "json" else json.loads(forced)["forced"] is True


def test_kustomize_needs_a_kubernetes_target(golden: tuple[Builder, Report]) -> None:
    text, code = export(dataclasses.replace(golden[1], deployment=None), "kustomize")
    assert code == 1 and "kubernetes target" in text
    assert export(dataclasses.replace(golden[1], deployment=None), "env")[1] == 0


def test_no_candidate_nothing_to_force(golden: tuple[Builder, Report]) -> None:
    empty = dataclasses.replace(_keep_current(golden[1]), candidates=(), best_candidate=None)
    text, code = export(empty, "env", force=True)
    assert code == 1 and "no candidate" in text


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown export format"):
        export(None, "toml")  # type: ignore[arg-type]
