"""deploy/kubernetes, rendered by kustomize and held to the code it deploys: the RBAC is
exactly the controller's API calls, CA's cloud-config names an address the server
certificate is valid for, the flags, mounts, ports and probes agree across the objects,
and every container runs as non-root on a read-only root filesystem."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.cli.shutdown import EXIT_MARGIN_SECONDS
from provider.config import load_config
from provider.controller import conditions
from provider.controller.kube import CALLS
from provider.domain.demand import CLASS_NAME
from provider.service.server import LIVE, READY
from tests.kit.deploy import (
    DEPLOY,
    EXAMPLE_IMAGE,
    IDENTITIES,
    ROOT,
    WORKLOADS,
    Doc,
    args_of,
    cloud_install,
    containers,
    every_renderer,
    find,
    kustomization,
    mount_of,
    one,
    pod_spec,
    render,
    render_with,
    require_kustomize,
)

NAMESPACE = "allset"
SA = ("ServiceAccount", NAMESPACE, "allset")
# What is installed: the base (the simulated cloud), and an overlay of one's own on each
# cloud component, as docs/operator-guide.md writes it (tests.kit.deploy.cloud_install).
INSTALLS = ["base", "aws", "gcp"]
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "AdmissionCheck",
                  "ProvisioningRequestConfig", "Namespace", "MutatingWebhookConfiguration"}

# A Cluster Autoscaler Deployment as CA's example manifests write it: flags in `command`.
CA_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: cluster-autoscaler, namespace: allset}
spec:
  selector: {matchLabels: {app: cluster-autoscaler}}
  template:
    metadata: {labels: {app: cluster-autoscaler}}
    spec:
      serviceAccountName: cluster-autoscaler
      containers:
        - name: cluster-autoscaler
          image: cluster-autoscaler:test
          command: [./cluster-autoscaler, --cloud-provider=aws, --expander=random, --v=4]
          volumeMounts:
            - {name: ssl-certs, mountPath: /etc/ssl/certs/ca-certificates.crt, readOnly: true}
      volumes:
        - {name: ssl-certs, hostPath: {path: /etc/ssl/certs/ca-bundle.crt}}
"""


def _id(path: Path) -> str:
    return str(path.relative_to(DEPLOY))


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {"base": DEPLOY / "base",
            **{cloud: cloud_install(tmp_path_factory.mktemp(cloud), cloud)
               for cloud in ("aws", "gcp")}}


@pytest.fixture(params=INSTALLS)
def directory(request: pytest.FixtureRequest, installs: dict[str, Path]) -> Path:
    """Each install's kustomization directory, in turn."""
    path: Path = installs[request.param]
    return path


