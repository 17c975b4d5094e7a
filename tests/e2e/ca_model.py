"""Cluster Autoscaler's per-pod scale-up, as far as the race with the gang bridge goes
(issue 53, item 6), as a client of allset's gRPC service like CA's externalgrpc one.

Every ``period`` it lists the pending pods, keeps those the scheduler found no room for
(PodScheduled False with reason Unschedulable: CA's unschedulable pods) that consume no
ProvisioningRequest (CA's ProvisioningRequestPodsFilter, installed with
--enable-provisioning-requests, drops any pod that carries the annotation
autoscaling.x-k8s.io/consume-provisioning-request, whatever it names:
processors/provreq/provisioning_request_pods_filter.go), and for each pod it has not
scaled for yet calls NodeGroupIncreaseSize(group, 1) on the group the pod selects (its
nodeSelector allset.dev/node-group). CA itself would batch the pods of one loop, simulate
where they fit and pick a group with its expander; for a pod that selects one group and
fits one per node, that is a node per pod in that group, which is all this models. It acts
at once, with no --new-pod-scale-up-delay and no loop interval to wait: the worst moment
for the race, every moment."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import grpc

from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.e2e.rest import Obj, Rest

CONSUME_KEYS = ("autoscaling.x-k8s.io/consume-provisioning-request",
                "cluster-autoscaler.kubernetes.io/consume-provisioning-request")
GROUP_LABEL = "allset.dev/node-group"


def unschedulable(pod: Obj) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and
               c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def left_to_a_request(pod: Obj) -> bool:
    notes = (pod.get("metadata") or {}).get("annotations") or {}
    return any(key in notes for key in CONSUME_KEYS)


@dataclass
class PerPodScaleUp:
    rest: Rest
    stub: pb_grpc.CloudProviderStub
    period: float = 0.05
    scaled: list[tuple[str, str]] = field(default_factory=list)  # (pod, group) per call
    refused: list[str] = field(default_factory=list)
    seen_unschedulable: int = 0  # pods it judged, marked or not

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._done: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="per-pod-scale-up",
                                        daemon=True)

    def start(self) -> PerPodScaleUp:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.loop_once()
            except Exception as err:  # the API server or allset restarting: next loop
                self.refused.append(f"loop failed: {err}")
            self._stop.wait(self.period)

    def loop_once(self) -> None:
        pending = self.rest.call("GET", "/api/v1/pods?fieldSelector=status.phase%3DPending")
        for pod in pending.get("items") or []:
            meta = pod["metadata"]
            key = f"{meta['namespace']}/{meta['name']}/{meta['uid']}"
            if key in self._done or not unschedulable(pod):
                continue
            self._done.add(key)
            self.seen_unschedulable += 1
            group = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(GROUP_LABEL)
            if left_to_a_request(pod) or not group:
                continue
            try:
                self.stub.NodeGroupIncreaseSize(
                    pb.NodeGroupIncreaseSizeRequest(id=group, delta=1), timeout=5)
                self.scaled.append((key, group))
            except grpc.RpcError as err:  # above maxSize, say: CA would back off
                self.refused.append(f"{key}: {err.code()} {err.details()}")
