"""managedfields.given_back: the tuned entries' ownership set back to a record (pure)."""

from __future__ import annotations

import copy
import json
from typing import Any

from autotune.platforms.kubernetes.managedfields import element_path, given_back, owners

Obj = dict[str, Any]
ELEMENT = {".": {}, "f:name": {}, "f:value": {}}


def _entry(manager: str, operation: str, env: Obj, *, api: str = "apps/v1",
           declared: bool = True) -> Obj:
    """``declared``: the entry also owns the container itself (an applier's does)."""
    container: Obj = {".": {}, "f:name": {}} if declared else {}
    fields: Obj = {"f:spec": {"f:template": {"f:spec": {"f:containers": {
        'k:{"name":"api"}': {**container, "f:env": env}}}}}}
    return {"manager": manager, "operation": operation, "apiVersion": api,
            "time": "2026-12-06T01:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}


def test_a_gone_entry_comes_back_with_its_record_and_an_emptied_one_goes() -> None:
    # An applier that declared only this variable of the container (an overlay's patch).
    gitops = _entry("gitops", "Apply", {'k:{"name":"GOMAXPROCS"}': ELEMENT}, declared=False)
    record = owners([gitops], "api", ["GOMAXPROCS", "GOGC"])
    assert record["GOGC"] == [] and record["GOMAXPROCS"][0]["fields"] == ELEMENT
    # After the study: autotune owns the entry, the applier's entry is gone (it owned nothing
    # else here), and the status writer owns an empty map: a leaf, not a parent to prune.
    ours = _entry("autotune", "Update", {'k:{"name":"GOMAXPROCS"}': ELEMENT}, declared=False)
    status = {"manager": "kcm", "operation": "Update", "apiVersion": "apps/v1",
              "subresource": "status", "fieldsType": "FieldsV1",
              "fieldsV1": {"f:status": {"f:replicas": {}}, "f:metadata": {}}}
    live = [ours, copy.deepcopy(status)]
    back = given_back(live, "api", record)
    assert back is not None
    assert [e["manager"] for e in back] == ["kcm", "gitops"]
    assert back[0] == status
    assert back[1]["fieldsV1"] == gitops["fieldsV1"] and back[1]["time"] == gitops["time"]
    assert given_back(back, "api", record) is None, "nothing left to give back"


def test_an_applier_is_the_same_entry_whatever_api_version_it_applied_with() -> None:
    old = _entry("gitops", "Apply", {'k:{"name":"GOMAXPROCS"}': ELEMENT}, api="apps/v1beta2")
    record = owners([old], "api", ["GOMAXPROCS"])
    now = _entry("gitops", "Apply", {'k:{"name":"LOG_LEVEL"}': ELEMENT})
    back = given_back([now], "api", record)
    assert back is not None and len(back) == 1
    env = back[0]["fieldsV1"]
    for step in element_path("api", "GOMAXPROCS")[:-1]:
        env = env[step]
    assert set(env) == {'k:{"name":"LOG_LEVEL"}', 'k:{"name":"GOMAXPROCS"}'}


def test_a_malformed_owners_record_costs_the_ownership_not_the_restore() -> None:
    """The annotation is anyone's to edit who may patch the Deployment: a record autotune
    cannot read leaves the env's restore alone (Original.of would otherwise refuse it)."""
    from autotune.platforms.kubernetes.envpatch import Original

    saved = Original(container="api", env={"GOMAXPROCS": {"name": "GOMAXPROCS", "value": "8"}},
                     study="s", saved_at="t", owners={"GOMAXPROCS": [
                         {"manager": "gitops", "operation": "Apply", "apiVersion": "apps/v1",
                          "fields": ELEMENT}]})
    assert Original.from_json(saved.to_json()) == saved
    data = json.loads(saved.to_json())
    data["owners"] = {"GOMAXPROCS": ["x", {"manager": 1, "fields": {}}, {"manager": "m"},
                                     {"manager": "m", "operation": "Patch",
                                      "apiVersion": "apps/v1", "fields": {}}],
                      "GOGC": "y"}
    found = Original.from_json(json.dumps(data))
    assert found.env == saved.env and found.owners == {"GOMAXPROCS": []}
    data["owners"] = ["z"]
    assert Original.from_json(json.dumps(data)).owners == {}