@pytest.fixture(scope="module")
def with_ca(tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    """The base and a CA Deployment wired by the cluster-autoscaler component."""
    where = kustomization(tmp_path_factory.mktemp("with-ca"), resources=[DEPLOY / "base"],
                          components=[DEPLOY / "cluster-autoscaler"],
                          files={"ca.yaml": CA_DEPLOYMENT})
    return render(where)


@pytest.fixture(scope="module")
def without_cert_manager(tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    where = kustomization(tmp_path_factory.mktemp("manual-certs"),
                          resources=[DEPLOY / "base"],
                          components=[DEPLOY / "components" / "without-cert-manager"])
    return render(where)


def _allset(docs: list[Doc]) -> tuple[Doc, Doc]:
    deployment = one(docs, "Deployment", "allset")
    container = next(c for c in containers(deployment) if c["name"] == "allset")
    return deployment, container


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


# --- every overlay renders, parses and is well formed ---------------------------------------


@pytest.fixture(params=["install", "monitoring"])
def rendered(request: pytest.FixtureRequest, directory: Path) -> list[Doc]:
    return render(directory if request.param == "install" else DEPLOY / "monitoring")


def test_every_kustomization_renders(rendered: list[Doc]) -> None:
    docs = rendered
    assert docs
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name"), doc
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], f"{doc['kind']} is cluster-scoped"
        else:
            assert doc["metadata"].get("namespace") == NAMESPACE, doc["metadata"]


def test_every_kustomization_directory_is_tested() -> None:
    tested = {DEPLOY / "base", DEPLOY / "overlays" / "aws", DEPLOY / "overlays" / "gcp",
              DEPLOY / "components" / "settings",  # with the two above
              DEPLOY / "monitoring", DEPLOY / "kueue", DEPLOY / "cluster-autoscaler",
              DEPLOY / "cluster-autoscaler" / "price-expander",  # the users_expander test
              DEPLOY / "components" / "without-cert-manager",
              DEPLOY / "components" / "without-kueue",
              DEPLOY / "components" / "simulated-nodes",  # test_simulated_nodes_deploy.py
              DEPLOY / "overlays" / "kind"}  # test_kind_overlay.py
    found = {p.parent for p in DEPLOY.rglob("kustomization.yaml")}
    assert found == tested


def test_every_yaml_and_json_file_parses() -> None:
    # The chart's templates are Go templates, parsed once rendered (tests/repo/test_helm_chart.py).
    templates = ROOT / "deploy" / "helm" / "allset" / "templates"
    files = [p for p in (ROOT / "deploy").rglob("*") if p.suffix in (".yaml", ".yml", ".json")
             and templates not in p.parents]
    assert len(files) > 20
    for path in files:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            json.loads(text)
        else:
            assert [d for d in yaml.safe_load_all(text) if d is not None], path


def test_containers_run_as_non_root_on_a_read_only_root(directory: Path) -> None:
    workloads = [d for d in render(directory) if d["kind"] in WORKLOADS]
    assert workloads
    for workload in workloads:
        pod = pod_spec(workload).get("securityContext") or {}
        for c in containers(workload):
            sc = c.get("securityContext") or {}
            where = f"{workload['kind']}/{workload['metadata']['name']} container {c['name']}"
            assert sc.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, where
            assert sc.get("runAsUser", pod.get("runAsUser", 1)) != 0, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert "ALL" in (sc.get("capabilities") or {}).get("drop", []), where
            assert sc.get("privileged") is not True, where


def test_images_are_the_placeholder_or_the_settings_one(directory: Path) -> None:
    """No registry host in the repository: the base's image is `allset:latest`, and an
    install on a cloud takes the one its allset-settings names."""
    expected = "allset:latest" if directory == DEPLOY / "base" else EXAMPLE_IMAGE
    for workload in (d for d in render(directory) if d["kind"] in WORKLOADS):
        for c in containers(workload):
            assert c["image"] == expected


# --- RBAC: exactly provider/controller/kube.py CALLS ------------------------------------------


Grant = tuple[str, str, str, bool, tuple[str, ...]]


def _granted(docs: list[Doc], account: tuple[str, str, str] = SA) -> set[Grant]:
    """(group, resource, verb, namespaced, resource names) of every rule bound to
    ``account`` (allset's service account); namespaced rules must be in allset's own
    namespace."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    granted: set[Grant] = set()
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        subjects = {(s["kind"], s.get("namespace"), s["name"]) for s in binding["subjects"]}
        if account not in subjects:
            continue
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert ns in (None, account[1]), binding
        role = roles[(ref["kind"], ns, ref["name"])]
        for rule in role["rules"]:
            assert not rule.get("nonResourceURLs"), rule
            names = tuple(sorted(rule.get("resourceNames") or ()))
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), rule
                        granted.add((group, resource, verb, ns is not None, names))
    return granted


def test_rbac_grants_exactly_the_calls_the_code_makes(directory: Path) -> None:
    needed = {(c.group, c.resource, v, c.namespaced, tuple(sorted(c.names)))
              for c in CALLS for v in c.verbs}
    granted = _granted(render(directory))
    rules = yaml.safe_dump([{"apiGroups": [c.group], "resources": [c.resource],
                             "verbs": list(c.verbs),
                             **({"resourceNames": list(c.names)} if c.names else {}),
                             **({"namespaced": True} if c.namespaced else {})}
                            for c in CALLS], sort_keys=False)
    assert granted == needed, (
        f"missing: {sorted(needed - granted)}; not needed: {sorted(granted - needed)}. "
        f"deploy/kubernetes/base/rbac.yaml should hold these rules:\n{rules}")


def test_the_cluster_role_has_no_cluster_wide_pod_patch(directory: Path) -> None:
    """Issue 53, item 5: allset patched pods cluster-wide to mark a gang's pods; its
    admission webhook marks them at creation now, and nothing of allset writes a pod (the
    opt-in YuniKorn source's pod patch is the operator's own grant, not deploy's)."""
    pods = {(verb, namespaced) for group, resource, verb, namespaced, _ in
            _granted(render(directory)) if (group, resource) == ("", "pods")}
    assert pods == {("get", False), ("list", False), ("watch", False)}


def test_the_restart_on_renewal_job_has_exactly_its_calls_and_no_more(directory: Path) -> None:
    """Issue 53, item 7: the CronJob that restarts CA once its client certificate was
    renewed runs as a ServiceAccount of its own whose grants, all in allset's namespace,
    are exactly the calls it makes, on the objects its flags name."""
    from provider.controller.restart_on_renewal import calls

    docs = render(directory)
    (job,) = find(docs, "CronJob")
    spec = pod_spec(job)
    (container,) = containers(job)
    args = args_of(container)
    assert container["args"][0] == "restart-on-renewal"
    account = ("ServiceAccount", NAMESPACE, spec["serviceAccountName"])
    assert account != SA and args["--namespace"] == NAMESPACE
    needed = {(c.group, c.resource, v, c.namespaced, tuple(sorted(c.names)))
              for c in calls(args["--deployment"], args["--certificate"]) for v in c.verbs}
    assert _granted(docs, account) == needed
    client = one(docs, "Certificate", args["--certificate"])
    assert client["spec"]["commonName"] == "cluster-autoscaler"  # CA's, the one renewed
    # What the job's pod is labelled is not allset's: no Service or budget of allset's
    # selects it.
    labels = job["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] != "allset"


def test_the_deployment_runs_as_the_bound_service_account() -> None:
    deployment, _ = _allset(render(DEPLOY / "base"))
    spec = pod_spec(deployment)
    assert spec["serviceAccountName"] == SA[2]
    assert deployment["metadata"]["namespace"] == SA[1]
    assert spec.get("automountServiceAccountToken", True) is True  # the controller needs it


# --- mTLS: certificates, CA's cloud-config, the mounts and flags that join them --------------


def _cloud_config(docs: list[Doc]) -> dict[str, Any]:
    data = one(docs, "ConfigMap", "allset-cloud-config")["data"]
    (text,) = data.values()
    config: dict[str, Any] = yaml.safe_load(text)
    return config


def test_server_certificate_names_the_address_in_cas_cloud_config(directory: Path) -> None:
    docs = render(directory)
    config = _cloud_config(docs)
    assert set(config) == {"address", "cert", "key", "cacert", "grpc_timeout"}
    host, _, port = config["address"].rpartition(":")
    server = one(docs, "Certificate", "allset-server")
    assert host in server["spec"]["dnsNames"]
    assert "server auth" in server["spec"]["usages"]

    # The host is the allset Service, and the port reaches the port allset listens on.
    service = one(docs, "Service", "allset")
    parts = host.split(".")
    assert parts[0] == service["metadata"]["name"]
    assert len(parts) == 1 or parts[1] == service["metadata"]["namespace"]
    (svc_port,) = [p for p in service["spec"]["ports"] if p["port"] == int(port)]
    deployment, container = _allset(docs)
    # No selector: the leader writes its own address (and this port) into the Service's
    # EndpointSlice, so the target port is the number allset listens on.
    assert "selector" not in service["spec"]
    assert svc_port["targetPort"] == _port(args_of(container)["--address"])
    assert svc_port["name"] == "grpc"  # the port name the leader's EndpointSlice uses
    metrics = one(docs, "Service", "allset-metrics")
    assert metrics["spec"]["selector"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()


def test_allset_serves_the_server_certificate_and_trusts_the_client_one(directory: Path) -> None:
    docs = render(directory)
    deployment, container = _allset(docs)
    server = one(docs, "Certificate", "allset-server")
    client = one(docs, "Certificate", "allset-client")
    args = args_of(container)
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"),
                      ("--tls-client-ca", "ca.crt")):
        volume, mount = mount_of(deployment, container, args[flag])
        assert volume["secret"]["secretName"] == server["spec"]["secretName"], flag
        assert args[flag] == f"{mount['mountPath']}/{key}", flag
    # ca.crt of the server's secret is the CA that signed it, so it trusts the client
    # certificate only if the same issuer signs both.
    assert client["spec"]["issuerRef"] == server["spec"]["issuerRef"]
    assert "client auth" in client["spec"]["usages"]
    issuer = one(docs, "Issuer", server["spec"]["issuerRef"]["name"])
    ca = one(docs, "Certificate", "allset-ca")
    assert issuer["spec"]["ca"]["secretName"] == ca["spec"]["secretName"]
    assert ca["spec"]["isCA"] is True
    assert "--insecure" not in container.get("args", [])


def test_the_client_certificates_are_the_identities_allset_tells_apart(directory: Path) -> None:
    """CA's certificate and the operators' come from the same issuer with the commonNames
    allset serves each as (issue 35, item 2), and they are not the same identity."""
    from provider.service.identities import AUTOSCALER_CN, OPERATOR_CN

    docs = render(directory)
    _, container = _allset(docs)
    args = args_of(container)
    client = one(docs, "Certificate", "allset-client")
    operator = one(docs, "Certificate", "allset-operator")
    assert client["spec"]["commonName"] == args["--autoscaler-cn"] == AUTOSCALER_CN
    assert operator["spec"]["commonName"] == args["--operator-cn"] == OPERATOR_CN
    assert operator["spec"]["issuerRef"] == client["spec"]["issuerRef"]
    assert "client auth" in operator["spec"]["usages"]
    assert operator["spec"]["secretName"] == "allset-operator-tls"


def test_the_gang_webhook_is_served_by_every_replica_with_the_server_certificate(
        directory: Path) -> None:
    """Issue 53, item 6: the webhook configuration reaches allset's webhook port through
    a Service of every replica, over the server certificate the allset CA signed (which
    cert-manager injects), fails safe, and is sent only pod creations outside allset's
    namespace and kube-system."""
    docs = render(directory)
    deployment, container = _allset(docs)
    (hook,) = one(docs, "MutatingWebhookConfiguration", "allset-gang-pods")["webhooks"]
    target = hook["clientConfig"]["service"]
    service = one(docs, "Service", target["name"])
    assert service["metadata"]["namespace"] == target["namespace"] == NAMESPACE
    assert service["spec"]["selector"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = args_of(container)
    assert ports[port["targetPort"]] == _port(args["--webhook-address"])
    server = one(docs, "Certificate", "allset-server")
    assert f"{target['name']}.{target['namespace']}.svc" in server["spec"]["dnsNames"]
    webhook_config = one(docs, "MutatingWebhookConfiguration", "allset-gang-pods")
    assert webhook_config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"{NAMESPACE}/allset-server"
    for flag, key in (("--webhook-cert", "tls.crt"), ("--webhook-key", "tls.key")):
        volume, _ = mount_of(deployment, container, args[flag])
        assert volume["secret"]["secretName"] == server["spec"]["secretName"], flag
        assert args[flag].endswith("/" + key)
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""],
                              "apiVersions": ["v1"], "resources": ["pods"],
                              "scope": "Namespaced"}]
    (excluded,) = hook["namespaceSelector"]["matchExpressions"]
    assert excluded["operator"] == "NotIn"
    assert set(excluded["values"]) == {"kube-system", NAMESPACE}
    assert hook["timeoutSeconds"] <= 5


def test_cluster_autoscaler_is_wired_to_allset(with_ca: list[Doc]) -> None:
    ca = one(with_ca, "Deployment", "cluster-autoscaler")
    (container,) = containers(ca)
    command = container["command"]
    args = args_of(container)
    # Appended, so they win over the same flags earlier in the command.
    assert command[-3:] == ["--cloud-provider=externalgrpc",
                            "--cloud-config=/etc/allset/cloud-config/cloud-config.yaml",
                            "--enable-provisioning-requests=true"]
    assert args["--cloud-provider"] == "externalgrpc"
    assert "--v=4" in command  # nothing of CA's own is lost
    assert {m["name"] for m in container["volumeMounts"]} >= {"ssl-certs"}

    # --cloud-config is the mounted ConfigMap's file...
    volume, mount = mount_of(ca, container, args["--cloud-config"])
    cloud_config = one(with_ca, "ConfigMap", volume["configMap"]["name"])
    key = args["--cloud-config"].removeprefix(mount["mountPath"] + "/")
    config = yaml.safe_load(cloud_config["data"][key])
    # ...whose cert, key and cacert are files of the client certificate's secret.
    client = one(with_ca, "Certificate", "allset-client")
    for field, file in (("cert", "tls.crt"), ("key", "tls.key"), ("cacert", "ca.crt")):
        volume, mount = mount_of(ca, container, config[field])
        assert volume["secret"]["secretName"] == client["spec"]["secretName"], field
        assert config[field] == f"{mount['mountPath']}/{file}", field
    assert ca["metadata"]["namespace"] == client["metadata"]["namespace"]

    # The label the patch gives CA's pods is the one allset's NetworkPolicy lets in.
    labels = ca["spec"]["template"]["metadata"]["labels"]
    policy = one(with_ca, "NetworkPolicy", "allset")
    grpc_from = next(r for r in policy["spec"]["ingress"]
                     if any(p["port"] == 8086 for p in r["ports"]))
    (peer,) = grpc_from["from"]
    assert set(peer) == {"podSelector"}
    assert peer["podSelector"]["matchLabels"].items() <= labels.items()
    assert ca["spec"]["selector"]["matchLabels"] == {"app": "cluster-autoscaler"}


def _expanders(tmp_path: Path, command: str, *components: Path) -> list[str]:
    ca = CA_DEPLOYMENT.replace(
        "command: [./cluster-autoscaler, --cloud-provider=aws, --expander=random, --v=4]",
        f"command: {command}")
    assert ca != CA_DEPLOYMENT
    where = kustomization(tmp_path, resources=[DEPLOY / "base"], components=list(components),
                          files={"ca.yaml": ca})
    (container,) = containers(one(render(where), "Deployment", "cluster-autoscaler"))
    return [a for a in container["command"] if a.startswith("--expander")]


def test_the_component_keeps_the_users_expander(tmp_path: Path) -> None:
    """Issue 35, item 5: the component appended --expander=price, which silently replaced
    a user's priority expander (a later Go flag wins)."""
    component = DEPLOY / "cluster-autoscaler"
    assert _expanders(tmp_path / "priority",
                      "[./cluster-autoscaler, --expander=priority, --v=4]",
                      component) == ["--expander=priority"]
    assert _expanders(tmp_path / "none", "[./cluster-autoscaler, --v=4]", component) == []
    # The opt-in for a CA without one: price, the expander allset's prices steer.
    assert _expanders(tmp_path / "opt-in", "[./cluster-autoscaler, --v=4]", component,
                      component / "price-expander") == ["--expander=price"]
    guide = " ".join((ROOT / "docs" / "operator-guide.md").read_text().split())
    for words in ("`price` works because", "`priority` works when",
                  "cluster-autoscaler/price-expander"):
        assert words in guide, words


# --- ports, probes, lifecycle ---------------------------------------------------------------


def test_ports_probes_and_network_policy_agree(directory: Path) -> None:
    docs = render(directory)
    deployment, container = _allset(docs)
    args = args_of(container)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": _port(args["--address"]), "health": _port(args["--health-address"]),
                     "metrics": _port(args["--metrics-address"]),
                     "webhook": _port(args["--webhook-address"])}
    assert ports == {"grpc": 8086, "health": 8087, "metrics": 9090, "webhook": 9443}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        # gRPC health on the plaintext port: kubelet has no client certificate.
        assert container[probe]["grpc"]["port"] == ports["health"], probe
    # A standby is alive and ready (its view of the cloud is warm); only the leader is
    # routed to, by its EndpointSlice, never by readiness (that would block rollouts).
    assert container["readinessProbe"]["grpc"]["service"] == READY
    assert container["livenessProbe"]["grpc"]["service"] == LIVE
    # Startup waits for the first cloud listing: a pod that never lists is restarted.
    assert container["startupProbe"]["grpc"]["service"] == READY
    service = one(docs, "Service", "allset")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [ports["grpc"]]
    metrics = one(docs, "Service", "allset-metrics")
    assert [p["targetPort"] for p in metrics["spec"]["ports"]] == ["metrics"]
    policy = one(docs, "NetworkPolicy", "allset")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    allowed = sorted(p["port"] for r in policy["spec"]["ingress"] for p in r["ports"])
    assert allowed == [ports["grpc"], ports["metrics"], ports["webhook"]]
    for rule in policy["spec"]["ingress"]:
        # Every port is open to named peers only, but the webhook's: the API server calls
        # it from the control plane's address, which no selector names.
        assert rule.get("from") or [p["port"] for p in rule["ports"]] == [ports["webhook"]]


