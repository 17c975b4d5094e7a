"""What the adapter needs from the config, as frozen data: per-group launch settings and the
reservation selector. Built once at start; the pydantic models stay in provider/config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from provider.config import ConfigError, LoadedConfig
from provider.config.units import duration_seconds


def _frozen(mapping: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class GroupLaunch:
    """How instances of one node group are launched."""

    group: str
    zone: str
    template_name: str | None
    template_id: str | None
    template_version: str
    subnet_id: str | None = None
    security_group_ids: tuple[str, ...] = ()
    placement_group: str | None = None
    efa_interfaces: int = 0
    efa_secondary_type: str = "efa-only"
    fabric: str | None = None
    tags: Mapping[str, str] = field(default_factory=_frozen)
    # What the config says its launches are (None: read from the launch template).
    platform: str | None = None
    tenancy: str | None = None


@dataclass(frozen=True, slots=True)
class AwsSettings:
    cluster: str
    region: str
    endpoint_url: str | None
    groups: Mapping[str, GroupLaunch]
    # Reservations allset may use: these ids, plus those carrying every tag in selector_tags.
    selected_ids: frozenset[str] = frozenset()
    selector_tags: Mapping[str, str] = field(default_factory=_frozen)
    # Cluster placement group name -> the fabric of the groups launched into it.
    fabric_of_placement_group: Mapping[str, str] = field(default_factory=_frozen)
    # Reservation id -> the fabric of the group that lists it. A Capacity Block is its own
    # fabric (its instances are placed together, with no placement group): the group that
    # lists it names that fabric.
    fabric_of_reservation: Mapping[str, str] = field(default_factory=_frozen)
    # Capacity Blocks end this much earlier for the planner than EndDate says; UltraServer
    # Capacity Blocks, whose instances EC2 ends from earlier, by their own.
    capacity_block_cutoff: float = 2400.0
    ultra_server_block_cutoff: float = 4200.0


def settings_from(config: LoadedConfig) -> AwsSettings:
    cloud = config.schema.cloud.aws
    if cloud is None:
        raise ConfigError(config.source, [("cloud.aws", "required when cloud.provider is aws")])
    groups: dict[str, GroupLaunch] = {}
    fabrics: dict[str, str] = {}
    listed_by: dict[str, str] = {}
    ids = set(cloud.reservation_selector.ids)
    for gi, g in enumerate(config.schema.node_groups):
        if g.aws is None:
            raise ConfigError(config.source, [(f"nodeGroups[{gi}] (id {g.id}).aws",
                                               "required when cloud.provider is aws")])
        # On AWS a fabric is a cluster placement group, named after the fabric by default.
        placement_group = g.aws.placement_group or g.fabric
        if placement_group is not None and g.fabric is not None:
            fabrics[placement_group] = g.fabric
        ids.update(g.reservations)
        if g.fabric is not None:
            for rid in g.reservations:
                listed_by.setdefault(rid, g.fabric)
        groups[g.id] = GroupLaunch(
            group=g.id,
            zone=g.zone,
            template_name=g.aws.launch_template.name,
            template_id=g.aws.launch_template.id,
            template_version=g.aws.launch_template.version,
            subnet_id=g.aws.subnet_id,
            security_group_ids=tuple(g.aws.security_group_ids),
            placement_group=placement_group,
            efa_interfaces=g.aws.efa_interfaces,
            efa_secondary_type=g.aws.efa_secondary_type,
            fabric=g.fabric,
            tags=_frozen(g.aws.tags),
            platform=g.aws.platform,
            tenancy=g.aws.tenancy,
        )
    return AwsSettings(
        cluster=config.cluster,
        region=cloud.region,
        endpoint_url=cloud.endpoint_url,
        groups=MappingProxyType(groups),
        selected_ids=frozenset(ids),
        selector_tags=_frozen(cloud.reservation_selector.tags),
        fabric_of_placement_group=_frozen(fabrics),
        fabric_of_reservation=_frozen(listed_by),
        capacity_block_cutoff=duration_seconds(cloud.capacity_block_cutoff),
        ultra_server_block_cutoff=duration_seconds(cloud.ultra_server_block_cutoff),
    )
