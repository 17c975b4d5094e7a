"""The config file's schema (pydantic). Keys are camelCase; unknown keys are errors.

This module is the single description of the config: validation, error messages and the
generated reference in docs/ all come from it.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from provider.config.aws import AwsCloud, AwsGroup
from provider.config.base import Model
from provider.config.costs import Costs
from provider.config.gcp import GcpCloud, GcpGroup
from provider.config.paths import phrased
from provider.config.units import duration_seconds, quantity_milli
from provider.domain.accelerators import Vendor, vendor_of_resource, vendor_of_type
from provider.domain.cloud import CapacityType, ReservationKind
from provider.domain.devices.mig import LAYOUTS as MIG_LAYOUTS
from provider.domain.devices.model import Version
from provider.domain.gangs.sources import SourceName
from provider.domain.model import GPU_RESOURCE, ScaleUpMode

_DNS_LABEL = phrased(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
                     "a DNS label: lower-case letters, digits and '-', at most 63, starting "
                     "and ending with a letter or digit (e.g. prod-east)")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def refuse(problems: list[str]) -> None:
    """Raise every problem a rule across fields found, not only the first: the loader
    reports each message line as a problem of its own."""
    if problems:
        raise ValueError("\n".join(problems))


def beside_fields(validate: ValidatorFunctionWrapHandler, data: object,
                  problems: list[str]) -> Any:
    """``data`` validated, with ``problems`` (a rule judged on ``data`` as written) reported
    beside whatever its fields' own validation finds: a rule of the parent runs only once
    every field is valid, so one group's minSize above its maxSize would hide a repeated
    id."""
    try:
        validated = validate(data)
    except ValidationError as err:
        if not problems:
            raise
        again = [InitErrorDetails(type=PydanticCustomError(e["type"], e["msg"], e.get("ctx")),
                                  loc=e["loc"], input=e["input"])
                 for e in err.errors(include_url=False)]
        raise ValidationError.from_exception_data(err.title, [*again, *(
            InitErrorDetails(type=PydanticCustomError("value_error", p), loc=(), input=data)
            for p in problems)]) from None
    refuse(problems)
    return validated


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


_QUALIFIED_NAME = phrased(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z][A-Za-z0-9_]{0,31}$",
    "an attribute name: a letter and up to 31 more letters, digits or '_', after an "
    "optional DNS domain and '/' (e.g. memory, or gpu.nvidia.com/productName)")
_DRIVER_NAME = phrased(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$",
                       "a DRA driver name: a lower-case DNS name with at least one '.' "
                       "(e.g. gpu.nvidia.com)")
_MIG_PROFILE = phrased(r"^\d+g\.\d+gb$", "a MIG profile: <slices>g.<memory>gb (e.g. 1g.10gb)")


def _version(value: str) -> str:
    Version.parse(value)
    return value


class VersionValue(Model):
    """A semantic-version attribute (CEL compares it with semver())."""

    version: Annotated[str, AfterValidator(_version)] = Field(description="e.g. 550.54.15")


AttributeValue = bool | int | str | VersionValue
AttributeName = Annotated[str, Field(pattern=_QUALIFIED_NAME)]


class DeviceAttributes(Model):
    """What DRA selectors read of a device: attributes and capacities. A name without a
    domain belongs to the driver's (productName -> gpu.nvidia.com/productName)."""

    attributes: dict[AttributeName, AttributeValue] = Field(
        default_factory=dict, description="attributes of every device, e.g. "
        "{nvlinkDomain: nvl0}")
    capacity: dict[AttributeName, Quantity] = Field(
        default_factory=dict, description="capacities of every device, e.g. {memory: 80Gi}")
    spread: dict[AttributeName, Annotated[int, Field(gt=0)]] = Field(
        default_factory=dict, description="attributes shared by consecutive devices: "
        "{numaNode: 2} over 8 devices gives 0,0,0,0,1,1,1,1")

    @field_validator("attributes", "spread")
    @classmethod
    def _int64(cls, values: dict[str, object]) -> dict[str, object]:
        # resource.k8s.io/v1 holds an int attribute in an int64: a larger number would load
        # here and fail only when the template's ResourceSlices are encoded, at start.
        for name, value in values.items():
            if type(value) is int and not -(2**63) <= value < 2**63:
                raise ValueError(f"{name}: {value} does not fit a DRA int attribute (64-bit)")
        return values


