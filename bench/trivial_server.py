"""A trivial externalgrpc server: the floor bench/ca_loop compares allset against.

It answers the RPCs of a CA-loop pass (and the other reads bench/ca_loop times) from
static responses built once at start, for the same fleet bench/ca_loop.write_fleet makes
(group ids g0000.., instance n in group n % groups). Nothing of allset is on its path but
the generated wire stubs; it runs the same grpc.server with the same thread pool size as
provider/service/server.py, so the difference is what allset does per call.

    python -m bench.trivial_server --groups 1000 --instances 5000 --address 127.0.0.1:0
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from google.protobuf import any_pb2, empty_pb2

from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
GPU_LABEL = "nvidia.com/gpu.product"


class Trivial(pb_grpc.CloudProviderServicer):
    def __init__(self, groups: int, instances: int) -> None:
        ids = [f"g{i:04d}" for i in range(groups)]
        self.group = {gid: pb.NodeGroup(id=gid, minSize=0, maxSize=64, debug=gid)
                      for gid in ids}
        self.groups = pb.NodeGroupsResponse(nodeGroups=list(self.group.values()))
        members: dict[str, list[str]] = {gid: [] for gid in ids}
        self.owner: dict[str, pb.NodeGroupForNodeResponse] = {}
        for n in range(instances):
            gid = ids[n % groups]
            pid = f"fake://{ZONES[n % groups % len(ZONES)]}/{gid}-seed-{n}"
            members[gid].append(pid)
            self.owner[pid] = pb.NodeGroupForNodeResponse(nodeGroup=self.group[gid])
        running = pb.InstanceStatus(instanceState=pb.InstanceStatus.instanceRunning)
        self.nodes = {gid: pb.NodeGroupNodesResponse(
            instances=[pb.Instance(id=p, status=running) for p in pids])
            for gid, pids in members.items()}
        self.sizes = {gid: pb.NodeGroupTargetSizeResponse(targetSize=len(pids))
                      for gid, pids in members.items()}
        # One answer per group whatever the defaults: the floor, not a correct provider.
        self.options = {gid: pb.NodeGroupAutoscalingOptionsResponse(
            nodeGroupAutoscalingOptions=pb.NodeGroupAutoscalingOptions(
                scaleDownUtilizationThreshold=0.5)) for gid in ids}
        self.template = pb.NodeGroupTemplateNodeInfoResponse()
        empty = any_pb2.Any()
        empty.Pack(empty_pb2.Empty())
        self.gpu_types = pb.GetAvailableGPUTypesResponse(gpuTypes={"nvidia-h100-80gb": empty})
        self.gpu_label = pb.GPULabelResponse(label=GPU_LABEL)
        self.no_group = pb.NodeGroupForNodeResponse(nodeGroup=pb.NodeGroup())

    def NodeGroups(self, request: Any, context: Any) -> pb.NodeGroupsResponse:
        return self.groups

    def NodeGroupForNode(self, request: Any, context: Any) -> pb.NodeGroupForNodeResponse:
        return self.owner.get(request.node.providerID, self.no_group)

    def GPULabel(self, request: Any, context: Any) -> pb.GPULabelResponse:
        return self.gpu_label

    def GetAvailableGPUTypes(self, request: Any, context: Any) -> pb.GetAvailableGPUTypesResponse:
        return self.gpu_types

    def Refresh(self, request: Any, context: Any) -> pb.RefreshResponse:
        return pb.RefreshResponse()

    def NodeGroupTargetSize(self, request: Any, context: Any) -> pb.NodeGroupTargetSizeResponse:
        return self.sizes[request.id]

    def NodeGroupIncreaseSize(self, request: Any,
                              context: Any) -> pb.NodeGroupIncreaseSizeResponse:
        return pb.NodeGroupIncreaseSizeResponse()

    def NodeGroupNodes(self, request: Any, context: Any) -> pb.NodeGroupNodesResponse:
        return self.nodes[request.id]

    def NodeGroupTemplateNodeInfo(self, request: Any,
                                  context: Any) -> pb.NodeGroupTemplateNodeInfoResponse:
        return self.template

    def NodeGroupGetOptions(self, request: Any,
                            context: Any) -> pb.NodeGroupAutoscalingOptionsResponse:
        return self.options[request.id]

    # Not part of a pass: refused, as a provider without them would.
    def _unimplemented(self, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in the trivial server")

    def Cleanup(self, request: Any, context: Any) -> pb.CleanupResponse:
        return pb.CleanupResponse()

    def NodeGroupDecreaseTargetSize(self, request: Any, context: Any) -> Any:
        return self._unimplemented(context)

    def NodeGroupDeleteNodes(self, request: Any, context: Any) -> Any:
        return self._unimplemented(context)

    def PricingNodePrice(self, request: Any, context: Any) -> Any:
        return self._unimplemented(context)

    def PricingPodPrice(self, request: Any, context: Any) -> Any:
        return self._unimplemented(context)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=5000)
    parser.add_argument("--address", default="127.0.0.1:0")
    args = parser.parse_args()
    server = grpc.server(ThreadPoolExecutor(max_workers=16), options=[("grpc.so_reuseport", 0)])
    pb_grpc.add_CloudProviderServicer_to_server(Trivial(args.groups, args.instances), server)
    port = server.add_insecure_port(args.address)
    server.start()
    print(f"{args.address.rsplit(':', 1)[0]}:{port}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop(1).wait()
    sys.exit(0)


if __name__ == "__main__":
    main()
