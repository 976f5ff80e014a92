"""deploy/ as kustomize renders it (issue 18): the base (deploy/base, `kubectl kustomize deploy/`)
and the example overlay (deploy/overlays/example), built by the real kustomize
(scripts/kustomize.sh builds it from its Go module). One namespace set in one place, the
experiment where the CronJob's command reads it, exactly the rights the experiment needs, the
report's one-liner in deploy/README.md pointing where the manifests write, and every rendered
object accepted by the real kube-apiserver (server-side dry run) of the test control plane."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from autotune.cli import main
from autotune.experiment import Experiment, parse_experiment
from autotune.platforms.kubernetes.permissions import (
    CAPTURE_NEEDED,
    CLUSTER_NEEDED,
    LOAD_NEEDED,
    NEEDED,
    SCHEDTRACE_NEEDED,
    Permission,
    needed,
)
from autotune.study.storage import results_dir
from tests.controlplane.cluster import Admin, ApiFailure
from tests.kubernetes.conftest import Plane

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE, OVERLAY = DEPLOY / "base", DEPLOY / "overlays" / "example"
REPORT = "report.html"
"""What autotune/report/write.py names the HTML report, in results_dir(experiment)."""
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}
NOT_SERVED_SKIPPED = {"PodMonitor", "ServiceMonitor"}
"""Prometheus Operator kinds: the test control plane has no such CRD, so the dry run leaves
these (and only these) out when an overlay renders one."""
Obj = dict[str, Any]


# --- kustomize --------------------------------------------------------------------------------

@cache
def _kustomize() -> Path:
    """The binary scripts/kustomize.sh built (`make controlplane` does), or built now (~2 min
    the first time on a machine)."""
    script = str(ROOT / "scripts" / "kustomize.sh")
    found = subprocess.run([script, "--where"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        found = subprocess.run([script], capture_output=True, text=True, check=False)
        if found.returncode != 0:
            pytest.fail(f"scripts/kustomize.sh failed: {found.stderr[-2000:]}")
    return Path(found.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Rendered:
    objects: list[Obj]

    def kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str) -> Obj:
        [found] = self.kind(kind)
        return found

    @property
    def namespace(self) -> str:
        return str(self.one("CronJob")["metadata"]["namespace"])

    @property
    def pod(self) -> Obj:
        spec: Obj = self.one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec

    @property
    def container(self) -> Obj:
        [container] = self.pod["containers"]
        return dict(container)

    def mount(self, volume_key: str) -> tuple[Obj, Obj]:
        """The pod's volume with ``volume_key`` (configMap, persistentVolumeClaim) and the
        container's mount of it."""
        [volume] = [v for v in self.pod["volumes"] if volume_key in v]
        [mount] = [m for m in self.container["volumeMounts"] if m["name"] == volume["name"]]
        return volume, mount

    def experiment(self) -> tuple[PurePosixPath, Experiment]:
        """The file the CronJob's command reads, and the experiment the pod finds there."""
        volume, mount = self.mount("configMap")
        [config] = [c for c in self.kind("ConfigMap")
                    if c["metadata"]["name"] == volume["configMap"]["name"]]
        path = PurePosixPath(self.container["args"][1])
        assert path.parent == PurePosixPath(mount["mountPath"]), (
            f"the command reads {path}, the experiment is mounted at {mount['mountPath']}")
        assert path.name in config["data"], f"no key {path.name} in {config['metadata']['name']}"
        return path, parse_experiment(config["data"][path.name])