class GpuDra(DeviceAttributes):
    """How the node's GPUs appear to DRA (defaults from the GPU model)."""

    publish: bool = Field(True, description="publish the GPUs as DRA devices (false: "
                          "device plugin only)")
    driver: str | None = Field(None, pattern=_DRIVER_NAME,
                               description="the DRA driver that publishes them (default: "
                               "the vendor's, gpu.nvidia.com for NVIDIA; a vendor without "
                               "one publishes none)")
    dynamic_mig: bool = Field(False, description="the driver partitions GPUs on demand "
                              "(NVIDIA's DynamicMIG): each GPU and every MIG placement are "
                              "published as partitionable devices sharing the GPU's "
                              "counters, as the node will")


class Mig(Model):
    """Every GPU of the node partitioned alike (MIG, mixed strategy)."""

    profile: str = Field(pattern=_MIG_PROFILE, description="MIG profile, e.g. 1g.10gb")
    per_gpu: int = Field(gt=0, le=7, description="partitions per GPU, e.g. 7")


class DeviceSet(DeviceAttributes):
    """Devices of another DRA driver that each node publishes (NICs, ...)."""

    driver: str = Field(pattern=_DRIVER_NAME, description="DRA driver name, e.g. dra.net")
    count: int = Field(gt=0, le=128, description="devices per node")
    name_prefix: Name = Field("dev", description="device names are <prefix>-<index>")


_EXTENDED_RESOURCE = phrased(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
    "an extended resource name: a DNS domain with at least one '.', '/', and a name "
    "(e.g. aws.amazon.com/neuron)")


class Gpu(Model):
    """The accelerators (GPUs, Gaudi, Trainium, ...) of one node of the group."""

    type: str = Field(min_length=1, description="accelerator model, its vendor first, e.g. "
                      "nvidia-h100-80gb, amd-instinct-mi300x-192gb, aws-trainium2-96gb")
    count: int = Field(gt=0, description="accelerator devices per node")
    resource: str | None = Field(
        None, pattern=_EXTENDED_RESOURCE, description="the extended resource its device "
        "plugin advertises per device (default: by the type's vendor: nvidia.com/gpu, "
        "amd.com/gpu, habana.ai/gaudi, gpu.intel.com/i915, aws.amazon.com/neuron)")
    cores: int | None = Field(None, gt=0, description="cores per device the device plugin "
                              "advertises beside the devices (AWS Neuron's "
                              "aws.amazon.com/neuroncore; default: from the cloud)")
    memory: Quantity | None = Field(None, description="memory per GPU, e.g. 80Gi (default: "
                                    "from the GPU model)")
    mig: Mig | None = Field(None, description="MIG partitions (they replace nvidia.com/gpu "
                            "by nvidia.com/mig-<profile> and are the DRA devices)")
    dra: GpuDra = Field(GpuDra(), description="the GPUs as DRA devices")

    @property
    def vendor(self) -> Vendor:
        """The resource's vendor, where given (one allset does not know is "other": no
        cores, no MIG, no DRA driver); else the type's."""
        if self.resource:
            return vendor_of_resource(self.resource) or Vendor("other", self.resource)
        return vendor_of_type(self.type)

    @property
    def dra_driver(self) -> str | None:
        """The DRA driver that publishes the devices, or None when none does."""
        return (self.dra.driver or self.vendor.dra_driver) if self.dra.publish else None

    @model_validator(mode="after")
    def _vendor(self) -> Gpu:
        vendor, problems = self.vendor, []
        if self.cores is not None and vendor.core_resource is None:
            problems.append(f"cores: {vendor.name} devices advertise no cores (only AWS "
                            "Neuron's do, as aws.amazon.com/neuroncore)")
        if vendor.resource != GPU_RESOURCE and (self.mig is not None or self.dra.dynamic_mig):
            problems.append(f"mig: MIG is NVIDIA's; this accelerator is {vendor.name}'s "
                            f"({self.resource or vendor.resource})")
        refuse(problems)
        return self

    @model_validator(mode="after")
    def _dynamic_mig(self) -> Gpu:
        if not self.dra.dynamic_mig:
            return self
        problems = []
        if self.mig is not None:
            problems.append("dra.dynamicMig: the driver partitions on demand, so fixed "
                            "partitions (mig) cannot be given too; remove one")
        if self.type not in MIG_LAYOUTS:
            problems.append(f"dra.dynamicMig: no MIG layout is known for GPU type "
                            f"{self.type!r}; known: {', '.join(sorted(MIG_LAYOUTS))}")
        refuse(problems)
        return self


