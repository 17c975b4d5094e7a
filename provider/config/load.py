"""Read a config file, validate it, and translate it into domain types.

Every error names the file, the field (as a path such as ``nodeGroups[2].gpu.count``) and
what is allowed, and nothing is started when the config is wrong."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from provider.base.words import did_you_mean
from provider.base.yaml_errors import yaml_problem
from provider.config import strict_yaml
from provider.config.aws_checks import aws_problems
from provider.config.errors import ConfigError
from provider.config.files import read_text
from provider.config.paths import field_path, plain_message
from provider.config.schema import (
    AttributeValue,
    Config,
    GpuDra,
    NodeGroupConfig,
    VersionValue,
)
from provider.config.shapes import allocatable_cpu_milli, allocatable_memory_milli
from provider.config.units import duration_seconds, quantity_milli
from provider.domain.accelerators import vendor_of_type
from provider.domain.cloud import CapacityType, Shape
from provider.domain.demand import Demand, cross_zone_costed, valued
from provider.domain.devices.catalog import GpuDevices, gpu_slice, mig_resource, plain_slice
from provider.domain.devices.model import AttrValue, DeviceSlice, Version
from provider.domain.model import (
    MILLI,
    GroupOptions,
    NodeGroup,
    Resources,
    ScaleUpMode,
    Taint,
)

# EC2 documents its API as eventually consistent ("Eventual consistency in the Amazon EC2
# API": a launch may not show in Describe* calls at once) without a bound; seconds in
# practice, so 10s leaves a margin and costs a takeover only 5s past the fence.
DEFAULT_LISTING_SETTLE = 10.0
# A GPU group's scaleDownUnneededTime unless it states one: an empty on-demand GPU node
# bills at full rate for nothing, and CA's default (10 min) kept allset's empty nodes up
# for 7% of its on-demand spend in the simulation (docs/simulation.md). 30 s (three of
# CA's 10 s scans) lets a pod that replaces a failed one, or the next gang of the shape,
# find the node still there; 0, 10, 30 and 60 s were within 1% of one another in
# on-demand spend in the simulation, 120 s and 300 s dearer (docs/simulation.md).
GPU_UNNEEDED_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    source: str
    schema: Config
    # Groups whose shape is known. Groups that leave cpu/memory/gpu to the cloud join
    # once `with_shapes` has the cloud's answer (see `unresolved`).
    groups: tuple[NodeGroup, ...]
    unresolved: tuple[str, ...] = ()  # instance types still to be described by the cloud

    def with_shapes(self, shapes: Mapping[str, Shape]) -> LoadedConfig:
        """Complete every group from the cloud's shapes; an unknown type is a config error."""
        if not self.unresolved:
            return self
        groups, problems = [], []
        for index, cfg in enumerate(self.schema.node_groups):
            shape = shapes.get(cfg.instance_type)
            if _complete(cfg):
                groups.append(_node_group(cfg, shape))
            elif shape is None:
                problems.append((
                    f"nodeGroups[{index}] (id {cfg.id}).instanceType",
                    f"the cloud does not describe {cfg.instance_type!r}; check the name, or "
                    "give cpu and memory (and gpu) yourself",
                ))
            else:
                groups.append(_node_group(cfg, shape))
        if problems:
            raise ConfigError(self.source, problems)
        return LoadedConfig(self.source, self.schema, tuple(groups))

    def with_launches(self, launches: Mapping[str, tuple[tuple[str, str], ...]]
                      ) -> LoadedConfig:
        """The groups with what the cloud says their launches are (NodeGroup.launch: on
        AWS the platform and tenancy of their launch templates), by group id."""
        groups = tuple(dataclasses.replace(g, launch=launches[g.id]) if g.id in launches
                       else g for g in self.groups)
        return dataclasses.replace(self, groups=groups)

    @property
    def cluster(self) -> str:
        return self.schema.cluster

    @property
    def refresh_interval_seconds(self) -> float:
        return duration_seconds(self.schema.refresh_interval)

    @property
    def unavailable_ttl_seconds(self) -> float:
        return duration_seconds(self.schema.unavailable_offering_ttl)

    @property
    def not_offered_ttl_seconds(self) -> float:
        return duration_seconds(self.schema.not_offered_ttl)

    @property
    def orphan_grace_seconds(self) -> float:
        return duration_seconds(self.schema.reconcile.orphan_grace)

    @property
    def listing_settle_seconds(self) -> float:
        value = self.schema.reconcile.listing_settle
        if value is None:
            return 0.0 if self.schema.cloud.provider == "fake" else DEFAULT_LISTING_SETTLE
        return duration_seconds(value)

    def guarded(self, demand: Demand, queue: str | None = None) -> Demand:
        """``demand`` with the operator's guard on declared runtimes and value of waiting
        (``runtimes``), and its cost of running away from its data (``locality``);
        ``queue``: the Kueue LocalQueue it came through, namespace/name."""
        r = self.schema.runtimes
        demand = dataclasses.replace(
            demand, runtime_margin=r.margin,
            undeclared_runtime_seconds=None if r.undeclared is None
            else duration_seconds(r.undeclared),
            queue=queue)
        where = self.schema.locality
        demand = cross_zone_costed(demand, where.cross_zone_cost_per_gpu_hour, where.queues)
        return valued(demand, r.wait_value_per_gpu_hour, r.queues)

    @property
    def attempt_deadline_seconds(self) -> float:
        return duration_seconds(self.schema.attempts.deadline)

    @property
    def journal_retention_seconds(self) -> float:
        return duration_seconds(self.schema.attempts.journal_retention)