def test_two_replicas_rolled_with_time_to_finish(directory: Path) -> None:
    docs = render(directory)
    deployment, container = _allset(docs)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]
           if "valueFrom" in e}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace",
                   "POD_IP": "status.podIP"}
    anti = pod_spec(deployment)["affinity"]["podAntiAffinity"]
    keys = [t["podAffinityTerm"]["topologyKey"]
            for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]]
    assert keys == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    spec = pod_spec(deployment)
    assert spec["terminationGracePeriodSeconds"] >= 120
    # The drain, then the hand-over and exit, end before kubelet's SIGKILL.
    assert float(args_of(container)["--grace"]) + EXIT_MARGIN_SECONDS < \
        spec["terminationGracePeriodSeconds"]
    requests = container["resources"]["requests"]
    assert requests["cpu"] and requests["memory"]
    pdb = one(docs, "PodDisruptionBudget", "allset")
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert pdb["spec"]["minAvailable"] == 1  # a standby always survives a drain
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "ten": 10}


def test_the_docs_give_the_startup_probe_the_time_the_manifests_do() -> None:
    """Issue 35, item 5: the docs said five minutes, the manifests allowed 60 s, and the
    probe read allset.live, so a pod that could not list its cloud was never restarted."""
    _, container = _allset(render(DEPLOY / "base"))
    probe = container["startupProbe"]
    allowed = probe["periodSeconds"] * probe["failureThreshold"]
    assert probe["grpc"]["service"] == READY
    for page in ("operator-guide.md", "troubleshooting.md"):
        text = " ".join((ROOT / "docs" / page).read_text().split())
        said = re.findall(r"startup probe (?:gives it|allows) (\w+) minutes", text)
        assert said, f"docs/{page} does not say how long the startup probe allows"
        assert {_WORDS.get(w, 0) * 60 for w in said} == {allowed}, (page, said, allowed)
        assert "restart" in text[text.find("startup probe"):][:400], page


