"""A real Kubernetes control plane on 127.0.0.1, in parts, for the tests.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler are the upstream programs
(built from their Go modules by scripts/controlplane.sh); kwok plays the kubelets: it keeps the
nodes Ready and moves pods through Pending -> Running/Ready -> deleted as its Stage file says
(tests/controlplane/kwok-stages.yaml), and it serves the kubelet API for ``pods/log`` with the
kubelet's own CRI log reader. So the Deployment controller rolls Deployments out for real, the
scheduler binds, the API server validates, strategic-merges, admits (Pod Security, ResourceQuota,
ServiceAccount), authorizes (RBAC) and serves watches with real resourceVersions.

What is not real: no container runs (kwok), nothing serves a pod's IP (so ``pods/proxy`` has no
backend), and Chaos Mesh's controller is simulated (chaos_controller.py). Every process started
here is tracked by PID and stopped by PID; every port is on 127.0.0.1. Each runs in a session of
its own (a Ctrl-C at the terminal is the suite's to handle, not theirs) and dies with the thread
that started it (``PR_SET_PDEATHSIG``, set by util-linux's ``setpriv`` before it execs the
program): a suite killed outright (SIGKILL, OOM) leaves no control plane behind. A SIGTERM tears
down as Ctrl-C does (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import urllib3
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STAGES = HERE / "kwok-stages.yaml"
STRESSCHAOS_CRD = REPO / "autotune" / "data" / "chaos-mesh" / "chaos-mesh.org_stresschaos.yaml"
NODE_LABEL = "autotune.test/kwok"

Obj = dict[str, Any]


def binaries() -> Path | None:
    """Where scripts/controlplane.sh put the binaries, or None when they are not built."""
    found = subprocess.run([str(REPO / "scripts" / "controlplane.sh"), "--where"],
                           capture_output=True, text=True, check=False)
    return Path(found.stdout.strip()) if found.returncode == 0 else None


def build() -> Path:
    """Build the binaries if this machine has not yet (minutes the first time)."""
    out = subprocess.run([str(REPO / "scripts" / "controlplane.sh")], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"scripts/controlplane.sh failed: {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, ok: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes] | None,
          log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} exited ({proc.returncode}):\n{tail}")
        try:
            if ok():
                return
        except (OSError, requests.RequestException):
            pass
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} not ready within {timeout:g}s:\n{tail}")


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class ControlPlane:
    """Start with ``start()``; ``url``, ``admin`` and ``kubeconfig()`` once it runs."""

    bins: Path
    workdir: Path
    nodes: int = 2
    processes: list[Process] = field(default_factory=list)
    url: str = ""
    admin_token: str = field(default_factory=lambda: uuid.uuid4().hex)
    kubelet_port: int = 0
    removed_crds: bool = False
    started_seconds: float = 0.0
    """How long ``start()`` took (the per-session cost, reported by the benchmark)."""

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> ControlPlane:
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        try:
            self._keys()
            self._etcd()
            self._apiserver()
            self._install_crds()
            self._controller_manager()
            self._scheduler()
            self._kwok()
            for i in range(self.nodes):
                self.add_node(f"kwok-node-{i}", {"node.kubernetes.io/instance-type": "m5.large"})
            self.admin.wait_for(lambda: all(
                _condition(n, "Ready") for n in self.admin.list("/api/v1/nodes")), 60,
                "kwok to mark the nodes Ready")
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """SIGTERM every process we started, by PID, newest first; SIGKILL what lingers."""
        for p in reversed(self.processes):
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGTERM)
        for p in reversed(self.processes):
            try:
                p.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait(timeout=10)
        self.processes.clear()

    def alive(self) -> list[str]:
        return [p.name for p in self.processes if p.proc.poll() is None]

    def spawn(self, name: str, argv: list[str]) -> Process:
        """Start one of the plane's processes, logged to ``logs/<name>.log``, tracked and
        stopped with the plane (``stop``); SIGKILLed by the kernel if the thread that started it
        (pytest's main thread) dies first."""
        log = self.workdir / "logs" / f"{name}.log"
        out = log.open("ab")
        proc = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv],
                                stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=self.workdir,
                                start_new_session=True)
        out.close()
        p = Process(name, proc, log)
        self.processes.append(p)
        return p

    # --- the parts -----------------------------------------------------------------------

    def _keys(self) -> None:
        """The service-account signing key, kwok's serving certificate, the static tokens."""
        d = self.workdir
        _openssl("genrsa", "-out", str(d / "sa.key"), "2048")
        _openssl("rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                 "-subj", "/CN=kwok", "-addext", "subjectAltName=IP:127.0.0.1",
                 "-keyout", str(d / "kwok.key"), "-out", str(d / "kwok.crt"))
        # token,user,uid,"groups": the components and the tests' admin are cluster admins
        # (system:masters); autotune itself is tested with a ServiceAccount's real token.
        lines = [f'{self.admin_token},admin,admin,"system:masters"']
        for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
            token = uuid.uuid4().hex
            lines.append(f'{token},system:{component},{component},"system:masters"')
            (d / f"{component}.token").write_text(token)
        (d / "tokens.csv").write_text("\n".join(lines) + "\n")

    def _etcd(self) -> None:
        client, peer = free_port(), free_port()
        data = self.workdir / "etcd"
        if data.exists():
            shutil.rmtree(data)
        self.etcd_url = f"http://127.0.0.1:{client}"
        p = self.spawn("etcd", [
            str(self.bins / "etcd"), "--name=test", f"--data-dir={data}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=test=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--quota-backend-bytes=1073741824", "--log-level=warn"])
        _wait("etcd", lambda: requests.get(f"{self.etcd_url}/health", timeout=1).ok, 60,
              p.proc, p.log)

    def _apiserver(self) -> None:
        port = free_port()
        d = self.workdir
        self.url = f"https://127.0.0.1:{port}"
        p = self.spawn("kube-apiserver", [
            str(self.bins / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={d / 'apiserver-certs'}", f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=RBAC", "--anonymous-auth=false",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true",
            "--kubelet-preferred-address-types=InternalIP",
            "--endpoint-reconciler-type=none", "--profiling=false"])
        _wait("kube-apiserver", lambda: self.admin.ready(), 120, p.proc, p.log)
        self.ca_file = d / "apiserver-certs" / "apiserver.crt"

    def _install_crds(self) -> None:
        """The StressChaos CRD as autotune ships it, and kwok's Logs CRD; again after a test
        removed one (``remove_crd``)."""
        crds = {"stresschaos.chaos-mesh.org": STRESSCHAOS_CRD,
                "logs.kwok.x-k8s.io": self.bins.parent / "crd" / "kwok.x-k8s.io_logs.yaml"}
        for name, path in crds.items():
            crd_path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            self.admin.wait_for(lambda p=crd_path: self.admin.get(p) is None or not (
                self.admin.get(p) or {}).get("metadata", {}).get("deletionTimestamp"), 60,
                f"CRD {name} deleted")
            self.admin.apply(yaml.safe_load(path.read_text()))
            self.admin.wait_for(lambda p=crd_path: _condition(self.admin.get(p), "Established"),
                                30, f"CRD {name} established")
        self.removed_crds = False

    def remove_crd(self, name: str) -> None:
        """Uninstall a CRD (Chaos Mesh missing); ``ensure_crds`` puts it back."""
        self.admin.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        self.admin.wait_for(lambda: self.admin.get(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") is None, 60,
            f"CRD {name} gone")
        self.removed_crds = True

    def ensure_crds(self) -> None:
        if self.removed_crds:
            self._install_crds()

    def _component_kubeconfig(self, component: str) -> Path:
        path = self.workdir / f"{component}.kubeconfig"
        path.write_text(self.kubeconfig((self.workdir / f"{component}.token").read_text()))
        return path

    def _controller_manager(self) -> None:
        d = self.workdir
        config = self._component_kubeconfig("kube-controller-manager")
        self.spawn("kube-controller-manager", [
            str(self.bins / "kube-controller-manager"), f"--kubeconfig={config}",
            "--leader-elect=false", "--secure-port=0", "--bind-address=127.0.0.1",
            f"--service-account-private-key-file={d / 'sa.key'}",
            f"--root-ca-file={d / 'apiserver-certs' / 'apiserver.crt'}",
            "--use-service-account-credentials=false",
            # No cloud, no node IPAM, no persistent volumes in these tests.
            "--controllers=*,-nodeipam,-persistentvolume-binder,-attachdetach,"
            "-persistentvolume-expander,-cloud-node-lifecycle,-service-lb-controller,"
            "-node-route-controller",
            "--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10"])

    def _scheduler(self) -> None:
        config = self._component_kubeconfig("kube-scheduler")
        self.spawn("kube-scheduler", [
            str(self.bins / "kube-scheduler"), f"--kubeconfig={config}", "--leader-elect=false",
            "--secure-port=0", "--bind-address=127.0.0.1"])

    def _kwok(self) -> None:
        config = self._component_kubeconfig("kwok")
        self.kubelet_port = free_port()
        self.spawn("kwok", [
            str(self.bins / "kwok"), f"--kubeconfig={config}", f"--config={STAGES}",
            "--manage-all-nodes=false", f"--manage-nodes-with-label-selector={NODE_LABEL}",
            "--node-ip=127.0.0.1", f"--node-port={self.kubelet_port}",
            f"--server-address=127.0.0.1:{self.kubelet_port}",
            f"--tls-cert-file={self.workdir / 'kwok.crt'}",
            f"--tls-private-key-file={self.workdir / 'kwok.key'}",
            "--cidr=10.244.0.1/16", "--enable-crds=Logs"])

    def add_node(self, name: str, labels: Mapping[str, str]) -> Obj:
        return self.admin.create("/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {NODE_LABEL: "true",
                                                  "kubernetes.io/hostname": name, **labels},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        })

    # --- access --------------------------------------------------------------------------

    @property
    def admin(self) -> Admin:
        return Admin(self.url, self.admin_token)

    def kubeconfig(self, token: str, server: str | None = None, namespace: str = "default") -> str:
        """A kubeconfig for ``token``; ``server`` another address (the fault proxy)."""
        server = server or self.url
        cluster: Obj = {"server": server}
        if server.startswith("https://"):
            cluster["insecure-skip-tls-verify"] = True
        return yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": cluster}],
            "users": [{"name": "test", "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "test", "user": "test",
                                                    "namespace": namespace}}
                         for name in ("test", "other")],
        })


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _condition(obj: Obj | None, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in ((obj or {}).get("status") or {}).get("conditions") or [])


