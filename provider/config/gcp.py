"""Config schema of the GCP adapter: `cloud.gcp` and `nodeGroups[].gcp`."""

from __future__ import annotations

from pydantic import Field

from provider.config.base import Model


class Accelerator(Model):
    type: str = Field(min_length=1, description="e.g. nvidia-h100-80gb")
    count: int = Field(gt=0)


class GcpReservationSelector(Model):
    names: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)


class GcpCloud(Model):
    project: str = Field(min_length=1)
    region: str = Field(min_length=1)
    api_endpoint: str | None = Field(None, description="e.g. a local test endpoint")
    reservation_selector: GcpReservationSelector = Field(default_factory=GcpReservationSelector)


class GcpGroup(Model):
    machine_type: str | None = Field(None, description="default: the group's instanceType")
    accelerators: list[Accelerator] = Field(default_factory=list)
    instance_template: str | None = None
    placement_policy: str | None = None
    network: str | None = None
    subnetwork: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