def _render(path: Path) -> Rendered:
    out = subprocess.run([str(_kustomize()), "build", str(path)], capture_output=True,
                         text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    return Rendered([d for d in yaml.safe_load_all(out.stdout) if d])


@cache
def _base() -> Rendered:
    return _render(BASE)


@cache
def _overlay() -> Rendered:
    return _render(OVERLAY)


def _namespaces(node: Any) -> Iterator[str]:
    """Every ``namespace`` field anywhere in an object (metadata, subjects, ...)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "namespace" and isinstance(value, str):
                yield value
            yield from _namespaces(value)
    elif isinstance(node, list):
        for item in node:
            yield from _namespaces(item)


def _docs(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _ids(objects: list[Obj]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def _grants(role: Obj) -> set[tuple[str, str, str]]:
    return {(verb, group, resource) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def _table(permissions: tuple[Permission, ...]) -> set[tuple[str, str, str]]:
    return {(p.verb, p.kind.group, p.kind.plural) for p in permissions}


# --- the base ---------------------------------------------------------------------------------

def test_the_base_renders_the_nightly_manifests_in_one_namespace() -> None:
    base = _base()
    assert _render(DEPLOY).objects == base.objects, "`kubectl kustomize deploy/` is the base"
    shipped = _docs(BASE / "rbac.yaml") + _docs(BASE / "cronjob.yaml")
    assert _ids(base.objects) == _ids(shipped) | {
        ("ConfigMap", base.one("ConfigMap")["metadata"]["name"])}
    # The ClusterRole: access reviews for `validate --cluster`, `get nodes` for the fingerprint.
    assert base.one("ClusterRole")["rules"] == [
        {"apiGroups": [p.kind.group], "resources": [p.kind.plural], "verbs": [p.verb]}
        for p in CLUSTER_NEEDED]
    assert _grants(base.one("Role")) == _table(NEEDED), "no optional right in the base"
    [namespace] = {n for o in base.objects for n in _namespaces(o)}
    _path, exp = base.experiment()
    assert exp.target.kubernetes is not None
    assert namespace == exp.target.kubernetes.namespace == "shop", (
        "the Role must be where the experiment's Deployment is")
    # Left out on purpose (deploy/base/kustomization.yaml says why).
    names = {o["metadata"]["name"] for o in base.objects}
    for left_out in ("postgres-secret.example.yaml", "monitoring.yaml", "rbac-load.yaml",
                     "rbac-capture.yaml", "rbac-schedtrace.yaml"):
        assert not names & {d["metadata"]["name"] for d in _docs(DEPLOY / left_out)}, left_out


def test_the_base_runs_the_repositorys_experiment() -> None:
    """kustomize reads no file outside the kustomization's directory, so the base holds a copy
    of experiments/api.yaml: the same text, or the nightly tunes something else than the
    experiment every other test and document checks."""
    _path, _exp = _base().experiment()
    assert (BASE / "api.yaml").read_text() == (ROOT / "experiments/api.yaml").read_text(), (
        "deploy/base/api.yaml differs from experiments/api.yaml: "
        "cp experiments/api.yaml deploy/base/api.yaml")


def test_the_plain_files_are_the_bases() -> None:
    """deploy/rbac.yaml and deploy/cronjob.yaml (what `kubectl apply -f`, the other tests and
    the code's messages name) are the base's files, not copies."""
    for name in ("rbac.yaml", "cronjob.yaml"):
        assert (DEPLOY / name).resolve() == (BASE / name).resolve()


# --- the overlay ------------------------------------------------------------------------------

def test_the_overlay_moves_every_object_to_its_namespace() -> None:
    overlay, base = _overlay(), _base()
    namespace = overlay.namespace
    assert namespace != base.namespace
    for obj in overlay.objects:
        meta = obj["metadata"]
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, f"{obj['kind']} {meta['name']}"
        else:
            assert meta.get("namespace") == namespace, f"{obj['kind']} {meta['name']}"
        # Subjects, the experiment's target...: nothing points at another namespace.
        assert set(_namespaces(obj)) <= {namespace}, f"{obj['kind']} {meta['name']}"
    assert not re.search(r"\bshop\b(?!-)", json.dumps(overlay.objects))
    # The cluster-scoped objects get names of their own: applying the overlay next to the base
    # must not rebind the base's ClusterRoleBinding to the overlay's ServiceAccount.
    for kind in CLUSTER_SCOPED:
        assert overlay.one(kind)["metadata"]["name"] != base.one(kind)["metadata"]["name"]


@pytest.mark.parametrize("which", ["base", "overlay"])
def test_the_references_hold_after_rendering(which: str) -> None:
    """Whatever kustomize renamed (hash suffix, nameSuffix), every reference follows: the
    experiment's ConfigMap, the claim, the ServiceAccount of the pod and of both bindings, the
    roles the bindings name."""
    r = _base() if which == "base" else _overlay()
    path, exp = r.experiment()
    assert str(path) == r.container["args"][1]
    # Review finding: beside the service, an "update configmaps" (an app's leader election)
    # could rewrite what autotune runs with its rights.
    assert r.one("ConfigMap").get("immutable") is True
    spec = exp.target.kubernetes
    assert spec is not None and spec.namespace == r.namespace
    volume, mount = r.mount("persistentVolumeClaim")
    assert volume["persistentVolumeClaim"]["claimName"] == r.one(
        "PersistentVolumeClaim")["metadata"]["name"]
    assert r.container["workingDir"] == mount["mountPath"], "results/ lands on the PVC"
    sa = r.one("ServiceAccount")["metadata"]
    assert r.pod["serviceAccountName"] == sa["name"]
    for kind, role in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        binding = r.one(kind)
        assert binding["roleRef"]["name"] == r.one(role)["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"],
                                        "namespace": sa["namespace"]}]


def test_the_overlay_grants_what_its_experiment_needs() -> None:
    """The example's experiment turns measure.schedtrace on: the overlay adds
    components/schedtrace, and nothing else, to the base's Role (autotune validate --cluster
    asks the API server for exactly needed(...))."""
    overlay = _overlay()
    _path, exp = overlay.experiment()
    spec = exp.target.kubernetes
    assert spec is not None
    assert _grants(overlay.one("Role")) == _table(needed(
        exp.measure.schedtrace_period is not None, bool(exp.measure.capture),
        spec.load is not None))


def test_the_overlays_experiment_is_valid(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, _exp = _overlay().experiment()
    [config] = _overlay().kind("ConfigMap")
    (tmp_path / path.name).write_text(config["data"][path.name])
    assert main(["validate", str(tmp_path / path.name)]) == 0, capsys.readouterr()


@pytest.mark.parametrize(("component", "table", "plain"), [
    ("schedtrace", SCHEDTRACE_NEEDED, "rbac-schedtrace.yaml"),
    ("capture", CAPTURE_NEEDED, "rbac-capture.yaml"),
    ("load", LOAD_NEEDED, "rbac-load.yaml"),
])
def test_each_component_grants_what_its_plain_file_grants(
        tmp_path: Path, component: str, table: tuple[Permission, ...], plain: str) -> None:
    """An overlay (outside deploy/, as yours would be) with one component: the base's Role
    grows by exactly the permissions table, which the plain rbac-*.yaml grants too."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        # Relative: kustomize takes no absolute path of a base or a component.
        "resources": [os.path.relpath(BASE, tmp_path)],
        "components": [os.path.relpath(DEPLOY / "components" / component, tmp_path)]}))
    role = _render(tmp_path).one("Role")
    assert _grants(role) == _table(NEEDED) | _table(table)
    [plain_role] = [d for d in _docs(DEPLOY / plain) if d["kind"] == "Role"]
    assert _grants(plain_role) == _table(table)