def test_state_dir_is_writable_and_everything_else_is_mounted_read_only(directory: Path) -> None:
    deployment, container = _allset(render(directory))
    args = args_of(container)
    volume, _ = mount_of(deployment, container, args["--state-dir"] + "/attempts.db")
    assert "emptyDir" in volume
    config_volume, config_mount = mount_of(deployment, container, args["--config"])
    assert config_volume["configMap"]["name"].startswith(("allset-config", "allset-settings"))
    assert config_mount["readOnly"] is True


# --- allset's config in the cluster ----------------------------------------------------------


def _config_text(docs: list[Doc]) -> str:
    deployment, container = _allset(docs)
    volume, mount = mount_of(deployment, container, args_of(container)["--config"])
    config_map = one(docs, "ConfigMap", volume["configMap"]["name"])
    text: str = config_map["data"][args_of(container)["--config"].removeprefix(
        mount["mountPath"] + "/")]
    return text


@pytest.mark.parametrize("install", INSTALLS)
def test_in_cluster_config_is_the_example_and_loads(installs: dict[str, Path], install: str,
                                                    tmp_path: Path) -> None:
    text = _config_text(render(installs[install]))
    in_cluster = yaml.safe_load(text)
    example = {"base": "simulated.yaml", "aws": "aws.yaml", "gcp": "gcp.yaml"}[install]
    expected = yaml.safe_load((ROOT / "deploy" / "examples" / example).read_text())
    if example == "simulated.yaml":
        # The only difference: the simulated cloud's state goes to the writable state dir.
        assert in_cluster["cloud"]["fake"].pop("statePath") == "/var/lib/allset/cloud.db"
        expected["cloud"]["fake"].pop("statePath", None)
    assert in_cluster == expected
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    loaded = load_config(path)
    assert loaded.schema.cloud.provider == {"simulated.yaml": "fake", "aws.yaml": "aws",
                                            "gcp.yaml": "gcp"}[example]