class ApiFailure(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:500]}")
        self.status, self.body = status, body


class Admin:
    """The tests' own requests to the API server, as a cluster admin (not autotune's client:
    what autotune does is what is under test)."""

    def __init__(self, url: str, token: str) -> None:
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self.url = url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.verify = False
        self.session.trust_env = False  # no proxy, no CA bundle from the environment

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json", params: Mapping[str, str] | None = None,
                ok: tuple[int, ...] = (200, 201, 202)) -> Any:
        data = None if body is None else (body if isinstance(body, str | bytes)
                                          else json.dumps(body))
        response = self.session.request(method, self.url + path, data=data, params=params,
                                        headers={"Content-Type": content_type}, timeout=30)
        if response.status_code not in ok:
            raise ApiFailure(response.status_code, response.text)
        ctype = response.headers.get("Content-Type", "")
        return response.json() if "json" in ctype else response.text

    def ready(self) -> bool:
        response = self.session.get(self.url + "/readyz", timeout=2)
        return response.status_code == 200

    def get(self, path: str) -> Obj | None:
        try:
            found: Obj = self.request("GET", path)
        except ApiFailure as e:
            if e.status == 404:
                return None
            raise
        return found

    def list(self, path: str, **params: str) -> list[Obj]:
        return list(self.request("GET", path, params=params).get("items") or [])

    def create(self, path: str, body: Obj) -> Obj:
        created: Obj = self.request("POST", path, body)
        return created

    def apply(self, obj: Obj, *, update: bool = False) -> Obj:
        """Create ``obj`` at its kind's path; when it exists, leave it (or with ``update``,
        replace it with ``obj``)."""
        path = collection_path(obj)
        try:
            return self.create(path, obj)
        except ApiFailure as e:
            if e.status != 409:
                raise
        found = self.get(f"{path}/{obj['metadata']['name']}")
        assert found is not None
        if not update:
            return found
        body = {**obj, "metadata": {**obj["metadata"],
                                    "resourceVersion": found["metadata"]["resourceVersion"]}}
        return self.replace(f"{path}/{obj['metadata']['name']}", body)

    def patch(self, path: str, patch: Any, kind: str = "strategic",
              manager: str | None = None) -> Obj:
        """``kind`` "apply": server-side apply as field manager ``manager`` (forced)."""
        ctype = {"strategic": "application/strategic-merge-patch+json",
                 "merge": "application/merge-patch+json",
                 "json": "application/json-patch+json",
                 "apply": "application/apply-patch+yaml"}[kind]
        params = {"fieldManager": manager} if manager else None
        if kind == "apply":
            params = {"fieldManager": manager or "test", "force": "true"}
        patched: Obj = self.request("PATCH", path, patch, content_type=ctype, params=params)
        return patched

    def replace(self, path: str, body: Obj) -> Obj:
        replaced: Obj = self.request("PUT", path, body)
        return replaced

    def delete(self, path: str, **params: str) -> None:
        self.request("DELETE", path, params=params, ok=(200, 202, 404))

    def wait_for(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                found = condition()
            except ApiFailure:
                found = None
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.05)