class Price(Model):
    """What a node costs; reserved capacity is priced by its reservation (already paid)."""

    on_demand: float = Field(0.0, ge=0, description="USD per node-hour on demand")
    spot: float | None = Field(None, ge=0, description="USD per node-hour on spot")
    reserved: float = Field(0.0, ge=0, description="USD per node-hour a reserved slot costs "
                            "(its share of the reservation's bill): charged to the team "
                            "whose node it is in the spend metrics, never weighed by the "
                            "planner (a reservation bills whether it is used or not)")


class TaintConfig(Model):
    """A taint of the group's nodes (in the template node CA simulates)."""

    key: str = Field(min_length=1, description="taint key, e.g. nvidia.com/gpu")
    value: str = Field("", description="taint value")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        description="taint effect")


class Options(Model):
    """Per-group overrides of CA's autoscaling options; unset keys echo CA's defaults."""

    scale_down_utilization_threshold: float | None = Field(
        None, ge=0, le=1, description="a node below this CPU/memory use may be removed")
    scale_down_gpu_utilization_threshold: float | None = Field(
        None, ge=0, le=1, description="the same for GPU nodes, by GPU use")
    scale_down_unneeded_time: Duration | None = Field(
        None, description="how long a node is unneeded before CA removes it")
    scale_down_unready_time: Duration | None = Field(
        None, description="how long an unready node is unneeded before CA removes it")
    max_node_provision_time: Duration | None = Field(
        None, description="how long CA waits for a new node to register")
    zero_or_max_node_scaling: bool | None = Field(
        None, description="CA scales the group only between 0 and maxSize")
    ignore_daemon_sets_utilization: bool | None = Field(
        None, description="leave DaemonSet pods out of the utilization")