def load_config(path: str | Path) -> LoadedConfig:
    return load_config_text(read_text(path, "config file"), str(path))


def load_config_text(text: str, source: str = "<config>") -> LoadedConfig:
    try:
        raw = strict_yaml.load(text)
    except yaml.YAMLError as err:
        raise ConfigError(source, [("", f"not valid YAML: {yaml_problem(err)}")]) from err
    if not isinstance(raw, dict):
        raise ConfigError(source, [("", "the config must be a YAML mapping at the top level")])
    try:
        schema = Config.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(source, _problems(err, raw)) from None
    problems = _reference_problems(schema)
    if problems:
        raise ConfigError(source, problems)
    complete = [g for g in schema.node_groups if _complete(g)]
    unresolved = sorted({g.instance_type for g in schema.node_groups if not _complete(g)})
    return LoadedConfig(source, schema, tuple(_node_group(g) for g in complete),
                        tuple(unresolved))


def _complete(cfg: NodeGroupConfig) -> bool:
    return cfg.cpu is not None and cfg.memory is not None


def _reference_problems(schema: Config) -> list[tuple[str, str]]:
    """Checks across sections: what a group names must exist where it can be known."""
    problems: list[tuple[str, str]] = []
    provider = schema.cloud.provider
    for gi, group in enumerate(schema.node_groups):
        where = f"nodeGroups[{gi}] (id {group.id})"
        for name in ("aws", "gcp"):
            if getattr(group, name) is not None and name != provider:
                problems.append((f"{where}.{name}",
                                 f"set, but cloud.provider is {provider}"))
        if provider == "aws" and group.aws is None:
            problems.append((f"{where}.aws", "required when cloud.provider is aws "
                             "(at least launchTemplate)"))
        if provider == "fake":
            for key in ("cpu", "memory"):
                if getattr(group, key) is None:
                    problems.append((f"{where}.{key}",
                                     "required for the simulated cloud (it describes no types)"))
    if provider == "aws":
        problems.extend(aws_problems(schema))
    fake = schema.cloud.fake
    if schema.cloud.provider == "fake" and fake is not None:
        known = {r.id: r for r in fake.reservations}
        for gi, group in enumerate(schema.node_groups):
            for ri, rid in enumerate(group.reservations):
                if rid not in known:
                    problems.append((
                        f"nodeGroups[{gi}].reservations[{ri}]",
                        f"unknown reservation {rid!r}; cloud.fake.reservations has: "
                        + (", ".join(sorted(known)) or "none"),
                    ))
    return problems


def _node_group(cfg: NodeGroupConfig, shape: Shape | None = None) -> NodeGroup:
    """The domain group; what the config leaves out comes from the cloud's shape."""
    cpu = quantity_milli(cfg.cpu) if cfg.cpu is not None else None
    memory = quantity_milli(cfg.memory) if cfg.memory is not None else None
    if shape is not None:
        cpu = cpu if cpu is not None else allocatable_cpu_milli(shape)
        memory = memory if memory is not None else allocatable_memory_milli(shape)
    assert cpu is not None and memory is not None, "checked by the loader"
    gpu_type = cfg.gpu.type if cfg.gpu else (shape.gpu_type if shape else None)
    gpu_count = cfg.gpu.count if cfg.gpu else (shape.gpu_count if shape else 0)
    amounts = {"cpu": cpu, "memory": memory, "pods": cfg.pods * MILLI}
    if cfg.ephemeral_storage is not None:
        amounts["ephemeral-storage"] = quantity_milli(cfg.ephemeral_storage)
    resource = _accelerator_amounts(cfg, gpu_type, gpu_count, shape, amounts)
    scale_up = cfg.scale_up or (ScaleUpMode.ATOMIC if gpu_count else ScaleUpMode.PARTIAL)
    opts = cfg.options

    def secs(value: str | int | float | None) -> float | None:
        return None if value is None else duration_seconds(value)

    return NodeGroup(
        id=cfg.id,
        zone=cfg.zone,
        instance_type=cfg.instance_type,
        allocatable=Resources.of(amounts),
        min_size=cfg.min_size,
        max_size=cfg.max_size,
        on_demand_price=cfg.price.on_demand,
        spot_price=cfg.price.spot,
        reserved_price=cfg.price.reserved,
        capacity_types=tuple(CapacityType(c) for c in cfg.capacity_types),
        gpu_type=gpu_type,
        gpu_count=gpu_count,
        accelerator_resource=resource,
        architecture=shape.architecture if shape else "amd64",
        devices=group_devices(cfg, gpu_type, gpu_count, shape),
        fabric=cfg.fabric,
        scale_up=scale_up,
        labels=types.MappingProxyType(dict(cfg.labels)),
        taints=tuple(Taint(t.key, t.value, t.effect) for t in cfg.taints),
        targeted_reservations=tuple(cfg.reservations),
        boot_seconds=duration_seconds(cfg.boot_time),
        keep_reserved_nodes=cfg.reserved_nodes == "keep",
        options=GroupOptions(
            scale_down_utilization_threshold=opts.scale_down_utilization_threshold,
            scale_down_gpu_utilization_threshold=opts.scale_down_gpu_utilization_threshold,
            scale_down_unneeded_seconds=secs(opts.scale_down_unneeded_time) if
            opts.scale_down_unneeded_time is not None or gpu_count == 0
            else GPU_UNNEEDED_SECONDS,
            scale_down_unready_seconds=secs(opts.scale_down_unready_time),
            max_node_provision_seconds=secs(opts.max_node_provision_time),
            zero_or_max_node_scaling=opts.zero_or_max_node_scaling,
            ignore_daemonsets_utilization=opts.ignore_daemon_sets_utilization,
        ),
    )