# --- the schemas and the real API server ------------------------------------------------------

@pytest.mark.parametrize("which", ["base", "overlay"])
def test_rendered_objects_match_the_kubernetes_schemas(which: str) -> None:
    version = kubernetes_validate.latest_version()
    for obj in (_base() if which == "base" else _overlay()).objects:
        kubernetes_validate.validate(obj, version, strict=True)


def _resource(admin: Admin, obj: Obj) -> tuple[str, bool] | None:
    """(collection path, namespaced) of ``obj``'s kind, from the API server's discovery; None
    when the server does not serve its group version."""
    api = obj["apiVersion"]
    prefix = f"/api/{api}" if "/" not in api else f"/apis/{api}"
    try:
        found = admin.request("GET", prefix)
    except ApiFailure as e:
        if e.status == 404:
            return None
        raise
    [resource] = [r for r in found["resources"]
                  if r["kind"] == obj["kind"] and "/" not in r["name"]]
    namespaced = bool(resource["namespaced"])
    if namespaced:
        return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{resource['name']}", True
    return f"{prefix}/{resource['name']}", False


def _dry_run(admin: Admin, obj: Obj) -> None:
    """Server-side apply with dryRun=All: the API server validates, defaults and admits the
    object as `kubectl apply --server-side --dry-run=server` would, and stores nothing (the
    control plane already holds the suite's ClusterRole of the same name: apply, not create)."""
    found = _resource(admin, obj)
    if found is None:
        assert obj["kind"] in NOT_SERVED_SKIPPED, f"{obj['apiVersion']} is not served"
        return
    path, _namespaced = found
    applied = admin.request("PATCH", f"{path}/{obj['metadata']['name']}", obj,
                            content_type="application/apply-patch+yaml",
                            params={"fieldManager": "deploy-test", "force": "true",
                                    "dryRun": "All"})
    assert applied["kind"] == obj["kind"]
    assert applied["metadata"]["name"] == obj["metadata"]["name"]


@pytest.fixture
def namespaces(plane: Plane) -> Iterator[list[str]]:
    """Namespaces a test creates for real (a dry run needs its namespace to exist), deleted
    after it and waited for: tests/kubernetes/test_manifests.py creates `shop` again."""
    admin = plane.cp.admin
    created: list[str] = []
    yield created
    for name in created:
        admin.delete(f"/api/v1/namespaces/{name}")
    for name in created:
        admin.wait_for(partial(_gone, admin, f"/api/v1/namespaces/{name}"), 120,
                       f"namespace {name} to go")