class NodeGroupConfig(Model):
    """A node group CA sees: one instance type in one zone, in at most one fabric."""

    id: Name = Field(description="node group id CA sees (DNS label)")
    zone: str = Field(min_length=1, description="availability zone of every node")
    instance_type: str = Field(min_length=1, description="instance (machine) type")
    gpu: Gpu | None = Field(None, description="the node's GPUs (default: from the cloud)")
    cpu: Quantity | None = Field(
        None, description="allocatable CPU, e.g. 96 or 95500m (default: from the cloud)"
    )
    memory: Quantity | None = Field(
        None, description="allocatable memory, e.g. 1800Gi (default: from the cloud)"
    )
    pods: int = Field(110, gt=0, description="pods a node can run")
    ephemeral_storage: Quantity | None = Field(None, description="allocatable ephemeral "
                                               "storage of a node")
    fabric: Name | None = Field(None, description="placement group / compact policy name")
    min_size: int = Field(0, ge=0, description="CA never scales the group below this")
    max_size: int = Field(ge=0, description="nodes the group may have at most")
    boot_time: Duration = Field(
        "10m", description="launch to Ready node, as observed (a high percentile): reserved "
        "capacity must outlast it plus a gang's expected runtime")
    capacity_types: list[CapacityType] = Field(
        default_factory=lambda: [CapacityType.RESERVED, CapacityType.ON_DEMAND], min_length=1,
        description="where the group's nodes may come from; a fitting free reservation is "
        "always used before anything is bought",
    )
    price: Price = Field(Price(), description="per node-hour, for plans and CA's price "
                         "expander")
    scale_up: ScaleUpMode | None = Field(None, description="default: atomic for GPU groups")
    labels: Labels = Field(default_factory=dict, description="extra labels of the group's "
                           "nodes (in the template node CA simulates)")
    taints: list[TaintConfig] = Field(default_factory=list, description="taints of the "
                                      "group's nodes")
    reservations: list[str] = Field(
        default_factory=list, description="targeted reservations this group may launch into"
    )
    options: Options = Field(Options(), description="CA's autoscaling options for this "
                             "group (a GPU group's scaleDownUnneededTime defaults to 30s)")
    reserved_nodes: Literal["keep", "release"] = Field(
        "keep", description="an idle node in a reservation: keep it up (protected from "
        "scale-down while the reservation lasts, so the next gang starts at once; it bills "
        "with the reservation either way) or release it as CA would (for a reservation "
        "shared with other clusters, where a warm idle node takes a slot others pay for)")
    aws: AwsGroup | None = Field(None, description="how to launch on AWS")
    gcp: GcpGroup | None = Field(None, description="how to launch on GCP")
    devices: list[DeviceSet] = Field(default_factory=list, description="other DRA devices "
                                     "each node publishes (the GPUs come from gpu)")

    @model_validator(mode="after")
    def _sizes(self) -> NodeGroupConfig:
        problems = []
        if self.min_size > self.max_size:
            problems.append(f"minSize ({self.min_size}) must be <= maxSize ({self.max_size})")
        if len(set(self.capacity_types)) != len(self.capacity_types):
            problems.append("capacityTypes lists a type twice")
        if CapacityType.SPOT in self.capacity_types and self.price.spot is None:
            problems.append("capacityTypes has spot but price.spot is not set")
        drivers = [d.driver for d in self.devices]
        gpu_driver = self.gpu.dra_driver if self.gpu is not None else None
        if gpu_driver is not None:
            drivers.append(gpu_driver)
        if len(set(drivers)) != len(drivers):
            problems.append("devices: each DRA driver publishes one pool per node; a driver "
                            "is listed twice (the GPUs' is gpu.dra.driver)")
        refuse(problems)
        return self


class FakeReservation(Model):
    """A simulated capacity reservation."""

    id: str = Field(min_length=1, description="reservation id")
    zone: str = Field(min_length=1, description="zone its slots are in")
    instance_type: str = Field(min_length=1, description="instance type of its slots")
    count: int = Field(gt=0, description="slots")
    fabric: Name | None = Field(None, description="fabric its slots are in: only a group of "
                                "that fabric may use it")
    kind: ReservationKind = Field(ReservationKind.DEFAULT, description="capacity-block: "
                                  "usable only between startsAt and endsAt")
    targeted: bool = Field(False, description="only groups that list it under "
                           "`reservations` may use it")
    starts_at: dt.datetime | None = Field(None, description="start of its window")
    ends_at: dt.datetime | None = Field(None, description="end of its window")
    ends_instances: bool | None = Field(
        None, description="whether its end ends the instances in it (a capacity block's "
        "does; an ODCR's ends only launches into it, and they run on); default: true for "
        "a capacity-block, false otherwise")
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
    """A pool with no capacity: launches into it fail as a real stockout does."""

    zone: str = Field(min_length=1, description="zone of the pool")
    instance_type: str = Field(min_length=1, description="instance type of the pool")
    capacity_type: CapacityType = Field(CapacityType.ON_DEMAND, description="capacity type "
                                        "of the pool")