def _accelerator_amounts(cfg: NodeGroupConfig, gpu_type: str | None, gpu_count: int,
                         shape: Shape | None, amounts: dict[str, int]) -> str:
    """Add what the node's device plugin advertises for its accelerators to ``amounts``
    (provider/domain/accelerators.py); returns the resource that counts them whole."""
    vendor = cfg.gpu.vendor if cfg.gpu is not None else vendor_of_type(gpu_type)
    resource = (cfg.gpu.resource if cfg.gpu is not None else None) or vendor.resource
    if not gpu_count:
        return resource
    amounts[resource] = gpu_count * MILLI
    if cfg.gpu is not None and cfg.gpu.mig is not None:
        # Mixed strategy: partitioned GPUs are advertised as their MIG profile only.
        amounts[resource] = 0
        amounts[mig_resource(cfg.gpu.mig.profile)] = gpu_count * cfg.gpu.mig.per_gpu * MILLI
    cores = cfg.gpu.cores if cfg.gpu is not None and cfg.gpu.cores else (
        shape.accelerator_cores if shape is not None and shape.gpu_type == gpu_type else 0)
    if vendor.core_resource and cores:
        amounts[vendor.core_resource] = gpu_count * cores * MILLI
    return resource


def _attribute(value: AttributeValue) -> AttrValue:
    return Version.parse(value.version) if isinstance(value, VersionValue) else value


def group_devices(cfg: NodeGroupConfig, gpu_type: str | None, gpu_count: int,
                  shape: Shape | None) -> tuple[DeviceSlice, ...]:
    """What each node of the group publishes to DRA: its GPUs (from the model, the
    cloud's shape and the config), then the config's other devices."""
    out = []
    gpu = cfg.gpu
    # A vendor whose DRA driver allset does not model publishes nothing unless the config
    # names a driver (provider/domain/accelerators.py).
    driver = gpu.dra_driver if gpu is not None else vendor_of_type(gpu_type).dra_driver
    if gpu_count and driver is not None:
        memory = (quantity_milli(gpu.memory) if gpu is not None and gpu.memory is not None
                  else shape.gpu_memory_mib * 2**20 * MILLI if shape and shape.gpu_memory_mib
                  else None)
        dra = gpu.dra if gpu is not None else GpuDra()
        found = gpu_slice(GpuDevices(
            gpu_type=gpu_type, count=gpu_count, memory_milli=memory, driver=driver,
            attributes={k: _attribute(v) for k, v in dra.attributes.items()},
            capacity={k: quantity_milli(v) for k, v in dra.capacity.items()},
            spread=dra.spread,
            mig_profile=gpu.mig.profile if gpu is not None and gpu.mig else None,
            mig_per_gpu=gpu.mig.per_gpu if gpu is not None and gpu.mig else 0,
            dynamic_mig=dra.dynamic_mig,
        ))
        if found is not None:
            out.append(found)
    for d in cfg.devices:
        out.append(plain_slice(
            d.driver, d.name_prefix, d.count,
            {k: _attribute(v) for k, v in d.attributes.items()},
            {k: quantity_milli(v) for k, v in d.capacity.items()}, d.spread))
    return tuple(out)


# --- error formatting -------------------------------------------------------------------


def _problems(err: ValidationError, raw: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        msg = plain_message(e)
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc[:-1])
            msg += did_you_mean(str(loc[-1]), allowed)
            msg += f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        # A rule across fields raises every problem it found, a line each (schema.refuse).
        out.extend((field_path(loc, raw), line) for line in msg.splitlines())
    return out


def _allowed_keys(loc: tuple[int | str, ...]) -> list[str]:
    model: type[BaseModel] | None = Config
    for part in loc:
        if model is None:
            return []
        if isinstance(part, int):
            continue
        field = next(
            (f for name, f in model.model_fields.items() if part in (name, f.alias)), None
        )
        model = _model_in(field.annotation) if field else None
    if model is None:
        return []
    return sorted(f.alias or name for name, f in model.model_fields.items())


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
