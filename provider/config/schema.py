"""The config file's schema (pydantic). Keys are camelCase; unknown keys are errors.

This module is the single description of the config: validation, error messages and the
generated reference in docs/ all come from it.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from adapters.base import CapacityType, ReservationKind
from provider.config.aws import AwsCloud, AwsGroup
from provider.config.base import Model
from provider.config.gcp import GcpCloud, GcpGroup
from provider.config.units import duration_seconds, quantity_milli
from provider.model import ScaleUpMode

_DNS_LABEL = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _quantity(value: str | int | float) -> str | int | float:
    quantity_milli(value)
    return value


def _duration(value: str | int | float) -> str | int | float:
    duration_seconds(value)
    return value


def _labels(value: dict[str, str]) -> dict[str, str]:
    for key, val in value.items():
        if not _LABEL_KEY.match(key):
            raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
        if not _LABEL_VALUE.match(val):
            raise ValueError(f"label value {val!r} (key {key!r}) is not a valid label value")
    return value


Quantity = Annotated[str | int | float, AfterValidator(_quantity)]
Duration = Annotated[str | int | float, AfterValidator(_duration)]
Labels = Annotated[dict[str, str], AfterValidator(_labels)]
Name = Annotated[str, Field(pattern=_DNS_LABEL)]


class Gpu(Model):
    type: str = Field(min_length=1, description="GPU model, e.g. nvidia-h100-80gb")
    count: int = Field(gt=0, description="GPUs per node")


class Price(Model):
    on_demand: float = Field(0.0, ge=0, description="USD per node-hour on demand")
    spot: float | None = Field(None, ge=0, description="USD per node-hour on spot")


class TaintConfig(Model):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Options(Model):
    """Per-group overrides of CA's autoscaling options; unset keys echo CA's defaults."""

    scale_down_utilization_threshold: float | None = Field(None, ge=0, le=1)
    scale_down_gpu_utilization_threshold: float | None = Field(None, ge=0, le=1)
    scale_down_unneeded_time: Duration | None = None
    scale_down_unready_time: Duration | None = None
    max_node_provision_time: Duration | None = None
    zero_or_max_node_scaling: bool | None = None
    ignore_daemon_sets_utilization: bool | None = None


class NodeGroupConfig(Model):
    id: Name = Field(description="node group id CA sees (DNS label)")
    zone: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    gpu: Gpu | None = None
    cpu: Quantity | None = Field(
        None, description="allocatable CPU, e.g. 96 or 95500m (default: from the cloud)"
    )
    memory: Quantity | None = Field(
        None, description="allocatable memory, e.g. 1800Gi (default: from the cloud)"
    )
    pods: int = Field(110, gt=0)
    ephemeral_storage: Quantity | None = None
    fabric: Name | None = Field(None, description="placement group / compact policy name")
    min_size: int = Field(0, ge=0)
    max_size: int = Field(ge=0)
    capacity_types: list[CapacityType] = Field(
        default_factory=lambda: [CapacityType.RESERVED, CapacityType.ON_DEMAND], min_length=1
    )
    price: Price = Price()
    scale_up: ScaleUpMode | None = Field(None, description="default: atomic for GPU groups")
    labels: Labels = Field(default_factory=dict)
    taints: list[TaintConfig] = Field(default_factory=list)
    reservations: list[str] = Field(
        default_factory=list, description="targeted reservations this group may launch into"
    )
    options: Options = Options()
    aws: AwsGroup | None = None
    gcp: GcpGroup | None = None

    @model_validator(mode="after")
    def _sizes(self) -> NodeGroupConfig:
        if self.min_size > self.max_size:
            raise ValueError(f"minSize ({self.min_size}) must be <= maxSize ({self.max_size})")
        if len(set(self.capacity_types)) != len(self.capacity_types):
            raise ValueError("capacityTypes lists a type twice")
        if CapacityType.SPOT in self.capacity_types and self.price.spot is None:
            raise ValueError("capacityTypes has spot but price.spot is not set")
        return self


class FakeReservation(Model):
    id: str = Field(min_length=1)
    zone: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    count: int = Field(gt=0)
    fabric: Name | None = None
    kind: ReservationKind = ReservationKind.DEFAULT
    targeted: bool = False
    starts_at: dt.datetime | None = None
    ends_at: dt.datetime | None = None
    price: float = Field(0.0, ge=0, description="marginal USD per node-hour of using a slot")

    @model_validator(mode="after")
    def _window(self) -> FakeReservation:
        if self.kind is ReservationKind.CAPACITY_BLOCK and (
            self.starts_at is None or self.ends_at is None
        ):
            raise ValueError("a capacity-block reservation needs startsAt and endsAt")
        if self.starts_at and self.ends_at and self.starts_at >= self.ends_at:
            raise ValueError("startsAt must be before endsAt")
        return self


class FakeStockout(Model):
    zone: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    capacity_type: CapacityType = CapacityType.ON_DEMAND


class FakeQuota(Model):
    name: str = Field(min_length=1)
    unit: Literal["instances", "gpus", "vcpus"]
    limit: int = Field(ge=0)
    capacity_types: list[CapacityType] = Field(default_factory=lambda: [CapacityType.ON_DEMAND])
    instance_types: list[str] = Field(default_factory=list)
    zones: list[str] = Field(default_factory=list)


class FakeCloud(Model):
    state_path: str | None = Field(None, description="SQLite file; state survives restarts")
    launch_latency_seconds: float = Field(0.0, ge=0, description="how long a launch call takes")
    boot_seconds: float = Field(0.0, ge=0, description="pending -> running after launch")
    reservations: list[FakeReservation] = Field(default_factory=list)
    stockouts: list[FakeStockout] = Field(default_factory=list)
    quotas: list[FakeQuota] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> FakeCloud:
        ids = [r.id for r in self.reservations]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"reservation ids must be unique; repeated: {', '.join(dupes)}")
        return self


class Cloud(Model):
    provider: Literal["fake", "aws", "gcp"] = "fake"
    fake: FakeCloud | None = None
    aws: AwsCloud | None = None
    gcp: GcpCloud | None = None


class Attempts(Model):
    max_plans: int = Field(3, ge=1, le=20, description="plans tried per scale-up before failing")
    deadline: Duration = Field("10m", description="give up on a scale-up after this long")


class ProvisioningRequests(Model):
    """How the controller of class atomic-reserved.allset.dev works."""

    workers: int = Field(16, ge=1, le=256, description="requests handled at once")
    initial_backoff: Duration = Field("1m", description="first retry after a failed attempt")
    max_backoff: Duration = Field("10m", description="retries double up to this")
    resync: Duration = Field("30s", description="how often every request is looked at again")


class Config(Model):
    cluster: Name = Field(description="cluster name; every instance is tagged with it")
    gpu_label: str = Field("allset.dev/accelerator", description="node label naming the GPU")
    cloud: Cloud = Cloud()
    refresh_interval: Duration = Field("30s", description="how often the cloud is listed")
    unavailable_offering_ttl: Duration = Field(
        "3m", description="how long a pool that just failed is left out of plans"
    )
    attempts: Attempts = Attempts()
    provisioning_requests: ProvisioningRequests = ProvisioningRequests()
    node_groups: list[NodeGroupConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _cross_checks(self) -> Config:
        ids = [g.id for g in self.node_groups]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"nodeGroups ids must be unique; repeated: {', '.join(dupes)}")
        provider = self.cloud.provider
        for name in ("fake", "aws", "gcp"):
            if name != provider and getattr(self.cloud, name) is not None:
                raise ValueError(f"cloud.{name} is set but cloud.provider is {provider}")
        if provider in ("aws", "gcp") and getattr(self.cloud, provider) is None:
            raise ValueError(f"cloud.provider is {provider} but cloud.{provider} is missing")
        return self
