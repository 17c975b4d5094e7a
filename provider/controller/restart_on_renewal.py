"""Restart Cluster Autoscaler once cert-manager renewed its client certificate (issue 53,
item 7): `allset restart-on-renewal`, run by a CronJob in allset's namespace.

CA reads its externalgrpc cloud-config's certificate and key once, at start. cert-manager
renews them in the Secret CA mounts (30 days before the end), and the kubelet updates the
mounted files, but CA keeps presenting what it read: a person had to restart it. This
restarts it, and only when needed: when a pod of CA's Deployment runs a container that
started before the certificate now in the Secret was issued (the Certificate's
status.notBefore), it stamps that time on the Deployment's pod template (an annotation), as
`kubectl rollout restart` stamps its own, and the Deployment rolls its pods, which read the
new files. The stamp makes it once per renewal, whatever the schedule.

Least privilege: its ServiceAccount may read one Certificate, read and patch one Deployment,
and list the pods of its namespace; no Secret (the certificate's key is in it), nothing
elsewhere. allset itself, which sees the certificate CA presents
(provider/service/peer_certs.py), gets no right over CA's Deployment."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provider.controller.kube import Call, Gone, call

RESTARTED_FOR = "allset.dev/restarted-for-certificate"
# How long after a renewal a container may have started and still read the old files: the
# kubelet projects a changed Secret into a running pod's volume on its sync (about a
# minute); a pod made afterwards mounts the new one. A container started within this
# margin is restarted once more, which costs a restart, not a stale certificate.
PROPAGATION_SECONDS = 120.0

CERT_MANAGER = ("cert-manager.io", "v1", "certificates")


def calls(deployment: str, certificate: str) -> tuple[Call, ...]:
    """Every API call it makes, as RBAC sees them (deploy/ grants exactly these, to a
    ServiceAccount of its own, in CA's namespace only)."""
    return (Call("cert-manager.io", "certificates", ("get",), namespaced=True,
                 names=(certificate,)),
            Call("apps", "deployments", ("get", "patch"), namespaced=True,
                 names=(deployment,)),
            Call("", "pods", ("list",), namespaced=True))


@dataclass(frozen=True, slots=True)
class Verdict:
    restart: bool
    why: str
    issued: str = ""  # the renewed certificate's notBefore, stamped on the pod template


def _time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _started(pod: Mapping[str, Any]) -> list[dt.datetime]:
    """When each running container of ``pod`` started."""
    out = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (status.get("state") or {}).get("running") or {}
        started = _time(running.get("startedAt"))
        if started is not None:
            out.append(started)
    return out


def decide(certificate: Mapping[str, Any], deployment: Mapping[str, Any],
           pods: Sequence[Mapping[str, Any]]) -> Verdict:
    """Whether CA's Deployment must be restarted for ``certificate`` (pure)."""
    issued_text = (certificate.get("status") or {}).get("notBefore")
    issued = _time(issued_text)
    if issued is None:
        return Verdict(False, "the certificate has not been issued yet")
    template = ((deployment.get("spec") or {}).get("template") or {}).get("metadata") or {}
    if (template.get("annotations") or {}).get(RESTARTED_FOR) == issued_text:
        return Verdict(False, f"restarted for the certificate issued at {issued_text} already")
    fresh_from = issued + dt.timedelta(seconds=PROPAGATION_SECONDS)
    running = [(str((p.get("metadata") or {}).get("name")), _started(p)) for p in pods
               if not (p.get("metadata") or {}).get("deletionTimestamp")]
    running = [(name, started) for name, started in running if started]
    if not running:
        return Verdict(False, "no pod of the Deployment runs: the next one reads the "
                              "current certificate")
    stale = sorted(name for name, started in running if min(started) < fresh_from)
    if not stale:
        return Verdict(False, f"every pod started after the certificate issued at "
                              f"{issued_text}")
    return Verdict(True, f"{', '.join(stale)} started before the certificate issued at "
                         f"{issued_text}", str(issued_text))


class RestartOnRenewal:
    """The three reads and the one write, through the official client."""

    def __init__(self, api: Any, namespace: str, deployment: str, certificate: str) -> None:
        from kubernetes import client

        self._apps = client.AppsV1Api(api)
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self.namespace, self.deployment, self.certificate = namespace, deployment, certificate

    def run(self, *, dry_run: bool = False) -> Verdict:
        """Read, decide, and restart when the verdict says so (not with ``dry_run``).
        A Certificate or Deployment that does not exist is Gone (naming which)."""
        group, version, plural = CERT_MANAGER
        try:
            certificate = call(self._custom.get_namespaced_custom_object, group, version,
                               self.namespace, plural, self.certificate)
        except Gone as err:
            raise Gone(f"Certificate {self.namespace}/{self.certificate}") from err
        try:
            deployment = call(self._apps.read_namespaced_deployment, self.deployment,
                              self.namespace, _preload_content=False)
        except Gone as err:
            raise Gone(f"Deployment {self.namespace}/{self.deployment}") from err
        labels = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        pods = call(self._core.list_namespaced_pod, self.namespace, label_selector=selector,
                    _preload_content=False)
        verdict = decide(certificate, deployment, pods.get("items") or [])
        if verdict.restart and not dry_run:
            call(self._apps.patch_namespaced_deployment, self.deployment, self.namespace, {
                "spec": {"template": {"metadata": {"annotations": {
                    RESTARTED_FOR: verdict.issued}}}}})
        return verdict