# --- paths ------------------------------------------------------------------------------

_CORE = {"Pod": "pods", "Namespace": "namespaces", "ServiceAccount": "serviceaccounts",
         "ConfigMap": "configmaps", "Secret": "secrets", "ResourceQuota": "resourcequotas",
         "Node": "nodes", "Event": "events", "LimitRange": "limitranges"}
_GROUPED = {"Deployment": "deployments", "ReplicaSet": "replicasets", "Role": "roles",
            "RoleBinding": "rolebindings", "ClusterRole": "clusterroles",
            "ClusterRoleBinding": "clusterrolebindings", "Lease": "leases",
            "CustomResourceDefinition": "customresourcedefinitions",
            "StressChaos": "stresschaos", "Logs": "logs",
            "HorizontalPodAutoscaler": "horizontalpodautoscalers", "CronJob": "cronjobs",
            "Job": "jobs", "PodMonitor": "podmonitors", "ServiceMonitor": "servicemonitors",
            "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
            "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
            "NetworkPolicy": "networkpolicies"}
_CLUSTER_SCOPED = {"Namespace", "Node", "ClusterRole", "ClusterRoleBinding",
                   "CustomResourceDefinition", "ValidatingWebhookConfiguration",
                   "MutatingWebhookConfiguration"}


def collection_path(obj: Obj, namespace: str | None = None) -> str:
    kind, api = obj["kind"], obj["apiVersion"]
    plural = _CORE.get(kind) or _GROUPED[kind]
    base = f"/api/{api}" if "/" not in api else f"/apis/{api}"
    ns = namespace or obj.get("metadata", {}).get("namespace")
    if kind in _CLUSTER_SCOPED or not ns:
        return f"{base}/{plural}"
    return f"{base}/namespaces/{ns}/{plural}"


def object_path(obj: Obj, namespace: str | None = None) -> str:
    return f"{collection_path(obj, namespace)}/{obj['metadata']['name']}"


def documents(text: str) -> Iterator[Obj]:
    for doc in yaml.safe_load_all(text):
        if doc:
            yield doc


def env_enabled() -> bool:
    return os.environ.get("AUTOTUNE_CONTROLPLANE", "1") != "0"
