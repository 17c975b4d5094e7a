"""A fake Kubernetes API server for the real `kubernetes` client (plain HTTP on
127.0.0.1). Serves ProvisioningRequests (autoscaling.x-k8s.io v1 and v1beta1, one
storage, status subresource), PodTemplates, Nodes, Pods, core Events, Leases,
EndpointSlices, DRA's ResourceClaimTemplates, ResourceClaims and DeviceClasses
(resource.k8s.io v1), the PodGroups of three gang APIs (scheduling.k8s.io v1beta1, v1alpha3
and v1alpha2, with CompositePodGroups in v1alpha3; scheduling.x-k8s.io v1alpha1,
scheduling.volcano.sh v1beta1; ``FakeKube(absent_groups=...)`` leaves groups or versions
out), and discovery (GET /apis/<group>/<version>).

    from kubernetes import client
    from provider.controller.kube import KubeApi
    from tests.fakes.kube import FakeKube, objects

    with FakeKube() as kube, kube.client() as api:
        kube.create(objects.pod_template("team-a", "gpu", {"nvidia.com/gpu": "8"}))
        kube.create(objects.node("n1", {"pool": "gpu"}, ready=False))
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", "team-a", "provisioningrequests",
            objects.provisioning_request("team-a", "job-1", {"gpu": 2}))
        kube.create(objects.pod("team-a", "p1"))
        kube.inject_conflicts("provisioningrequests", "job-1", "team-a")  # next write: 409
        kube.compact()                        # any watch from an older version: 410
        kube.set_node_ready("n1")             # what the kubelet reports
        kube.bind_pod("team-a", "p1", "n1")   # what the scheduler does
        ...                                   # run the controller against KubeApi(api)
        kube.get("provisioningrequests", "job-1", "team-a")   # the outcome, as stored
        kube.count("update", "provisioningrequests/status")

Modules: store (semantics), server (HTTP and watch), resources (paths), patch,
validation (CRD rules), selectors, objects (builders), fake (the FakeKube handle)."""

from tests.fakes.kube import objects
from tests.fakes.kube.errors import ApiError
from tests.fakes.kube.fake import FakeKube

__all__ = ["ApiError", "FakeKube", "objects"]
