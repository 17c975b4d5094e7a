"""A real control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok (fake kubelets for the Nodes we register) and Kueue, built by
scripts/build-kube. Flags and traps are in docs/e2e.md."""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml

from tests.e2e.pki import Pair, Pki
from tests.e2e.procs import Proc, free_port
from tests.e2e.rest import ApiError, Obj, Rest, wait_for

KUEUE_NAMESPACE = "kueue-system"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# Kueue reads its metrics serving cert from this fixed path when it does not manage its own
# certificates (cmd/kueue/main.go of v0.17.0 and v0.19.2); no setting moves it.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
KWOK_STAGES = ("node/fast/node-initialize.yaml",
               "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml")
# Not pod-complete: a Job's pods would end at once and the next pod of the Job could run
# on the node the first one freed, so "each pod on its own booked node" could not be seen.



@dataclass(frozen=True)
class Gangs:
    """How a Kubernetes release serves its own gang API (KEP-4671), and the flags that turn
    it on: the same gates on the API server, scheduler and controller-manager.

    The API server stamps every PodGroup with a protection finalizer (admission plugin
    PodGroupProtection, on by default), which only the controller-manager's PodGroup
    protection controller removes, and it runs only under GenericWorkload: without the
    gate there a PodGroup could never be deleted."""

    api_version: str  # of Workload and PodGroup
    feature_gates: str
    runtime_config: str
    composite: bool  # CompositePodGroup (scheduling.k8s.io/v1alpha3) is served


# v1.36.3 (pkg/features/kube_features.go): GenericWorkload (alpha) serves
# scheduling.k8s.io/v1alpha2 once the version is switched on with --runtime-config;
# GangScheduling (which needs it) adds the scheduler's GangScheduling plugin.
GANGS_136 = Gangs("scheduling.k8s.io/v1alpha2",
                  "--feature-gates=GenericWorkload=true,GangScheduling=true",
                  "--runtime-config=scheduling.k8s.io/v1alpha2=true", composite=False)
# v1.37.2: GenericWorkload is beta (off by default) and alone adds the GangScheduling plugin
# (pkg/scheduler/apis/config/v1/default_plugins.go; the GangScheduling gate is gone);
# v1beta1 is among the beta versions off by default (pkg/controlplane/instance.go).
# CompositePodGroup (alpha; needs TopologyAwareWorkloadScheduling) serves groups of gangs
# in v1alpha3; DRAWorkloadResourceClaims (beta, off) lets a PodGroup share claims.
GANGS_137 = Gangs("scheduling.k8s.io/v1beta1",
                  "--feature-gates=GenericWorkload=true,CompositePodGroup=true,"
                  "TopologyAwareWorkloadScheduling=true,DRAWorkloadResourceClaims=true",
                  "--runtime-config=scheduling.k8s.io/v1beta1=true,"
                  "scheduling.k8s.io/v1alpha3=true", composite=True)


def gangs_of(kubernetes: str) -> Gangs:
    """The gang flags of a Kubernetes version ("v1.37.2")."""
    minor = int(kubernetes.lstrip("v").split(".")[1])
    return GANGS_137 if minor >= 37 else GANGS_136


@dataclass(frozen=True)
class Parts:
    """Where scripts/build-kube put the binaries and the files taken from the modules."""

    etcd: str
    apiserver: str
    scheduler: str
    controller_manager: str
    kwok: str
    kueue: str
    kueue_crds: Path
    kueue_webhooks: Path
    provreq_crds: Path
    kwok_stages: Path
    versions: dict[str, str]  # part name -> version ("kubernetes": "v1.37.2", ...)

    @staticmethod
    def from_manifest(data: dict[str, Any]) -> Parts:
        bins = {name: path for part in data["parts"].values()
                for name, path in part["bin"].items()}
        return Parts(bins["etcd"], bins["kube-apiserver"], bins["kube-scheduler"],
                     bins["kube-controller-manager"], bins["kwok"], bins["kueue"],
                     Path(data["kueue_crds"]), Path(data["kueue_webhooks"]),
                     Path(data["provreq_crds"]), Path(data["kwok_stages"]),
                     {name: part["version"] for name, part in data["parts"].items()})

    @property
    def gangs(self) -> Gangs:
        return gangs_of(self.versions["kubernetes"])

    def kueue_at_least(self, minor: int) -> bool:
        """Is this Kueue v0.<minor> or later?"""
        return int(self.versions["kueue"].lstrip("v").split(".")[1]) >= minor


