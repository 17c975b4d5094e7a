"""The adapter's view of the config: frozen, checked once at start, every problem named
by its field so a person can fix it before anything is launched."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from adapters.gcp import labels
from provider.config import ConfigError, LoadedConfig
from provider.config.units import duration_seconds

# GCE allows 64 labels per resource; allset's own take up to 8 (more for long values).
MAX_USER_LABELS = 48


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """How to launch one node group on GCE."""

    id: str
    zone: str
    machine_type: str
    instance_template: str
    accelerators: tuple[tuple[str, int], ...] = ()  # (type, count), attached to the VM
    # Compact placement resource policy, by name: InstanceProperties.resourcePolicies takes
    # "names, not URLs" (Compute v1 reference, InstanceProperties).
    placement_policy: str | None = None
    fabric: str | None = None
    network: str | None = None
    subnetwork: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gpu: bool = False  # a GPU VM: onHostMaintenance must be TERMINATE


@dataclass(frozen=True, slots=True)
class GcpSettings:
    project: str
    region: str
    groups: Mapping[str, GroupSpec]
    api_endpoint: str | None = None
    reservation_names: frozenset[str] = frozenset()
    reservation_prefixes: tuple[str, ...] = ()
    # Other projects whose reservations, shared with this one, allset may use.
    shared_projects: tuple[str, ...] = ()
    request_timeout: float = 60.0
    operation_timeout: float = 1200.0
    page_size: int = 500
    workers: int = 8  # concurrent per-instance calls (delete, setLabels)

    @property
    def local(self) -> bool:
        """A plain-HTTP endpoint is a local test server: no credentials are sent."""
        return bool(self.api_endpoint) and str(self.api_endpoint).startswith("http://")

    def selects(self, reservation: str) -> bool:
        if not self.reservation_names and not self.reservation_prefixes:
            return True
        return reservation in self.reservation_names or reservation.startswith(
            self.reservation_prefixes)

    def in_region(self, zone: str) -> bool:
        return zone.startswith(self.region + "-")



def policy_name(region: str, name_or_url: str) -> str:
    """A resource policy as the API takes it in instance properties: its name. A URL is
    accepted in the config when it names a policy of our region."""
    parts = name_or_url.rstrip("/").split("/")
    if len(parts) > 1 and "regions" in parts:
        where = parts[parts.index("regions") + 1] if parts.index("regions") + 1 < len(
            parts) else ""
        if where != region:
            raise ValueError(f"{name_or_url} is not a policy of region {region}")
    return parts[-1]


def template_url(project: str, name_or_url: str) -> str:
    if "/" in name_or_url:
        return name_or_url
    return f"projects/{project}/global/instanceTemplates/{name_or_url}"


def settings_from(config: LoadedConfig) -> GcpSettings:
    cloud = config.schema.cloud.gcp
    if cloud is None:  # the schema refuses provider gcp without cloud.gcp
        raise ConfigError(config.source, [("cloud.gcp", "required when cloud.provider is gcp")])
    problems: list[tuple[str, str]] = []
    if not labels.valid_value(labels.encode(config.cluster)):
        problems.append(("cluster", "must fit a GCE label value (63 characters)"))
    groups: dict[str, GroupSpec] = {}
    for index, group in enumerate(config.schema.node_groups):
        where = f"nodeGroups[{index}] (id {group.id})"
        gcp = group.gcp
        if not group.zone.startswith(cloud.region + "-"):
            problems.append((f"{where}.zone",
                             f"{group.zone} is not a zone of cloud.gcp.region {cloud.region}"))
        if gcp is None or not gcp.instance_template:
            problems.append((f"{where}.gcp.instanceTemplate",
                             "required on GCP: the template gives the boot image, disks, "
                             "service account and the kubelet's bootstrap metadata"))
            continue
        if gcp.machine_type is not None and gcp.machine_type != group.instance_type:
            problems.append((f"{where}.gcp.machineType",
                             f"{gcp.machine_type!r} differs from instanceType "
                             f"{group.instance_type!r}; omit it (instanceType is the machine "
                             "type, and reservations are matched on it)"))
        if gcp.placement_policy is not None and group.fabric is None:
            problems.append((f"{where}.gcp.placementPolicy",
                             "set on a group without a fabric; give the group a fabric so "
                             "plans keep its nodes together"))
        for key, value in gcp.labels.items():
            if key.startswith(labels.PREFIX):
                problems.append((f"{where}.gcp.labels.{key}", "allset- keys are allset's own"))
            elif not labels.valid_key(key) or not labels.valid_value(value):
                problems.append((f"{where}.gcp.labels.{key}",
                                 "GCE labels allow lowercase letters, digits, _ and - "
                                 "(keys start with a letter), at most 63 characters"))
        if len(gcp.labels) > MAX_USER_LABELS:
            problems.append((f"{where}.gcp.labels", f"at most {MAX_USER_LABELS} labels"))
        policy = gcp.placement_policy or group.fabric
        if policy:
            try:
                policy = policy_name(cloud.region, policy)
            except ValueError as err:
                problems.append((f"{where}.gcp.placementPolicy", str(err)))
        groups[group.id] = GroupSpec(
            id=group.id,
            zone=group.zone,
            machine_type=group.instance_type,
            instance_template=template_url(cloud.project, gcp.instance_template),
            accelerators=tuple((a.type, a.count) for a in gcp.accelerators),
            placement_policy=policy or None,
            fabric=group.fabric,
            network=gcp.network,
            subnetwork=gcp.subnetwork,
            labels=MappingProxyType(dict(gcp.labels)),
            gpu=bool(group.gpu or gcp.accelerators),
        )
    if problems:
        raise ConfigError(config.source, problems)
    selector = cloud.reservation_selector
    return GcpSettings(
        project=cloud.project,
        region=cloud.region,
        groups=MappingProxyType(groups),
        api_endpoint=cloud.api_endpoint,
        reservation_names=frozenset(selector.names),
        reservation_prefixes=tuple(selector.name_prefixes),
        shared_projects=tuple(p for p in selector.projects if p != cloud.project),
        request_timeout=duration_seconds(cloud.request_timeout),
        operation_timeout=duration_seconds(cloud.operation_timeout),
    )