class FakeQuota(Model):
    """A simulated quota: launches past its limit fail as a real quota error does."""

    name: str = Field(min_length=1, description="name errors and plans refer to")
    unit: Literal["instances", "gpus", "vcpus"] = Field(description="what the limit counts")
    limit: int = Field(ge=0, description="most units running at once")
    capacity_types: list[CapacityType] = Field(
        default_factory=lambda: [CapacityType.ON_DEMAND], description="capacity types it "
        "counts")
    instance_types: list[str] = Field(default_factory=list, description="instance types it "
                                      "counts (empty: all)")
    zones: list[str] = Field(default_factory=list, description="zones it counts (empty: all)")


class FakeCloud(Model):
    """The simulated cloud: its reservations, stockouts, quotas and timing."""

    state_path: str | None = Field(None, description="SQLite file; state survives restarts "
                                   "(a relative path is relative to the config file)")
    shared: bool = Field(False, description="several allset processes use statePath at "
                         "once (replicas on one simulated cloud, as on a real one): every "
                         "call reads the file under a file lock")
    launch_latency_seconds: float = Field(0.0, ge=0, description="how long a launch call takes")
    boot_seconds: float = Field(0.0, ge=0, description="pending -> running after launch")
    terminate_seconds: float = Field(0.0, ge=0, description="shutting-down -> terminated; "
                                     "until then the instance holds its reservation slot")
    max_launches_in_flight: int | None = Field(
        None, ge=1, description="launches the cloud runs at once; one more is refused and "
        "sent again later, as GCE does beyond 10 bulk operations (default: no bound)")
    reservations: list[FakeReservation] = Field(default_factory=list,
                                                description="capacity reservations")
    stockouts: list[FakeStockout] = Field(default_factory=list, description="pools that "
                                          "are out of capacity")
    quotas: list[FakeQuota] = Field(default_factory=list, description="limits on what runs")
    register_nodes: bool = Field(False, description="the acting allset creates a Node for "
                                 "each running instance (and deletes it when the instance "
                                 "goes), annotated for kwok to make Ready and run its pods: "
                                 "for trying allset in a kind cluster, where no kubelet "
                                 "would ever join; never beside real kubelets")

    @model_validator(mode="after")
    def _unique(self) -> FakeCloud:
        problems = []
        ids = [r.id for r in self.reservations]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            problems.append(f"reservation ids must be unique; repeated: {', '.join(dupes)}")
        if self.shared and not self.state_path:
            problems.append("shared: processes share the cloud through statePath; set it")
        if self.shared and self.terminate_seconds:
            # Each process times a shutdown from its own terminate call, so another would
            # see the slot free at once: not modelled across processes.
            problems.append("shared: terminateSeconds must be 0 (shutting-down is timed "
                            "per process)")
        refuse(problems)
        return self


