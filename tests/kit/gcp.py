"""Shared pieces of the GCP adapter tests: a config pointed at the fake Compute API, and a
Provider built with the real GCP adapter."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from adapters.gcp.adapter import GcpAdapter
from adapters.registry import connect
from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.base.clock import ManualClock
from provider.config import LoadedConfig, load_config_text
from tests.fakes.gce import Compute, serve
from tests.kit.helpers import ManualPool

GROUPS = """\
  - id: h100-a
    zone: us-central1-a
    instanceType: a3-highgpu-8g
    fabric: fabric-a
    maxSize: 16
    price: {onDemand: 88.0}
    gcp: {instanceTemplate: gpu-node}
  - id: h100-b
    zone: us-central1-b
    instanceType: a3-highgpu-8g
    maxSize: 16
    price: {onDemand: 88.0}
    gcp: {instanceTemplate: gpu-node}
  - id: t4
    zone: us-central1-a
    instanceType: n1-standard-8
    gpu: {type: nvidia-tesla-t4, count: 1}
    cpu: 7
    memory: 26Gi
    maxSize: 8
    price: {onDemand: 0.75}
    gcp:
      instanceTemplate: gpu-node
      accelerators: [{type: nvidia-tesla-t4, count: 1}]
  - id: cpu
    zone: us-central1-a
    instanceType: n2-standard-8
    maxSize: 20
    capacityTypes: [reserved, on-demand, spot]
    price: {onDemand: 0.40, spot: 0.10}
    gcp: {instanceTemplate: cpu-node, labels: {team: infra}}
"""


def gcp_config(endpoint: str, groups: str = GROUPS, extra: str = "") -> LoadedConfig:
    text = (
        "cluster: test\n"
        "gpuLabel: example.com/gpu\n"
        "cloud:\n"
        "  provider: gcp\n"
        "  gcp:\n"
        "    project: proj\n"
        "    region: us-central1\n"
        f"    apiEndpoint: {endpoint}\n"
        "    operationTimeout: 30s\n"
        + textwrap.indent(extra, "    ")
        + "reconcile: {listingSettle: 0}\n"  # the fake Compute API lists consistently
        + "nodeGroups:\n" + groups
    )
    return load_config_text(text, "gcp-test.yaml")


@dataclass
class GcpHarness:
    compute: Compute
    adapter: GcpAdapter
    config: LoadedConfig
    clock: ManualClock


@contextmanager
def gcp(compute: Compute | None = None, groups: str = GROUPS,
        extra: str = "") -> Iterator[GcpHarness]:
    """The real adapter, connected to a fake Compute API serving ``compute``."""
    compute = compute or Compute()
    clock = ManualClock()
    with serve(compute) as endpoint:
        adapter, cfg = connect(gcp_config(endpoint, groups, extra), clock)
        assert isinstance(adapter, GcpAdapter)
        try:
            yield GcpHarness(compute, adapter, cfg, clock)
        finally:
            adapter.close()


@dataclass
class Served:
    h: GcpHarness
    provider: Provider
    pool: ManualPool

    def run_workers(self) -> int:
        return self.pool.run_all()


def provider_on(h: GcpHarness) -> Served:
    pool = ManualPool()
    provider = Provider(h.config, h.adapter, h.clock, pool=pool, runner=inline_runner)
    provider.refresh_now()
    return Served(h, provider, pool)
