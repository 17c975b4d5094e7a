"""The built-in demo served by `allset serve` without --config: a few GPU and CPU groups on
the simulated cloud, one reservation in a fabric, and a stocked-out pool; and a Trainium
group with a reservation of its own, whose pods ask for aws.amazon.com/neuron."""

from __future__ import annotations

from pathlib import Path

from provider.config import LoadedConfig, load_config, load_config_text

DEMO_CONFIG = """\
cluster: demo
gpuLabel: allset.dev/accelerator
cloud:
  provider: fake
  fake:
    launchLatencySeconds: 0.5
    bootSeconds: 15
    reservations:
      - {id: cr-h100-a, zone: us-east-1a, instanceType: p5.48xlarge, fabric: train-a, count: 4}
      - {id: cr-a100-b, zone: us-east-1b, instanceType: p4d.24xlarge, count: 2}
      - {id: cr-trn2-c, zone: us-east-1c, instanceType: trn2.48xlarge, count: 2}
    stockouts:
      - {zone: us-east-1b, instanceType: p5.48xlarge, capacityType: on-demand}
nodeGroups:
  - id: h100-a
    zone: us-east-1a
    instanceType: p5.48xlarge
    gpu: {type: nvidia-h100-80gb, count: 8}
    cpu: 191
    memory: 1900Gi
    fabric: train-a
    maxSize: 16
    price: {onDemand: 98.32}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  - id: h100-b
    zone: us-east-1b
    instanceType: p5.48xlarge
    gpu: {type: nvidia-h100-80gb, count: 8}
    cpu: 191
    memory: 1900Gi
    maxSize: 16
    price: {onDemand: 98.32}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  - id: a100-b
    zone: us-east-1b
    instanceType: p4d.24xlarge
    gpu: {type: nvidia-a100-40gb, count: 8}
    cpu: 95
    memory: 1100Gi
    maxSize: 8
    price: {onDemand: 32.77}
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  - id: trn2-c
    zone: us-east-1c
    instanceType: trn2.48xlarge
    gpu: {type: aws-trainium2-96gb, count: 16, cores: 4}
    cpu: 191
    memory: 1900Gi
    maxSize: 8
    price: {onDemand: 44.7}
    taints: [{key: aws.amazon.com/neuron, value: present, effect: NoSchedule}]
  - id: cpu-a
    zone: us-east-1a
    instanceType: m7i.8xlarge
    cpu: 31
    memory: 120Gi
    maxSize: 20
    price: {onDemand: 1.61}
"""


def demo_config() -> LoadedConfig:
    return load_config_text(DEMO_CONFIG, "<built-in demo>")


def config_or_demo(path: Path | None) -> LoadedConfig:
    """The config at ``path``, or the demo when none is given."""
    return demo_config() if path is None else load_config(path)
