"""The resources the fake serves and how a request path names one of them."""

from __future__ import annotations

from dataclasses import dataclass

from tests.fakes.kube import errors

PROVREQ_GROUP = "autoscaling.x-k8s.io"


@dataclass(frozen=True)
class Resource:
    group: str  # "" is the core group
    versions: tuple[str, ...]  # all served from the same storage
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool
    # Custom resources behave as unstructured objects do: list items carry kind and
    # apiVersion, an update must name the resourceVersion it replaces, bodies must say
    # their kind, and strategic merge patch is refused (415).
    custom: bool
    # What DELETE answers once the object is gone: the object, or a Success Status.
    delete_returns_object: bool

    @property
    def qualified(self) -> str:
        """How messages name the resource: ``pods``, ``provisioningrequests.<group>``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def kind_group(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version


# A custom resource whose DELETE removes it at once answers a Success Status naming it (a
# deletion held by finalizers answers the object): what the e2e suite's kube-apiserver
# v1.36.3 does (tests/e2e/test_fake_agrees.py, probe_gang_pods_and_requests and
# probe_podgroup_annotations).
PROVISIONING_REQUESTS = Resource(PROVREQ_GROUP, ("v1", "v1beta1"), "provisioningrequests",
                                 "ProvisioningRequest", namespaced=True,
                                 status_subresource=True, custom=True,
                                 delete_returns_object=False)
POD_TEMPLATES = Resource("", ("v1",), "podtemplates", "PodTemplate", namespaced=True,
                         status_subresource=False, custom=False, delete_returns_object=True)
NODES = Resource("", ("v1",), "nodes", "Node", namespaced=False, status_subresource=True,
                 custom=False, delete_returns_object=False)
PODS = Resource("", ("v1",), "pods", "Pod", namespaced=True, status_subresource=True,
                custom=False, delete_returns_object=True)
EVENTS = Resource("", ("v1",), "events", "Event", namespaced=True, status_subresource=False,
                  custom=False, delete_returns_object=False)

# coordination.k8s.io/v1 Lease: a built-in, namespaced, no status subresource; an update
# naming a stale resourceVersion is a 409, as for every object (leader election relies on
# it: k8s.io/client-go/tools/leaderelection/resourcelock/leaselock.go).
LEASES = Resource("coordination.k8s.io", ("v1",), "leases", "Lease", namespaced=True,
                  status_subresource=False, custom=False, delete_returns_object=False)

# discovery.k8s.io/v1 EndpointSlice: built-in, namespaced; the leader writes its own.
ENDPOINT_SLICES = Resource("discovery.k8s.io", ("v1",), "endpointslices", "EndpointSlice",
                           namespaced=True, status_subresource=False, custom=False,
                           delete_returns_object=False)

# resource.k8s.io/v1 (DRA, GA since Kubernetes 1.34): the objects a pod's claims name.
# Scope and the status subresource as the API reference has them
# (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-claim-v1/,
# resource-claim-template-v1/, and config-and-storage-resources/device-class-v1/) and as
# the e2e suite's kube-apiserver v1.36.3 lists them in discovery; DELETE answers with the
# object there for all three (tests/e2e/test_fake_agrees.py probes it).
DRA_GROUP = "resource.k8s.io"
RESOURCE_CLAIM_TEMPLATES = Resource(DRA_GROUP, ("v1",), "resourceclaimtemplates",
                                    "ResourceClaimTemplate", namespaced=True,
                                    status_subresource=False, custom=False,
                                    delete_returns_object=True)
RESOURCE_CLAIMS = Resource(DRA_GROUP, ("v1",), "resourceclaims", "ResourceClaim",
                           namespaced=True, status_subresource=True, custom=False,
                           delete_returns_object=True)
DEVICE_CLASSES = Resource(DRA_GROUP, ("v1",), "deviceclasses", "DeviceClass",
                          namespaced=False, status_subresource=False, custom=False,
                          delete_returns_object=True)

# PodGroups of the three gang APIs allset's gang bridge reads (provider/domain/gangs/sources.py).
# All three are namespaced and share the plural ``podgroups``: the fake keys resources by
# (group, plural), as the API server does.
# - Kubernetes' own (KEP-4671 and KEP-5832 "Decouple PodGroup from Workload API",
#   github.com/kubernetes/enhancements keps/sig-scheduling/5832-decouple-podgroup-api): a
#   built-in with a status subresource, served only with the GenericWorkload feature gate
#   and a --runtime-config: scheduling.k8s.io/v1alpha2 in Kubernetes 1.36, v1beta1 and
#   v1alpha3 in 1.37 (k8s.io/api v0.37.2 has no v1alpha2; pkg/controlplane/instance.go
#   of v1.37.2 lists v1beta1 among the beta versions off by default, v1alpha3 among the
#   alpha ones). The fake serves all three from one storage, as a server converting
#   between versions would for the fields allset reads; a test picks the versions of its
#   cluster with ``absent_groups=("scheduling.k8s.io/v1alpha2", ...)``. Its
#   CompositePodGroup (groups of gangs) is in v1alpha3 only (scheduling/v1alpha3/
#   register.go of v0.37.2; v1beta1's registers Workload and PodGroup alone).
# - scheduler-plugins coscheduling (scheduling.x-k8s.io/v1alpha1): a CRD, Namespaced,
#   ``subresources: {status: {}}`` (github.com/kubernetes-sigs/scheduler-plugins,
#   manifests/coscheduling/crd.yaml). tests/e2e/test_fake_agrees.py installs a CRD of
#   that shape on the real server and probes discovery, patch and DELETE.
# - Volcano (scheduling.volcano.sh/v1beta1): a CRD, Namespaced, ``subresources: {}`` (no
#   status subresource: github.com/volcano-sh/volcano,
#   config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml).
NATIVE_POD_GROUPS = Resource("scheduling.k8s.io", ("v1beta1", "v1alpha3", "v1alpha2"),
                             "podgroups", "PodGroup", namespaced=True,
                             status_subresource=True, custom=False,
                             delete_returns_object=True)
COMPOSITE_POD_GROUPS = Resource("scheduling.k8s.io", ("v1alpha3",), "compositepodgroups",
                                "CompositePodGroup", namespaced=True,
                                status_subresource=True, custom=False,
                                delete_returns_object=True)
COSCHEDULING_POD_GROUPS = Resource("scheduling.x-k8s.io", ("v1alpha1",), "podgroups",
                                   "PodGroup", namespaced=True, status_subresource=True,
                                   custom=True, delete_returns_object=False)
VOLCANO_POD_GROUPS = Resource("scheduling.volcano.sh", ("v1beta1",), "podgroups", "PodGroup",
                              namespaced=True, status_subresource=False, custom=True,
                              delete_returns_object=False)

# NVIDIA KAI Scheduler (github.com/NVIDIA/KAI-scheduler v0.12.0,
# deployments/kai-scheduler/crds/): PodGroup scheduling.run.ai/v2alpha2, Namespaced, with a
# status subresource (scheduling.run.ai_podgroups.yaml); Queue scheduling.run.ai/v2,
# Cluster-scoped, with a status subresource (scheduling.run.ai_queues.yaml).
KAI_POD_GROUPS = Resource("scheduling.run.ai", ("v2alpha2",), "podgroups", "PodGroup",
                          namespaced=True, status_subresource=True, custom=True,
                          delete_returns_object=False)
KAI_QUEUES = Resource("scheduling.run.ai", ("v2",), "queues", "Queue", namespaced=False,
                      status_subresource=True, custom=True, delete_returns_object=False)
# Volcano's Queue (scheduling.volcano.sh/v1beta1): Cluster-scoped, ``subresources:
# {status: {}}`` (volcano.sh/volcano v1.10.0, config/crd/volcano/bases/
# scheduling.volcano.sh_queues.yaml).
VOLCANO_QUEUES = Resource("scheduling.volcano.sh", ("v1beta1",), "queues", "Queue",
                          namespaced=False, status_subresource=True, custom=True,
                          delete_returns_object=False)
# scheduling.k8s.io/v1 PriorityClass and core ConfigMap: built-ins (the API reference's
# scheduling-resources/priority-class-v1 and config-and-storage-resources/config-map-v1).
PRIORITY_CLASSES = Resource("scheduling.k8s.io", ("v1",), "priorityclasses", "PriorityClass",
                            namespaced=False, status_subresource=False, custom=False,
                            delete_returns_object=False)
CONFIG_MAPS = Resource("", ("v1",), "configmaps", "ConfigMap", namespaced=True,
                       status_subresource=False, custom=False, delete_returns_object=False)

# Kueue's Workload (kueue.x-k8s.io): a CRD, Namespaced, served as v1beta1 and v1beta2
# (v1beta2 stored) with a status subresource, in Kueue v0.17.0's
# config/components/crd/bases/kueue.x-k8s.io_workloads.yaml. Kueue owns the requests it
# creates by one (SetControllerReference in pkg/controller/admissionchecks/provisioning).
WORKLOADS = Resource("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads", "Workload",
                     namespaced=True, status_subresource=True, custom=True,
                     delete_returns_object=False)

RESOURCES: tuple[Resource, ...] = (PROVISIONING_REQUESTS, POD_TEMPLATES, NODES, PODS, EVENTS,
                                   LEASES, ENDPOINT_SLICES, RESOURCE_CLAIM_TEMPLATES,
                                   RESOURCE_CLAIMS, DEVICE_CLASSES, NATIVE_POD_GROUPS,
                                   COMPOSITE_POD_GROUPS, COSCHEDULING_POD_GROUPS,
                                   VOLCANO_POD_GROUPS, WORKLOADS, KAI_POD_GROUPS, KAI_QUEUES,
                                   VOLCANO_QUEUES, PRIORITY_CLASSES, CONFIG_MAPS)
BY_KEY = {(r.group, r.plural): r for r in RESOURCES}
GROUPS = frozenset(r.group for r in RESOURCES if r.group)
GROUP_VERSIONS = frozenset(f"{r.group}/{v}" for r in RESOURCES if r.group for v in r.versions)


def served(group: str, version: str, absent: frozenset[str]) -> bool:
    """Whether this cluster serves ``group``/``version``: ``absent`` names groups not
    installed at all, and group versions not switched on (``group/version``)."""
    return group not in absent and f"{group}/{version}" not in absent


def by_plural(plural: str, group: str | None = None) -> Resource:
    """The resource ``plural`` names; ``group`` is needed only where plurals collide
    (``podgroups``)."""
    found = [r for r in RESOURCES if r.plural == plural and group in (None, r.group)]
    if len(found) == 1:
        return found[0]
    if found:
        raise KeyError(f"{plural!r} is served by several groups "
                       f"({', '.join(sorted(r.group for r in found))}): pass group=")
    raise KeyError(f"fakekube serves {sorted({r.plural for r in RESOURCES})}"
                   f"{'' if group is None else f' in {group!r}'}, not {plural!r}")


def by_kind(api_version: str, kind: str) -> tuple[Resource, str]:
    """The resource and version an object's ``apiVersion``/``kind`` name."""
    group, _, version = api_version.rpartition("/")
    for r in RESOURCES:
        if r.group == group and r.kind == kind and version in r.versions:
            return r, version
    raise KeyError(f"fakekube does not serve {kind} in {api_version}")


