"""Find a cloud adapter by name. Cloud SDKs (boto3, google-cloud-compute) are imported only
when that cloud is configured, so the simulated cloud runs without them installed."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from adapters.base import CapacityType, CloudAdapter, Quota, Reservation
from provider.clock import Clock
from provider.config import ConfigError, LoadedConfig
from provider.model import MILLI

Factory = Callable[[LoadedConfig, Clock], CloudAdapter]


def _fake(config: LoadedConfig, clock: Clock) -> CloudAdapter:
    from adapters.fake import FakeCloud, FakeSettings, Stockout
    from adapters.fake.cloud import Shape

    cfg = config.schema.cloud.fake
    if cfg is None:
        return FakeCloud(FakeSettings(), clock)
    shapes = {
        g.instance_type: Shape(gpus=g.gpu_count, vcpus=-(-g.allocatable.get("cpu") // MILLI))
        for g in config.groups
    }
    return FakeCloud(
        FakeSettings(
            reservations=[
                Reservation(
                    id=r.id,
                    zone=r.zone,
                    instance_type=r.instance_type,
                    total=r.count,
                    free=r.count,
                    kind=r.kind,
                    targeted=r.targeted,
                    fabric=r.fabric,
                    starts_at=_epoch(r.starts_at),
                    ends_at=_epoch(r.ends_at),
                    price=r.price,
                )
                for r in cfg.reservations
            ],
            stockouts=[Stockout(s.zone, s.instance_type, s.capacity_type) for s in cfg.stockouts],
            quotas=[
                Quota(
                    name=q.name,
                    unit=q.unit,
                    limit=q.limit,
                    used=0,
                    capacity_types=tuple(CapacityType(c) for c in q.capacity_types),
                    instance_types=tuple(q.instance_types),
                    zones=tuple(q.zones),
                )
                for q in cfg.quotas
            ],
            shapes=shapes,
            launch_latency_seconds=cfg.launch_latency_seconds,
            boot_seconds=cfg.boot_seconds,
            state_path=cfg.state_path,
        ),
        clock,
    )


def _epoch(value: dt.datetime | None) -> float | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


_FACTORIES: dict[str, Factory] = {"fake": _fake}


def register(name: str, factory: Factory) -> None:
    _FACTORIES[name] = factory


def create_adapter(config: LoadedConfig, clock: Clock) -> CloudAdapter:
    name = config.schema.cloud.provider
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ConfigError(config.source, [(
            "cloud.provider",
            f"the {name} adapter is not available in this build; available: "
            + ", ".join(sorted(_FACTORIES)),
        )])
    return factory(config, clock)