class Cloud(Model):
    """Which cloud allset launches in; only the section of that cloud may be set."""

    provider: Literal["fake", "aws", "gcp"] = Field(
        description="aws, gcp, or fake: the simulated cloud (nothing real is launched); "
        "may be left out when exactly one of the sections below is given, never "
        "defaulted, so a config never runs on the simulated cloud by omission")
    fake: FakeCloud | None = Field(None, description="the simulated cloud")
    aws: AwsCloud | None = Field(None, description="AWS: region and reservations")
    gcp: GcpCloud | None = Field(None, description="GCP: project, region and reservations")

    @model_validator(mode="before")
    @classmethod
    def _provider_from_section(cls, data: object) -> object:
        if isinstance(data, dict) and "provider" not in data:
            given = [name for name in ("fake", "aws", "gcp") if data.get(name) is not None]
            if len(given) != 1:
                raise ValueError("provider: required key is missing; set it to aws or gcp, "
                                 "or to fake for the simulated cloud (nothing real is "
                                 "launched)")
            data = {**data, "provider": given[0]}
        return data

    @model_validator(mode="wrap")
    @classmethod
    def _sections(cls, data: object, validate: ValidatorFunctionWrapHandler) -> Cloud:
        # Judged on the keys as written, beside the sections' own problems. (Without a
        # provider, _provider_from_section takes the one section given or refuses.)
        provider = data.get("provider") if isinstance(data, dict) else None
        problems = []
        if isinstance(data, dict) and provider in ("fake", "aws", "gcp"):
            problems = [f"cloud.{name} is set but cloud.provider is {provider}"
                        for name in ("fake", "aws", "gcp")
                        if name != provider and data.get(name) is not None]
            if provider != "fake" and data.get(provider) is None:
                problems.append(f"cloud.provider is {provider} but cloud.{provider} is "
                                "missing")
        cloud: Cloud = beside_fields(validate, data, problems)
        return cloud


class Attempts(Model):
    """How hard a scale-up tries."""

    max_plans: int = Field(3, ge=1, le=20, description="plans tried per scale-up before failing")
    deadline: Duration = Field("10m", description="give up on a scale-up after this long")
    journal_retention: Duration = Field(
        "168h", description="finished attempts stay in the local journal (--state-dir) this "
        "long; open attempts and terminations still owed are always kept")
    journal_max_finished: int = Field(
        10_000, ge=100, description="finished attempts the local journal keeps at most "
        "(the oldest go first)")


class Reconcile(Model):
    """How allset squares its records with the cloud's."""

    orphan_grace: Duration = Field(
        "2m", description="an uncommitted instance no attempt here expects is terminated "
        "only after it has been seen uncommitted this long (tags and listings lag)")
    unknown_groups: Literal["report", "terminate"] = Field(
        "report", description="committed instances of node groups no longer in the config: "
        "report them (metric, log, `allset instances --orphans`) or terminate them")
    listing_settle: Duration | None = Field(
        None, description="how long the cloud's listings may lag a launch: a process that "
        "starts, or takes the lease over, acts only on a listing taken this long after its "
        "predecessor could last have launched (default 10s on aws and gcp, 0 on fake, "
        "whose listings are consistent)")