def group_list(absent: frozenset[str]) -> dict[str, object]:
    """GET /apis: the APIGroupList of the groups the fake serves, each with its versions
    and the first as preferred (unaggregated discovery, as a client that accepts plain
    JSON gets it: https://kubernetes.io/docs/concepts/overview/kubernetes-api/
    #discovery-api). A group not installed is not listed, as on the e2e suite's
    kube-apiserver (tests/e2e/test_fake_agrees.py probes both)."""
    versions: dict[str, list[str]] = {}
    for r in RESOURCES:
        if r.group and r.group not in absent:
            have = versions.setdefault(r.group, [])
            have += [v for v in r.versions if v not in have and served(r.group, v, absent)]
    groups = []
    for group, found in sorted(versions.items()):
        if not found:
            continue
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in found]
        groups.append({"name": group, "versions": listed, "preferredVersion": listed[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def discovery(group: str, version: str, absent: frozenset[str]) -> dict[str, object]:
    """GET /apis/<group>/<version>: the APIResourceList of what the fake serves there
    (unaggregated discovery: https://kubernetes.io/docs/concepts/overview/kubernetes-api/
    #discovery-api). A group that is not
    installed (a CRD never created, an API behind a feature gate) or a version it does not
    serve answers 404, as the e2e suite's kube-apiserver v1.36.3 does
    (tests/e2e/test_fake_agrees.py probes both)."""
    here = [r for r in RESOURCES
            if r.group == group and version in r.versions and served(group, version, absent)]
    if not group or not here:
        raise errors.no_route()
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    listed: list[dict[str, object]] = []
    for r in here:
        listed.append({"name": r.plural, "singularName": r.kind.lower(),
                       "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs})
        if r.status_subresource:
            listed.append({"name": f"{r.plural}/status", "singularName": "",
                           "namespaced": r.namespaced, "kind": r.kind,
                           "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}", "resources": listed}


@dataclass(frozen=True)
class Route:
    resource: Resource
    version: str
    namespace: str  # "" for cluster-scoped resources and all-namespace lists
    name: str  # "" for collections
    subresource: str  # "" or "status"

    @property
    def counted(self) -> str:
        """The resource as RBAC names it: ``provisioningrequests/status``."""
        sub = f"/{self.subresource}" if self.subresource else ""
        return self.resource.plural + sub


def parse(path: str, absent: frozenset[str] = frozenset()) -> Route:
    """``/api/v1/namespaces/ns/pods/p`` or ``/apis/<group>/<version>/<plural>`` and so
    on. Raises ApiError 404 for anything the fake does not serve, and for every path of a
    group in ``absent`` (not installed in this cluster)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise errors.no_route()
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise errors.no_route()
    plural, name, sub = rest[0], *([*rest[1:], "", ""])[:2]
    resource = BY_KEY.get((group, plural))
    if resource is None or not served(group, version, absent) or \
            version not in resource.versions:
        raise errors.no_route()
    if namespace and not resource.namespaced:
        raise errors.no_route()
    if name and resource.namespaced and not namespace:
        raise errors.no_route()
    if sub and (sub != "status" or not resource.status_subresource):
        raise errors.no_route()
    return Route(resource, version, namespace, name, sub)
