"""Issue 34 on the real control plane and Kueue: a gang books the idle nodes an earlier gang
left instead of launching like ones, and is Provisioned on them at once; a node CA is
deleting is not taken; an idle reserved node stays protected while an idle on-demand node
is CA's to take after the group's short unneeded time."""

from __future__ import annotations

import datetime as dt
from typing import Any

from google.protobuf import duration_pb2

from provider.wire import externalgrpc_pb2 as pb
from tests.e2e import kueue
from tests.e2e.conftest import World
from tests.e2e.look import live, of_group, pods_of, workload_of
from tests.e2e.rest import Obj, condition, is_true, wait_for
from tests.e2e.test_kueue_path import _placed_on_booked_nodes, _provisioned

REUSED = "allset.dev/reused-nodes"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
KEPT = "allset.dev/kept-reserved"
CA_DELETING_TAINT = "ToBeDeletedByClusterAutoscaler"


def _spec() -> dict[str, Any]:
    return kueue.pod_spec({"allset.dev/node-group": "reuse"},
                          {"nvidia.com/gpu": "8", "cpu": "16"}, gpu_taint=True)


def _finish(world: World, job: str) -> None:
    """The Job's pods end as a kubelet reports them done (kwok runs no containers), the
    Job completes and Kueue finishes its Workload: the nodes are empty."""
    rest = world.cluster.rest
    for pod in pods_of(rest, job):
        rest.merge_patch("v1", "Pod", pod["metadata"]["name"], {"status": {
            "phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False"}]}},
            "default", subresource="status")
    wait_for(f"{job}'s Workload to finish", lambda: is_true(workload_of(rest, job),
                                                            "Finished"), 60,
             explain=lambda: str((workload_of(rest, job) or {}).get("status")))


def _seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _reuse_group(world: World) -> list[Any]:
    return live(of_group(world.kubelet.instances(), "reuse"))


def _node(world: World, name: str) -> Obj:
    return world.cluster.rest.get("v1", "Node", name)


def test_a_second_job_is_provisioned_on_the_first_ones_idle_nodes(world: World) -> None:
    rest = world.cluster.rest
    jobs = ["reuse-1", "reuse-2", "reuse-3"]
    try:
        rest.create(kueue.job("reuse-1", 2, _spec()))
        _, first = _provisioned(world, "reuse-1")
        _placed_on_booked_nodes(world, "reuse-1", first, 2)
        gang = _reuse_group(world)
        assert sorted(i.tags.source for i in gang) == ["on-demand", "reserved"], gang
        reserved = next(i for i in gang if i.tags.source == "reserved")
        on_demand = next(i for i in gang if i.tags.source == "on-demand")
        _finish(world, "reuse-1")

        # Scale-in by source: the idle reserved node stays up, protected (it bills with its
        # reservation anyway); the idle on-demand one is CA's after the GPU group's 30 s.
        def sorted_by_source() -> bool:
            kept = _node(world, reserved.id)["metadata"].get("annotations") or {}
            free = _node(world, on_demand.id)["metadata"].get("annotations") or {}
            return kept.get(SCALE_DOWN_DISABLED) == "true" and kept.get(KEPT) == "true" \
                and SCALE_DOWN_DISABLED not in free and KEPT not in free

        wait_for("the booking to end, the reserved node kept and the on-demand one "
                 "released", sorted_by_source, 60, explain=lambda: str(
                     [_node(world, i.id)["metadata"].get("annotations") for i in gang]))
        options = world.allset.stub().NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(
            id="reuse", defaults=pb.NodeGroupAutoscalingOptions(
                scaleDownUnneededDuration=duration_pb2.Duration(seconds=600)))
        ).nodeGroupAutoscalingOptions
        assert options.scaleDownUnneededDuration.seconds == 30, options

        # The next Job of the same shape: Provisioned on those two nodes, nothing launched.
        rest.create(kueue.job("reuse-2", 2, _spec()))
        _, second = _provisioned(world, "reuse-2")
        details = second["status"]["provisioningClassDetails"]
        assert sorted(details[REUSED].split(",")) == sorted(i.provider_id for i in gang)
        assert {i.id for i in _reuse_group(world)} == {i.id for i in gang}  # no launch
        done = condition(second, "Provisioned")
        assert done is not None
        took = _seconds(done["lastTransitionTime"]) - \
            _seconds(second["metadata"]["creationTimestamp"])
        print(f"reuse: Provisioned {took:.0f} s after the request was created")
        assert took < 10, took
        _placed_on_booked_nodes(world, "reuse-2", second, 2)
        _finish(world, "reuse-2")

        # CA decides to delete the idle on-demand node (its taint comes first): the next
        # gang does not take it, and launches one in its place.
        rest.merge_patch("v1", "Node", on_demand.id, {"spec": {"taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": CA_DELETING_TAINT, "value": "1800000000", "effect": "NoSchedule"}]}})
        rest.create(kueue.job("reuse-3", 2, _spec()))
        _, third = _provisioned(world, "reuse-3")
        taken = third["status"]["provisioningClassDetails"][REUSED].split(",")
        assert taken == [reserved.provider_id], taken
        now = _reuse_group(world)
        assert len(now) == 3 and on_demand.id in {i.id for i in now}
    finally:
        for job in jobs:
            rest.delete("batch/v1", "Job", job, "default")
        wait_for("the reuse Jobs' Workloads to go", lambda: not any(
            workload_of(rest, j) for j in jobs), 60)