class LeaderElection(Model):
    """Active/standby replicas on a coordination.k8s.io Lease (only with Kubernetes)."""

    # YAML 1.1 reads a bare `on`/`off` as a boolean: take it as the word that was written.
    mode: Annotated[Literal["auto", "on", "off"], BeforeValidator(
        lambda v: {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v)] = Field(
        "auto", description="auto: elect a leader when running in a cluster (replicas); on: "
        "also with --kubeconfig outside one; off: one process, guarded by the state-dir lock")
    namespace: str = Field("", description="namespace of the Lease; empty: the pod's own "
                           "(POD_NAMESPACE), else allset")
    name: str = Field("allset", description="name of the Lease (deploy/ grants RBAC on "
                      "allset)")
    service: str = Field("allset", description="the Service whose EndpointSlice the "
                         "leader points at itself (in a cluster)")
    # Longer than client-go's 15s/10s/2s: see Timing (provider/leadership/elector.py).
    lease_duration: Duration = Field("60s", description="how long a standby waits after the "
                                     "last renewal it saw before it takes over")
    renew_deadline: Duration = Field("40s", description="the leader stops acting when it "
                                     "has not renewed for this long")
    retry_period: Duration = Field("8s", description="how often the lease is renewed or "
                                   "tried")

    @model_validator(mode="after")
    def _margins(self) -> LeaderElection:
        # The fence relies on these: a leader stops acting at its renew deadline, before
        # the lease duration another replica waits; it renews more often than that.
        retry, renew, lease = (duration_seconds(v) for v in
                               (self.retry_period, self.renew_deadline, self.lease_duration))
        if not 0 < retry < renew < lease:
            raise ValueError("needs 0 < retryPeriod < renewDeadline < leaseDuration; got "
                             f"{self.retry_period}, {self.renew_deadline}, "
                             f"{self.lease_duration}")
        return self


class ProvisioningRequests(Model):
    """How the controller of class atomic-reserved.allset.dev works."""

    workers: int = Field(16, ge=1, le=256, description="requests handled at once")
    initial_backoff: Duration = Field("1m", description="first retry after a failed attempt")
    max_backoff: Duration = Field("10m", description="retries double up to this")
    resync: Duration = Field("30s", description="how often every request is looked at again")


_QUEUE_NAMESPACE = re.compile(_DNS_LABEL)
_QUEUE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# USD per GPU-hour (of waiting, of running away from data): finite and not negative, as
# the request's parameters.
UsdPerGpuHour = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def queue_problem(key: str) -> str | None:
    """What is wrong with a Kueue LocalQueue written namespace/name, or None."""
    namespace, slash, name = key.partition("/")
    if slash and _QUEUE_NAMESPACE.match(namespace) and len(name) <= 253 and \
            _QUEUE_NAME.match(name):
        return None
    return f"queue {key!r} is not namespace/localQueueName (a Kueue LocalQueue, e.g. ml/train)"


def _queue_key(key: str) -> str:
    problem = queue_problem(key)
    if problem:
        raise ValueError(problem)
    return key


# Checked with the values, in one pass: a bad key and a bad value are reported together.
QueueKey = Annotated[str, AfterValidator(_queue_key)]


class Runtimes(Model):
    """How far a request's declared runtime is trusted when placing it on reserved capacity
    that ends (capacity blocks, future-dated and calendar reservations), and what its
    waiting for capacity that opens later is worth."""

    margin: float = Field(1.0, ge=1.0, le=10.0, description="capacity must outlast the "
                          "declared runtime times this (after the boot time); declarations "
                          "are estimates")
    undeclared: Duration | None = Field(
        None, description="runtime assumed for a request that declares none (neither "
        "expectedRuntimeSeconds nor a Kueue maximumExecutionTimeSeconds); unset: such a "
        "gang may be placed on capacity ending at any time")
    wait_value_per_gpu_hour: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="USD an hour of one GPU's waiting is "
        "worth, when a request could wait for reserved capacity that opens before its "
        "deadline instead of buying on-demand now. Precedence: the request's parameter "
        "waitValuePerGpuHour, else its Kueue queue's value under queues, else this, else "
        "(unset) the on-demand price of a GPU-hour of the plan it would buy now")
    queues: dict[QueueKey, UsdPerGpuHour] = Field(
        default_factory=dict, description="value of waiting (USD per GPU-hour) by Kueue "
        "LocalQueue, keyed namespace/name, e.g. {ml/train: 4.0}: the queue of the Workload "
        "that owns the request; below the request's own waitValuePerGpuHour, above the "
        "default waitValuePerGpuHour")


class Locality(Model):
    """What running a gang away from its data costs, for requests that say where their
    data is (parameter dataZone): the planner weighs a free reservation in another zone
    against on-demand next to the data."""

    cross_zone_cost_per_gpu_hour: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="USD an hour of one GPU running "
        "outside its request's dataZone costs (egress, slower reads), added to that plan's "
        "spend when plans are compared. Precedence: the request's parameter "
        "crossZoneCostPerGpuHour, else its Kueue queue's value under queues, else this; "
        "unset: no cost, and the data's zone only breaks ties")
    queues: dict[QueueKey, UsdPerGpuHour] = Field(
        default_factory=dict, description="cost of running away from the data (USD per "
        "GPU-hour) by Kueue LocalQueue, keyed namespace/name, e.g. {ml/train: 2.5}; below "
        "the request's own crossZoneCostPerGpuHour, above the default")


