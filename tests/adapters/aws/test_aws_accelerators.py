"""Trainium on moto (issue 59): EC2's DescribeInstanceTypes says what a trn2.48xlarge
carries (NeuronInfo), the template node advertises the Neuron device plugin's resources,
and CA's scale-up fills a trn2 Capacity Block before it buys on demand."""

from __future__ import annotations

from adapters.aws import tags
from adapters.aws.discovery import shape_from
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import k8s_core_v1_pb2 as core
from tests.adapters.aws.conftest import AMI, World
from tests.adapters.aws.test_aws_service import serving

BLOCK = "cr-00000000000000b01"
HOUR = 3600.0
CONFIG = f"""\
cluster: e2e
gpuLabel: allset.dev/accelerator
cloud:
  provider: aws
  aws:
    region: us-east-1
    reservationSelector: {{tags: {{team: ml}}}}
reconcile: {{listingSettle: 0}}
nodeGroups:
  - id: trn2
    zone: us-east-1a
    instanceType: trn2.48xlarge
    maxSize: 8
    reservations: [{BLOCK}]
    price: {{onDemand: 44.7}}
    aws: {{launchTemplate: {{name: trn}}}}
"""


def test_neuron_shape_and_template_come_from_describe_instance_types(world: World) -> None:
    with serving(world, CONFIG) as served:
        group = served.provider.groups["trn2"]
        assert (group.gpu_type, group.gpu_count) == ("aws-trainium2-512gb", 16)
        resp = served.stub.NodeGroupTemplateNodeInfo(
            pb.NodeGroupTemplateNodeInfoRequest(id="trn2"))
        node = core.Node.FromString(resp.nodeBytes)
        assert node.metadata.labels["allset.dev/accelerator"] == "aws-trainium2-512gb"
        assert node.status.capacity["aws.amazon.com/neuron"].string == "16"
        # 8 physical NeuronCore-v3 a device, grouped in twos by default (LNC=2).
        assert node.status.capacity["aws.amazon.com/neuroncore"].string == "64"
        assert "nvidia.com/gpu" not in node.status.capacity


def test_a_trn2_capacity_block_is_filled_before_on_demand(world: World) -> None:
    now = world.clock.now()
    world.layer.add_reservation("us-east-1a", "trn2.48xlarge", 2, id=BLOCK,
                                tags={"team": "ml"}, targeted=True, capacity_block=True,
                                starts=now - HOUR, ends=now + 24 * HOUR)
    world.layer.ec2.create_launch_template(LaunchTemplateName="trn", LaunchTemplateData={
        "ImageId": AMI, "InstanceType": "trn2.48xlarge"})
    with serving(world, CONFIG) as served:
        served.increase("trn2", 3)
        live = served.live("trn2")
        assert sorted(i.tags[tags.SOURCE] for i in live) == ["on-demand", "reserved",
                                                             "reserved"]
        assert world.layer.used(BLOCK) == 2


def test_gpu_makers_other_than_nvidia_name_their_vendor() -> None:
    """EC2's GpuInfo of a dl1 and a g4ad (DescribeInstanceTypes, as the EC2 API reference
    gives GpuDeviceInfo: Manufacturer, Name, Count, MemoryInfo); moto lists neither."""
    def item(maker: str, name: str, count: int, mib: int) -> dict[str, object]:
        return {"InstanceType": "x", "VCpuInfo": {"DefaultVCpus": 96},
                "MemoryInfo": {"SizeInMiB": 786432},
                "GpuInfo": {"Gpus": [{"Manufacturer": maker, "Name": name, "Count": count,
                                      "MemoryInfo": {"SizeInMiB": mib}}]}}
    gaudi = shape_from(item("Habana", "Gaudi HL-205", 8, 32768))
    amd = shape_from(item("AMD", "Radeon Pro V520", 4, 8192))
    assert (gaudi.gpu_type, gaudi.gpu_count) == ("habana-gaudi-hl-205-32gb", 8)
    assert (amd.gpu_type, amd.gpu_count) == ("amd-radeon-pro-v520-8gb", 4)