# --- Kueue -----------------------------------------------------------------------------------


def test_kueue_check_points_at_allsets_class() -> None:
    docs = render(DEPLOY / "base")
    (config,) = find(docs, "ProvisioningRequestConfig")
    spec = config["spec"]
    assert spec["provisioningClassName"] == CLASS_NAME
    # None set: one set here could not be changed per workload (Kueue deletes and makes
    # again, endlessly, a request whose parameters differ from its config's).
    assert not spec.get("parameters")
    assert "managedResources" not in spec  # CPU pod sets belong to the gang too
    assert spec["podSetUpdates"]["nodeSelector"] == [{
        "key": conditions.BOOKING_LABEL,
        "valueFromProvisioningClassDetail": conditions.BOOKING_DETAIL,
    }]
    (check,) = find(docs, "AdmissionCheck")
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["spec"]["parameters"] == {"apiGroup": "kueue.x-k8s.io",
                                           "kind": "ProvisioningRequestConfig",
                                           "name": config["metadata"]["name"]}


# --- without cert-manager --------------------------------------------------------------------


def _guide() -> str:
    return (ROOT / "docs" / "operator-guide.md").read_text(encoding="utf-8")


def test_without_cert_manager_the_documented_secrets_are_what_the_pods_mount(
        without_cert_manager: list[Doc], with_ca: list[Doc]) -> None:
    assert not [d for d in without_cert_manager if d["apiVersion"].startswith("cert-manager.io")]
    deployment, container = _allset(without_cert_manager)
    volume, _ = mount_of(deployment, container, args_of(container)["--tls-cert"])
    server_secret = volume["secret"]["secretName"]
    ca = one(with_ca, "Deployment", "cluster-autoscaler")
    client_secret = next(v["secret"]["secretName"] for v in pod_spec(ca)["volumes"]
                         if "secret" in v and v["name"].startswith("allset"))
    guide = _guide()
    commands = re.findall(r"kubectl -n (\S+) create secret generic (\S+)((?:.*\\\n)*.*)", guide)
    made = {name: (ns, body) for ns, name, body in commands}
    for secret in (server_secret, client_secret):
        assert secret in made, f"docs/operator-guide.md does not create {secret}"
        ns, body = made[secret]
        assert ns == NAMESPACE
        keys = set(re.findall(r"--from-file=([\w.]+)=", body))
        assert keys == {"tls.crt", "tls.key", "ca.crt"}, secret
    # ...and the certificates it makes are valid for the address CA dials.
    host = _cloud_config(without_cert_manager)["address"].rpartition(":")[0]
    (certs,) = re.findall(r"^allset certs ((?:.*\\\n)*.*)", guide, flags=re.MULTILINE)[:1]
    assert host in re.findall(r"--server-name[= ](\S+)", certs)


