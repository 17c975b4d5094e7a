"""The Kubernetes calls of the gang bridge (provider/controller/gang_bridge.py). Each is
listed in CALLS (provider/controller/kube.py) and granted in deploy/."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from provider.controller.kube import GROUP, PLURAL, Conflict, Gone, call, unfenced
from provider.domain.gangs.sources import GangSource

_SERVED_TTL = 300.0  # how long the list of served group versions is believed


class GangApi:
    """Writes that steer the cloud (a request created or deleted, what it counts, a gang's
    state) pass the fence before each try and are bounded by ``write_timeout``, as
    KubeApi's are. It never writes a pod: allset's admission webhook marks a gang's pods
    when they are created (provider/controller/gang_marks.py)."""

    def __init__(self, api: client.ApiClient, version: str = "v1", *,
                 monotonic: Callable[[], float] = time.monotonic,
                 write_timeout: float | None = None,
                 read_timeout: float | None = None) -> None:
        """``read_timeout``: how long a read of a gang or a request may take (None: the
        client's own), for a caller that must answer within a deadline (the webhook)."""
        self.version = version  # of ProvisioningRequests
        self._write_timeout = write_timeout
        self._read_timeout = read_timeout
        self._fence: Callable[[], None] = unfenced
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._apis = client.ApisApi(api)
        self._monotonic = monotonic
        self._served: frozenset[str] = frozenset()  # group versions, as "group/version"
        self._listed_at = float("-inf")
        self._ever_listed = False

    def fence_with(self, check: Callable[[], None]) -> None:
        """``check`` raises (NotLeader) when this process may not act."""
        self._fence = check

    def served(self, source: GangSource) -> GangSource | None:
        """The source in the version of its API the cluster serves (the first of its
        ``readable`` versions that is), or None. CRD-based ones exist only where installed,
        the native one only behind feature gates, and in a version that depends on the
        Kubernetes release. One request answers for every source: GET /apis, the API
        server's list of the group versions it serves (unaggregated discovery, the
        APIGroupList), asked again every few minutes, and at once after a read found a
        version gone (``forget_served``: an upgraded cluster); a GET of each group
        version's own document was one request per source."""
        if not source.group:
            return source  # the core API (a YuniKorn gang is read from its pods)
        now = self._monotonic()
        if now - self._listed_at >= _SERVED_TTL:
            try:
                listed = call(self._apis.get_api_versions, _preload_content=False,
                              _request_timeout=self._read_timeout)
                self._served = frozenset(
                    str(v.get("groupVersion")) for g in listed.get("groups") or []
                    for v in g.get("versions") or [])
            except ApiException as err:
                if err.status != 403:  # discovery denied: as if nothing were served
                    raise
                self._served = frozenset()
            self._listed_at = now
            self._ever_listed = True
        for version in source.readable:
            if f"{source.group}/{version}" in self._served:
                return source.at(version)
        return None

    def cluster_object(self, group: str, version: str, plural: str, name: str
                       ) -> dict[str, Any] | None:
        """A cluster-scoped object (a scheduler's Queue, a PriorityClass), or None when it
        does not exist; Unserved when its API is not served at all."""
        try:
            found: dict[str, Any] = call(self._custom.get_cluster_custom_object, group,
                                          version, plural, name)
        except Gone as err:
            if _resource_gone(err):
                raise Unserved(f"{plural}.{group}/{version} is not served") from err
            return None
        return found

    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = call(self._core.read_namespaced_config_map, name,
                                          namespace, _preload_content=False)
        except Gone:
            return None
        return found

    def scheduled_by(self, scheduler: str) -> list[dict[str, Any]]:
        """Every pod of every namespace that names ``scheduler`` (spec.schedulerName)."""
        body: dict[str, Any] = call(self._core.list_pod_for_all_namespaces,
                                     field_selector=f"spec.schedulerName={scheduler}",
                                     _preload_content=False)
        return list(body.get("items", []))

    def forget_served(self) -> None:
        """The served versions are asked for again on the next ``served``."""
        self._listed_at = float("-inf")

    def was_served(self, source: GangSource) -> GangSource | None:
        """What ``served`` found when it last asked (the source in its preferred version
        before it ever did), for a caller that must decide while the API server cannot
        answer."""
        if not self._ever_listed:
            return source
        for version in source.readable:
            if f"{source.group}/{version}" in self._served:
                return source.at(version)
        return None

    def pending_pods(self) -> list[dict[str, Any]]:
        body: dict[str, Any] = call(self._core.list_pod_for_all_namespaces,
                                     field_selector="status.phase=Pending",
                                     _preload_content=False)
        return list(body.get("items", []))

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        body: dict[str, Any] = call(self._core.list_namespaced_pod, namespace,
                                     _preload_content=False)
        return list(body.get("items", []))

    def gang(self, source: GangSource, namespace: str, name: str) -> dict[str, Any] | None:
        """The gang object: a PodGroup, or (a source of the core API: YuniKorn) the pod that
        is its application's originator."""
        try:
            if not source.group:
                pod: dict[str, Any] = call(self._core.read_namespaced_pod, name, namespace,
                                           _preload_content=False)
                return pod
            found: dict[str, Any] = call(self._custom.get_namespaced_custom_object,
                                          source.group, source.version, namespace,
                                          source.plural, name,
                                          _request_timeout=self._read_timeout)
        except Gone as err:
            if _resource_gone(err):
                # Not this object: the API version itself (the cluster was upgraded and
                # serves another one). Discovery is asked again on the next pass.
                self.forget_served()
            return None
        return found

    def annotate_gang(self, source: GangSource, namespace: str, name: str,
                      annotations: Mapping[str, str | None], resource_version: str = ""
                      ) -> dict[str, Any]:
        """Merge ``annotations`` into the gang's; with ``resource_version`` only onto the
        object as this replica read it (Conflict otherwise). Returns the gang as written."""
        self._fence()
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version:
            meta["resourceVersion"] = resource_version
        if not source.group:
            pod: dict[str, Any] = call(self._core.patch_namespaced_pod, name, namespace,
                                       {"metadata": meta}, _preload_content=False,
                                       _request_timeout=self._write_timeout)
            return pod
        written: dict[str, Any] = call(
            self._custom.patch_namespaced_custom_object, source.group, source.version,
            namespace, source.plural, name, {"metadata": meta},
            _request_timeout=self._write_timeout)
        return written

    def request(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = call(self._custom.get_namespaced_custom_object, GROUP,
                                          self.version, namespace, PLURAL, name,
                                          _request_timeout=self._read_timeout)
        except Gone:
            return None
        return found

    def gang_requests(self, label: str, namespace: str | None = None
                      ) -> list[dict[str, Any]]:
        """Requests the bridge made (labelled ``label``), in one namespace or every one."""
        if namespace is not None:
            body: dict[str, Any] = call(self._custom.list_namespaced_custom_object, GROUP,
                                        self.version, namespace, PLURAL, label_selector=label)
            return list(body.get("items", []))
        body = call(self._custom.list_cluster_custom_object, GROUP, self.version, PLURAL,
                    label_selector=label)
        return list(body.get("items", []))

    def annotate_request(self, namespace: str, name: str,
                         annotations: Mapping[str, str | None], resource_version: str
                         ) -> None:
        """Merge ``annotations`` into a request's, only onto the request as this replica
        read it (Conflict otherwise)."""
        self._fence()
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if resource_version:
            meta["resourceVersion"] = resource_version
        call(self._custom.patch_namespaced_custom_object, GROUP, self.version, namespace,
             PLURAL, name, {"metadata": meta}, _request_timeout=self._write_timeout)

    def create_request(self, namespace: str, body: Mapping[str, Any]) -> None:
        self._fence()
        call(self._custom.create_namespaced_custom_object, GROUP, self.version, namespace,
             PLURAL, dict(body), _request_timeout=self._write_timeout)

    def delete_request(self, namespace: str, name: str, uid: str = "",
                       resource_version: str = "") -> None:
        """Delete the request as this replica read it: with its uid and resourceVersion as
        preconditions, a delete prepared from an older read (a successor's request that
        took the name, or one changed since) is refused by the API server and left for the
        next pass to judge again."""
        self._fence()
        preconditions = client.V1Preconditions(uid=uid or None,
                                               resource_version=resource_version or None)
        with contextlib.suppress(Gone, Conflict):  # gone already; changed since it was read
            call(self._custom.delete_namespaced_custom_object, GROUP, self.version,
                 namespace, PLURAL, name, _request_timeout=self._write_timeout,
                 body=client.V1DeleteOptions(preconditions=preconditions))

    def pod_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = call(self._core.read_namespaced_pod_template, name,
                                          namespace, _preload_content=False)
        except Gone:
            return None
        return found

    def create_pod_template(self, namespace: str, body: Mapping[str, Any]) -> None:
        self._fence()
        call(self._core.create_namespaced_pod_template, namespace, dict(body),
             _request_timeout=self._write_timeout)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        call(self._core.create_namespaced_event, namespace, dict(event),
             _request_timeout=self._write_timeout)


class Unserved(Exception):
    """The API of what was asked for is not served by this cluster."""


def _resource_gone(err: Gone) -> bool:
    """A 404 for the resource, not the object: a missing object's Status names it in
    ``details.name``; a resource the group version does not have gets a Status without
    one, and a group version not served at all a plain-text "404 page not found"."""
    body = getattr(err.__cause__, "body", None)
    if not isinstance(body, (str, bytes)):
        return False
    try:
        status = json.loads(body)
    except ValueError:
        return True
    details = status.get("details") if isinstance(status, dict) else None
    return not (isinstance(details, dict) and details.get("name"))