def _gone(admin: Admin, path: str) -> bool:
    return admin.get(path) is None


def _namespace(admin: Admin, name: str, created: list[str]) -> None:
    # restricted: the strictest Pod Security level, which the nightly pod and the report's
    # helper pod both meet (a Pod is admitted against it, so the dry runs below check it).
    admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    created.append(name)
    admin.wait_for(lambda: admin.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 30,
                   "the namespace's default ServiceAccount")


def test_the_api_server_accepts_every_rendered_object(plane: Plane,
                                                      namespaces: list[str]) -> None:
    admin = plane.cp.admin
    for rendered in (_base(), _overlay()):
        _namespace(admin, rendered.namespace, namespaces)
        for obj in rendered.objects:
            _dry_run(admin, obj)
        # The Job's pod as the CronJob makes it, admitted at Pod Security level restricted. Its
        # ServiceAccount for real: a pod's admission looks it up (deleted with the namespace).
        sa = rendered.one("ServiceAccount")
        admin.create(f"/api/v1/namespaces/{rendered.namespace}/serviceaccounts", sa)
        _dry_run(admin, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "nightly", "namespace": rendered.namespace}, "spec": rendered.pod})


# --- getting the report -----------------------------------------------------------------------

@dataclass(frozen=True)
class OneLiner:
    argv: list[str]
    overrides: Obj

    def option(self, name: str) -> str:
        for i, arg in enumerate(self.argv):
            if arg == name:
                return self.argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        raise AssertionError(f"no {name} in the README's one-liner")


def _one_liner() -> OneLiner:
    readme = (DEPLOY / "README.md").read_text()
    section = readme.split("\n## Getting the report\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "a ```sh block in deploy/README.md's 'Getting the report'"
    command = block.group(1).replace("\\\n", " ")
    [line] = [c for c in command.splitlines() if c.strip().startswith("kubectl")]
    argv = shlex.split(line)
    assert argv[-2] == ">" or argv[-1].startswith(">"), "the report lands in a local file"
    overrides = json.loads(OneLiner(argv, {}).option("--overrides"))
    return OneLiner(argv, overrides)


def test_the_readmes_one_liner_reads_the_report_where_the_cronjob_writes_it() -> None:
    base, cmd = _base(), _one_liner()
    assert cmd.argv[:4] == ["kubectl", "-n", base.namespace, "run"]
    assert {"--rm", "--attach", "--quiet"} <= set(cmd.argv), (
        "the pod goes away, and only the report reaches stdout")
    spec = cmd.overrides["spec"]
    [container] = spec["containers"]
    assert cmd.option("--image") == container["image"] == base.container["image"]
    # The same PVC, mounted where the CronJob mounts it...
    [volume] = spec["volumes"]
    nightly_volume, nightly_mount = base.mount("persistentVolumeClaim")
    assert volume["persistentVolumeClaim"]["claimName"] == nightly_volume[
        "persistentVolumeClaim"]["claimName"] == base.one("PersistentVolumeClaim")[
        "metadata"]["name"]
    [mount] = container["volumeMounts"]
    assert mount["name"] == volume["name"]
    assert mount["mountPath"] == nightly_mount["mountPath"]
    assert mount.get("readOnly") is True, "reading the report must not risk the study"
    # ...and the report where `autotune nightly` writes it: results/<experiment>/ under the
    # CronJob's working directory.
    _path, exp = base.experiment()
    report = PurePosixPath(base.container["workingDir"]) / results_dir(exp).as_posix() / REPORT
    assert container["command"] == ["cat", str(report)]
    # The files are the nightly's (uid 10001, fsGroup): read them as that user.
    assert spec["securityContext"]["runAsUser"] == base.pod["securityContext"]["runAsUser"]


def test_the_api_server_admits_the_one_liners_pod(plane: Plane, namespaces: list[str]) -> None:
    """The pod kubectl run creates from the overrides (they replace its spec: the default
    --override-type merge), at Pod Security level restricted."""
    admin = plane.cp.admin
    cmd = _one_liner()
    name = cmd.argv[4]
    namespace = cmd.option("-n")
    _namespace(admin, namespace, namespaces)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace, "labels": {"run": name}},
           "spec": {"restartPolicy": "Never", **cmd.overrides["spec"]}}
    _dry_run(admin, pod)
