"""What a user sees through the API, and what the simulated cloud holds: the reads the
scenarios assert on."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from provider.domain.cloud import CloudInstance, InstanceState
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.e2e.kueue import CHECK, KUEUE
from tests.e2e.rest import Obj, Rest, condition, is_true, wait_for

PROVREQ = "autoscaling.x-k8s.io"
BOOKING_LABEL = "allset.dev/booking"


def workload_of(rest: Rest, owner: str, namespace: str = "default") -> Obj | None:
    """The Workload Kueue made for a Job (owner reference) or a pod group (its name)."""
    for wl in rest.list(KUEUE, "Workload", namespace):
        owners = {o.get("name") for o in wl["metadata"].get("ownerReferences") or []}
        labels = wl["metadata"].get("labels") or {}
        if owner in owners or wl["metadata"]["name"] == owner or \
                labels.get("kueue.x-k8s.io/pod-group-name") == owner:
            return wl
    return None


def provreqs_of(rest: Rest, workload: str, namespace: str = "default",
                version: str = "v1") -> list[Obj]:
    prefix = f"{workload}-{CHECK}-"
    return sorted((r for r in rest.list(f"{PROVREQ}/{version}", "ProvisioningRequest",
                                        namespace)
                   if r["metadata"]["name"].startswith(prefix)),
                  key=lambda r: r["metadata"]["name"])


def last_provreq(rest: Rest, workload: str, namespace: str = "default") -> Obj | None:
    found = provreqs_of(rest, workload, namespace)
    return found[-1] if found else None


def not_true(obj: Obj | None, ctype: str) -> bool:
    return not is_true(obj, ctype)


def admitted(workload: Obj | None) -> bool:
    return is_true(workload, "Admitted")


def reason(obj: Obj | None, ctype: str) -> str:
    cond = condition(obj, ctype)
    return f"{cond.get('status')}/{cond.get('reason')}: {cond.get('message')}" if cond else "-"


def pods_of(rest: Rest, job: str, namespace: str = "default") -> list[Obj]:
    return rest.list("v1", "Pod", namespace, selector=f"e2e.allset.dev/job={job}")


def running(pods: list[Obj], count: int) -> bool:
    """All ``count`` pods run or ran: kwok's pod-complete stage ends a Job's pods at once."""
    return len(pods) == count and all(
        (p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods)


def nodes_booked(rest: Rest, value: str) -> list[Obj]:
    return rest.list("v1", "Node", selector=f"{BOOKING_LABEL}={value}")


def live(instances: list[CloudInstance]) -> list[CloudInstance]:
    return [i for i in instances
            if i.state not in (InstanceState.TERMINATED, InstanceState.TERMINATING)]


def of_request(instances: list[CloudInstance], namespace: str, name: str
               ) -> list[CloudInstance]:
    return [i for i in instances if i.tags.request == f"{namespace}/{name}"]


def of_group(instances: list[CloudInstance], group: str) -> list[CloudInstance]:
    return [i for i in instances if i.tags.node_group == group]


def gang_of(instances: list[CloudInstance], request: Obj) -> list[CloudInstance]:
    """A request's gang: what it launched and the idle nodes it booked instead
    (``allset.dev/reused-nodes``, issue 34), live."""
    meta = request["metadata"]
    details = (request.get("status") or {}).get("provisioningClassDetails") or {}
    reused = set((details.get("allset.dev/reused-nodes") or "").split(",")) - {""}
    return live([i for i in instances if i.provider_id in reused]
                + of_request(instances, meta["namespace"], meta["name"]))


def scale_in(stub: pb_grpc.CloudProviderStub, instances: Callable[[], list[CloudInstance]],
             group: str) -> None:
    """What CA does to a group's empty nodes once they are unneeded: DeleteNodes through
    allset, until none of them lives (a scenario that must see a launch starts so, or the
    idle nodes an earlier one left would be booked instead)."""
    refusals: list[str] = []
    asked = False

    def gone() -> bool:
        nonlocal asked
        doomed = live(of_group(instances(), group))
        if not doomed:
            return True
        if asked:
            return False
        # Refused while a request of an earlier scenario still stands (its deletion not
        # yet handled): CA asks again on its next loop, and so does this.
        try:
            stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=group, nodes=[
                pb.ExternalGrpcNode(providerID=i.provider_id, name=i.id) for i in doomed]),
                timeout=10)
            asked = True
        except grpc.RpcError as err:
            if err.code() is not grpc.StatusCode.FAILED_PRECONDITION:
                raise
            refusals.append(str(err.details()))
        return False

    wait_for(f"group {group}'s idle nodes to go", gone, 60,
             explain=lambda: refusals[-1] if refusals else "")