class Gangs(Model):
    """Gangs of PodGroup APIs turned into requests of class atomic-reserved.allset.dev."""

    sources: list[SourceName] = Field(
        default_factory=lambda: list[SourceName](
            s for s in SourceName if s is not SourceName.YUNIKORN),
        description="gang APIs watched: podgroup "
        "(Kubernetes' Workload / PodGroup, behind its feature gates), coscheduling "
        "(scheduler-plugins), volcano, kai (NVIDIA KAI Scheduler), and, only when listed, "
        "yunikorn (task groups on pods: allset writes its gang's state on the "
        "application's originator pod, a right over pods its manifests do not grant; "
        "docs/provisioning-requests.md); each only where the cluster serves it; [] turns "
        "the bridge off. In order "
        "of precedence: a pod that names gangs of two APIs belongs to the gang of the one "
        "listed first. A Volcano, KAI or YuniKorn gang is asked for only while its queue "
        "would admit it")
    resync: Duration = Field("10s", description="how often pending gang pods are looked at")
    yunikorn_namespace: str = Field(
        "yunikorn", description="namespace of YuniKorn's ConfigMaps (yunikorn-configs, "
        "yunikorn-defaults), whose queues.yaml gives the queue limits a YuniKorn gang is "
        "held to")

    @model_validator(mode="after")
    def _once(self) -> Gangs:
        if len(set(self.sources)) != len(self.sources):
            raise ValueError("sources lists an API twice")
        return self


class Config(Model):
    """The whole file."""

    cluster: Name = Field(description="cluster name; every instance is tagged with it")
    gpu_label: str = Field("allset.dev/accelerator", description="node label naming the GPU")
    cloud: Cloud = Field(description="the cloud and its settings")
    refresh_interval: Duration = Field("30s", description="how often the cloud is listed")
    unavailable_offering_ttl: Duration = Field(
        "3m", description="how long a pool that just failed is left out of plans"
    )
    not_offered_ttl: Duration = Field(
        "1h", description="how long a pool the cloud says does not exist (EC2 Unsupported: "
        "the instance type is not offered in that zone) is left out of plans"
    )
    attempts: Attempts = Field(Attempts(), description="scale-up attempts")
    reconcile: Reconcile = Field(Reconcile(), description="orphans and removed groups")
    leader_election: LeaderElection = Field(LeaderElection(), description="replicas")
    provisioning_requests: ProvisioningRequests = ProvisioningRequests()
    runtimes: Runtimes = Field(Runtimes(), description="declared runtimes against capacity "
                               "that ends")
    locality: Locality = Field(Locality(), description="the cost of running away from a "
                               "request's data")
    gangs: Gangs = Field(Gangs(), description="pending PodGroup gangs become requests")
    costs: Costs = Field(Costs(), description="whom the per-team spend metrics charge")
    node_groups: list[NodeGroupConfig] = Field(min_length=1, description="the node "
                                               "groups CA sees")

    @model_validator(mode="before")
    @classmethod
    def _cloud_is_chosen(cls, data: object) -> object:
        # Said before anything else: without it the rest of the errors hardly matter.
        if isinstance(data, dict) and "cloud" not in data:
            raise ValueError("cloud: required key is missing; set cloud.provider to aws or "
                             "gcp, or to fake for the simulated cloud (nothing real is "
                             "launched)")
        return data

    @field_validator("node_groups", mode="wrap")
    @classmethod
    def _unique_ids(cls, groups: object, validate: ValidatorFunctionWrapHandler
                    ) -> list[NodeGroupConfig]:
        """Judged on the ids as written, beside each group's own problems."""
        ids = [g["id"] for g in groups if isinstance(g, dict) and isinstance(g.get("id"), str)
               ] if isinstance(groups, list) else []
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        problems = [f"ids must be unique; repeated: {', '.join(dupes)}"] if dupes else []
        validated: list[NodeGroupConfig] = beside_fields(validate, groups, problems)
        return validated