def test_the_documented_allset_certs_run_makes_what_the_secrets_need(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run the guide's `allset certs` command and check its certificates: valid for the
    address CA dials, the client one signed by the CA both sides trust, and every file the
    `kubectl create secret` commands read."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    from provider.cli.main import main

    guide = _guide()
    command = re.findall(r"^allset certs ((?:.*\\\n)*.*)", guide, flags=re.MULTILINE)[0]
    args = shlex.split(command.replace("\\\n", " "))
    out = args[args.index("--out") + 1]
    args[args.index("--out") + 1] = str(tmp_path / out)
    assert main(["certs", *args]) == 0
    printed = capsys.readouterr().out
    host = _cloud_config(render(DEPLOY / "base"))["address"]
    assert f"address: {host}" in printed

    def load(name: str) -> x509.Certificate:
        return x509.load_pem_x509_certificate((tmp_path / out / name).read_bytes())

    server, client, ca = load("server.crt"), load("client.crt"), load("ca.crt")
    names = server.extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert host.rpartition(":")[0] in names
    # ...and for the admission webhook's Service, which the API server dials.
    (hook,) = one(render(DEPLOY / "base"), "MutatingWebhookConfiguration",
                  "allset-gang-pods")["webhooks"]
    service = hook["clientConfig"]["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in names
    server.verify_directly_issued_by(ca)
    client.verify_directly_issued_by(ca)
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
    for source in re.findall(r"--from-file=[\w.]+=(\S+)", guide):
        assert source.startswith(out + "/")
        assert (tmp_path / source).is_file(), source


def test_without_kueue_only_the_kueue_objects_go(tmp_path: Path) -> None:
    where = kustomization(tmp_path, resources=[DEPLOY / "base"],
                          components=[DEPLOY / "components" / "without-kueue"])
    kinds = sorted(d["kind"] for d in render(where))
    with_kueue = sorted(d["kind"] for d in render(DEPLOY / "base"))
    assert "AdmissionCheck" not in kinds and "ProvisioningRequestConfig" not in kinds
    assert len(with_kueue) - len(kinds) == 2


COMPONENTS = [DEPLOY / "components" / "without-kueue",
              DEPLOY / "components" / "without-cert-manager"]


@pytest.mark.parametrize("command", every_renderer() or [None], ids=lambda c: " ".join(
    Path(c[0]).name if i == 0 else a for i, a in enumerate(c)) if c else "none")
@pytest.mark.parametrize("components", [[c] for c in COMPONENTS] + [COMPONENTS],
                         ids=lambda cs: "+".join(c.name for c in cs))
def test_components_render_with_every_kustomize(tmp_path: Path, command: tuple[str, ...] | None,
                                                components: list[Path]) -> None:
    """kubectl's built-in kustomize (5.5 in kubectl 1.32) panicked on the components
    (issue 15, item 3): the guide promises both it and the standalone one work."""
    if command is None:
        require_kustomize()
        pytest.skip("no kustomize")
    where = kustomization(tmp_path, resources=[DEPLOY / "base"], components=components)
    kinds = {d["kind"] for d in render_with(command, where)}
    assert "Deployment" in kinds
    if DEPLOY / "components" / "without-kueue" in components:
        assert not kinds & {"AdmissionCheck", "ProvisioningRequestConfig"}
    if DEPLOY / "components" / "without-cert-manager" in components:
        assert not kinds & {"Issuer", "Certificate"}


def test_no_patch_deletes_more_than_one_object() -> None:
    """A patch holding several `$patch: delete` documents panics kustomize <= 5.5
    (kubernetes-sigs/kustomize#5471); a static check for machines without kubectl."""
    for path in DEPLOY.rglob("kustomization.yaml"):
        body = yaml.safe_load(path.read_text())
        for entry in body.get("patches") or []:
            text = entry.get("patch") or (path.parent / entry["path"]).read_text()
            deletes = [d for d in yaml.safe_load_all(text)
                       if isinstance(d, dict) and d.get("$patch") == "delete"]
            assert len(deletes) <= 1, f"{path}: a patch deletes {len(deletes)} objects"


def test_the_guides_own_overlay_renders(tmp_path: Path) -> None:
    """The kustomization the guide tells operators to write: it renders, with its image,
    config and role in place of the base's, and nothing of the simulated cloud left."""
    guide = _guide()
    (block,) = re.findall(r"```yaml\n# my-cluster/kustomization.yaml\n(.*?)```", guide,
                          flags=re.DOTALL)
    text = block
    for name in ("base", "overlays/aws"):
        text = text.replace(f"<path to>/deploy/kubernetes/{name}",
                            os.path.relpath(DEPLOY / name, tmp_path))
    text = (text.replace("<your registry>", "example").replace("<account>", "123456789012")
            .replace("<cluster>", "prod-east"))
    assert "<" not in text, text
    (tmp_path / "kustomization.yaml").write_text(text, encoding="utf-8")
    config = (ROOT / "deploy" / "examples" / "aws.yaml").read_text(encoding="utf-8")
    (tmp_path / "config.yaml").write_text(config.replace("maxSize: 32", "maxSize: 8"),
                                          encoding="utf-8")
    docs = render(tmp_path)
    deployment, container = _allset(docs)
    assert container["image"] == "example/allset:0.1.0"
    assert "maxSize: 8" in _config_text(docs)
    volume, _ = mount_of(deployment, container, args_of(container)["--config"])
    assert volume["configMap"]["name"].startswith("allset-settings-")  # hashed: rolls
    assert not [d for d in docs if d["metadata"]["name"].startswith("allset-config")]
    sa = one(docs, "ServiceAccount", "allset")
    assert sa["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/allset-prod-east"}


def _settings_keys(cloud: str) -> list[str]:
    return ["config.yaml", "image", IDENTITIES[cloud][0]]


@pytest.mark.parametrize("command", every_renderer() or [None], ids=lambda c: " ".join(
    Path(c[0]).name if i == 0 else a for i, a in enumerate(c)) if c else "none")
@pytest.mark.parametrize(("cloud", "omitted"), [(c, k) for c in IDENTITIES
                                                for k in _settings_keys(c)])
def test_a_required_setting_left_out_stops_the_build(tmp_path: Path,
                                                     command: tuple[str, ...] | None,
                                                     cloud: str, omitted: str) -> None:
    """Issue 53, item 4: a bare `kubectl apply -k overlays/aws` created 19 of 20 objects,
    cluster-scoped ones included, before the API server refused the ServiceAccount. Each
    required setting now stops kustomize itself, so nothing reaches the API server; the
    error names the ConfigMap and the key (tests/e2e/test_manifests.py applies it to a
    real API server)."""
    if command is None:
        require_kustomize()
        pytest.skip("no kustomize")
    complete = render_with(command, cloud_install(tmp_path / "complete", cloud))
    assert one(complete, "ServiceAccount", "allset")["metadata"]["annotations"] == {
        IDENTITIES[cloud][1]: IDENTITIES[cloud][2]}
    with pytest.raises(AssertionError) as refused:
        render_with(command, cloud_install(tmp_path / "partial", cloud, omit=[omitted]))
    assert "allset-settings" in str(refused.value) and omitted in str(refused.value)


@pytest.mark.parametrize("command", every_renderer() or [None], ids=lambda c: " ".join(
    Path(c[0]).name if i == 0 else a for i, a in enumerate(c)) if c else "none")
@pytest.mark.parametrize("cloud", sorted(IDENTITIES))
def test_a_cloud_component_on_its_own_stops_the_build(command: tuple[str, ...] | None,
                                                      cloud: str) -> None:
    if command is None:
        require_kustomize()
        pytest.skip("no kustomize")
    with pytest.raises(AssertionError) as refused:
        render_with(command, DEPLOY / "overlays" / cloud)
    assert "allset-settings" in str(refused.value)
    guide = " ".join(_guide().split())
    assert "stops before anything reaches the API server" in guide