def kubeconfig(path: Path, server: str, ca: Path, client: Pair) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
        "clusters": [{"name": "e2e", "cluster": {"server": server,
                                                  "certificate-authority": str(ca)}}],
        "users": [{"name": "e2e", "user": {"client-certificate": str(client.cert),
                                            "client-key": str(client.key)}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
    }))
    return path


# Loopback only: never through a proxy the environment may name.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_ok(url: str) -> bool:
    try:
        with _LOCAL.open(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


class ControlPlane:
    def __init__(self, parts: Parts, directory: Path) -> None:
        self.parts = parts
        self.dir = directory
        self.logs = directory / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pki = Pki(directory / "pki")
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.api_port = free_port()
        self.kueue_webhook_port = free_port()
        self.kueue_health_port = free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.serving = self.pki.issue("apiserver", "kube-apiserver", server=True)
        self.admin = self.pki.issue("admin", "e2e-admin", organization="system:masters")
        self.sa = self.pki.service_account_keys()
        self.admin_kubeconfig = kubeconfig(directory / "admin.kubeconfig", self.server,
                                           self.pki.ca, self.admin)
        self.rest = Rest(self.server, str(self.pki.ca), str(self.admin.cert),
                         str(self.admin.key))
        self.procs: dict[str, Proc] = {}

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.start_etcd()
        self.start_apiserver()
        self.apply_crds()
        self.start_controllers()
        self.start_kwok()
        self.start_kueue()

    def stop(self) -> None:
        for name in ("kueue", "kwok", "kube-scheduler", "kube-controller-manager",
                     "kube-apiserver", "etcd"):
            proc = self.procs.get(name)
            if proc is not None:
                proc.stop()

    def _proc(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        proc = Proc(name, argv, self.logs / f"{name}.log", env)
        self.procs[name] = proc
        return proc.start()

    def start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._proc("etcd", [
            self.parts.etcd, "--name=e2e", f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=e2e={peer}", "--unsafe-no-fsync", "--log-level=warn",
        ])
        wait_for("etcd to be healthy", lambda: _http_ok(f"{self.etcd_url}/health"), 60,
                 explain=self.procs["etcd"].tail)

    def start_apiserver(self) -> None:
        self._proc("kube-apiserver", [
            self.parts.apiserver, f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--tls-cert-file={self.serving.cert}", f"--tls-private-key-file={self.serving.key}",
            f"--client-ca-file={self.pki.ca}",
            f"--service-account-key-file={self.sa.cert}",
            f"--service-account-signing-key-file={self.sa.key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            # The `kubernetes` Service endpoint may not be a loopback address.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            self.parts.gangs.feature_gates, self.parts.gangs.runtime_config,
        ])
        self.wait_api_ready()

    def wait_api_ready(self, timeout: float = 90.0) -> None:
        def ready() -> bool:
            self.procs["kube-apiserver"].check_alive()
            return _readyz(self.rest)

        wait_for("kube-apiserver /readyz", ready, timeout,
                 explain=self.procs["kube-apiserver"].tail)

    def api_ready(self) -> bool:
        """/readyz answers ok (the authorizer's informers have synced, among others)."""
        return _readyz(self.rest)

    def restart_apiserver(self, between: Any = None) -> None:
        """Stop the API server (SIGTERM, as a rolling upgrade does), run ``between`` while
        it is down, and start it again on the same port."""
        self.procs["kube-apiserver"].stop()
        if between is not None:
            between()
        self.procs["kube-apiserver"].start()
        self.wait_api_ready()

    def _component_kubeconfig(self, name: str, server: str = "") -> Path:
        pair = self.pki.issue(name, f"e2e-{name}", organization="system:masters")
        return kubeconfig(self.dir / f"{name}.kubeconfig", server or self.server,
                          self.pki.ca, pair)

    def client_kubeconfig(self, name: str, server: str, user: str) -> Path:
        """A kubeconfig for ``user`` (no groups: only RBAC grants it anything), through
        ``server``."""
        pair = self.pki.issue(name, user)
        return kubeconfig(self.dir / f"{name}.kubeconfig", server, self.pki.ca, pair)

    def start_controllers(self) -> None:
        kcm = self._component_kubeconfig("kube-controller-manager")
        self._proc("kube-controller-manager", [
            self.parts.controller_manager, f"--kubeconfig={kcm}",
            f"--authentication-kubeconfig={kcm}", f"--authorization-kubeconfig={kcm}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--leader-elect=false", f"--service-account-private-key-file={self.sa.key}",
            f"--root-ca-file={self.pki.ca}", "--use-service-account-credentials=false",
            self.parts.gangs.feature_gates,
        ])
        sched = self._component_kubeconfig("kube-scheduler")
        self._proc("kube-scheduler", [
            self.parts.scheduler, f"--kubeconfig={sched}",
            f"--authentication-kubeconfig={sched}", f"--authorization-kubeconfig={sched}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
            self.parts.gangs.feature_gates,
        ])
        # Pods need the namespace's `default` ServiceAccount, which the controller-manager makes.
        wait_for("the default ServiceAccount", lambda: self.rest.find(
            "v1", "ServiceAccount", "default", "default"), 60,
            explain=self.procs["kube-controller-manager"].tail)

    def start_kwok(self) -> None:
        stages = self.dir / "kwok-stages.yaml"
        stages.write_text("\n---\n".join(
            (self.parts.kwok_stages / rel).read_text() for rel in KWOK_STAGES))
        config = self._component_kubeconfig("kwok")
        self._proc("kwok", [
            self.parts.kwok, f"--kubeconfig={config}", f"--config={stages}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            f"--server-address=127.0.0.1:{free_port()}",
        ])

    # --- CRDs --------------------------------------------------------------------------------

    def apply_crds(self) -> None:
        names = []
        for doc in self.crd_documents():
            self.rest.apply(doc)
            names.append(doc["metadata"]["name"])
        for name in names:
            wait_for(f"CRD {name} to be established", self._crd_established(name), 60)
        self.rest.forget_discovery()

    def _crd_established(self, name: str) -> Callable[[], bool]:
        return lambda: _established(
            self.rest.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name))

    def crd_documents(self) -> list[Obj]:
        docs: list[Obj] = []
        for path in sorted(self.parts.provreq_crds.rglob("*.yaml")):
            docs += [d for d in yaml.safe_load_all(path.read_text())
                     if d and d.get("kind") == "CustomResourceDefinition"]
        # Only the conversion patches Kueue's kustomization enables: it ships one for
        # ResourceFlavor but leaves it commented out, and its webhook then refuses to
        # convert ResourceFlavors (the API server's v1beta1 watch cache fails, and with it
        # the garbage collector's sync: a deleted Job's pods were never collected).
        kustomization = yaml.safe_load(
            (self.parts.kueue_crds / "kustomization.yaml").read_text())
        enabled = [p["path"] for p in kustomization.get("patches") or []
                   if str(p.get("path", "")).startswith("patches/webhook_in_")]
        converted = set()
        for rel in enabled:
            patch = yaml.safe_load((self.parts.kueue_crds / rel).read_text())
            converted.add(patch["metadata"]["name"])
        for path in sorted((self.parts.kueue_crds / "bases").glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            if doc["metadata"]["name"] in converted:
                # Kueue's CRDs that change shape between versions convert through its
                # webhook; by URL, since no Service reaches loopback.
                doc["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "clientConfig": {"url": f"{self.kueue_url}/convert",
                                     "caBundle": self.ca_bundle},
                    "conversionReviewVersions": ["v1"]}}
            docs.append(doc)
        return docs

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.pki.ca.read_bytes()).decode()

    @property
    def kueue_url(self) -> str:
        return f"https://127.0.0.1:{self.kueue_webhook_port}"

    # --- Kueue -------------------------------------------------------------------------------

    def start_kueue(self) -> None:
        self.rest.apply({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": KUEUE_NAMESPACE}})
        certs = self.dir / "kueue-certs"
        certs.mkdir(exist_ok=True)
        pair = self.pki.issue("kueue-webhook", "kueue-webhook", server=True)
        (certs / "tls.crt").write_bytes(pair.cert.read_bytes())
        (certs / "tls.key").write_bytes(pair.key.read_bytes())
        self._kueue_metrics_certs()
        config = self.dir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.kueue_health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": self.kueue_webhook_port, "host": "127.0.0.1",
                        "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "featureGates": self._kueue_gates(),
            "integrations": {"frameworks": ["batch/job", "pod"]},
        }))
        kube = self._component_kubeconfig("kueue")
        self._proc("kueue", [self.parts.kueue, f"--config={config}", "--zap-log-level=info"],
                   env={**os.environ, "KUBECONFIG": str(kube)})
        wait_for("Kueue to be ready", self._kueue_ready, 120,
                 explain=self.procs["kueue"].tail)
        self.apply_kueue_webhooks()

    def _kueue_gates(self) -> dict[str, bool]:
        gates = {"VisibilityOnDemand": False}
        if self.parts.kueue_at_least(18):
            # Alpha since 0.18 (pkg/features/kube_features.go of v0.19.2): one Workload
            # pursues several flavors at once. Only ClusterQueues with a
            # concurrentAdmissionPolicy use it (test_kueue_variants).
            gates["ConcurrentAdmission"] = True
        return gates

    def _kueue_ready(self) -> bool:
        self.procs["kueue"].check_alive()
        return _http_ok(f"http://127.0.0.1:{self.kueue_health_port}/readyz") and \
            self._webhook_status("/convert") not in (None, 404)

    def _kueue_metrics_certs(self) -> None:
        if (KUEUE_METRICS_CERTS / "tls.crt").exists():
            return
        try:
            KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RuntimeError(
                f"Kueue needs a metrics certificate in {KUEUE_METRICS_CERTS} and this user "
                f"cannot create it ({err}); create the directory writable for it") from err
        pair = self.pki.issue("kueue-metrics", "kueue-metrics", server=True)
        (KUEUE_METRICS_CERTS / "tls.key").write_bytes(pair.key.read_bytes())
        (KUEUE_METRICS_CERTS / "tls.crt").write_bytes(pair.cert.read_bytes())

    def _webhook_status(self, path: str) -> int | None:
        http = urllib3.PoolManager(ca_certs=str(self.pki.ca), cert_reqs="CERT_REQUIRED",
                                   retries=False, timeout=3)
        try:
            response = http.request("POST", self.kueue_url + path, body=b"{}",
                                    headers={"Content-Type": "application/json"})
        except urllib3.exceptions.HTTPError:
            return None
        return int(response.status)

    def apply_kueue_webhooks(self) -> None:
        """Kueue's webhook configurations, by URL, keeping only the webhooks whose paths
        this Kueue serves (the others would fail closed for their kinds)."""
        for doc in yaml.safe_load_all(self.parts.kueue_webhooks.read_text()):
            if not doc:
                continue
            kept = []
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                if self._webhook_status(path) == 404:
                    continue
                hook["clientConfig"] = {"url": self.kueue_url + path,
                                        "caBundle": self.ca_bundle}
                kept.append(hook)
            doc["webhooks"] = kept
            doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
            self.rest.apply(doc)

    # --- etcd --------------------------------------------------------------------------------

    def etcd_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(self.etcd_url + path, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with _LOCAL.open(request, timeout=10) as response:
            out: dict[str, Any] = json.loads(response.read())
            return out

    def etcd_revision(self) -> int:
        key = base64.b64encode(b"/allset-e2e/").decode()
        return int(self.etcd_call("/v3/kv/range", {"key": key})["header"]["revision"])

    def etcd_churn_and_compact(self, writes: int = 20) -> int:
        """Write keys the API server does not know, then compact etcd to the newest
        revision: every resourceVersion a client holds is now too old (410 Gone)."""
        for i in range(writes):
            self.etcd_call("/v3/kv/put", {
                "key": base64.b64encode(f"/allset-e2e/churn-{i}".encode()).decode(),
                "value": base64.b64encode(str(time.time()).encode()).decode()})
        revision = self.etcd_revision()
        self.etcd_call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def logs_tail(self) -> str:
        return "\n".join(f"--- {name}\n{proc.tail(25)}" for name, proc in self.procs.items())


def _readyz(rest: Rest) -> bool:
    try:
        rest.call("GET", "/readyz")
    except json.JSONDecodeError:
        return True  # "ok" is not JSON
    except (ApiError, urllib3.exceptions.HTTPError):
        return False
    return True


def install_crd(rest: Rest, crd: Obj) -> None:
    """Apply ``crd``, wait until the API server serves it, and forget the discovery cached
    before."""
    rest.apply(crd)
    name = crd["metadata"]["name"]
    wait_for(f"CRD {name} to be established", lambda: _established(
        rest.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)), 60)
    rest.forget_discovery()


def _established(crd: Obj) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])
