"""Find a cloud adapter by name. Cloud SDKs (boto3, google-cloud-compute) are imported only
when that cloud is configured, so the simulated cloud runs without them installed."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Callable
from pathlib import Path

from provider.base.clock import Clock
from provider.base.sqlite import check_database
from provider.config import ConfigError, LoadedConfig
from provider.domain.cloud import (
    CapacityType,
    CloudAdapter,
    Quota,
    Reservation,
    ReservationKind,
    Shape,
)
from provider.domain.model import MILLI

Factory = Callable[[LoadedConfig, Clock], CloudAdapter]


def _fake(config: LoadedConfig, clock: Clock) -> CloudAdapter:
    from adapters.fake import FakeCloud, FakeSettings, Stockout

    cfg = config.schema.cloud.fake
    if cfg is None:
        return FakeCloud(FakeSettings(), clock)
    shapes = {
        g.instance_type: Shape(
            instance_type=g.instance_type,
            vcpus=-(-g.allocatable.get("cpu") // MILLI),
            memory_mib=g.allocatable.get("memory") // MILLI // 2**20,
            gpu_type=g.gpu_type,
            gpu_count=g.gpu_count,
        )
        for g in config.groups
    }
    settings = FakeSettings(
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
                ends_instances=r.ends_instances if r.ends_instances is not None
                else r.kind is ReservationKind.CAPACITY_BLOCK,
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
        terminate_seconds=cfg.terminate_seconds,
        max_launches_in_flight=cfg.max_launches_in_flight,
        state_path=beside_config(config.source, cfg.state_path),
        shared=cfg.shared,
    )
    try:
        return FakeCloud(settings, clock)  # opens (and creates) statePath now
    except (OSError, sqlite3.Error) as err:
        if settings.state_path is None:
            raise
        raise _unusable_state_path(config.source, settings.state_path, err) from err


def state_path_refusal(config: LoadedConfig) -> ConfigError | None:
    """What opening cloud.fake.statePath would refuse of a file that exists already (one
    that is not a SQLite database), found by reading it only: for `allset validate`, which
    creates and changes nothing. A file still to be created is its creation_problem."""
    fake = config.schema.cloud.fake
    path = beside_config(config.source, fake.state_path) if fake else None
    if config.schema.cloud.provider != "fake" or path is None or not Path(path).is_file():
        return None
    try:
        check_database(Path(path))
    except (OSError, sqlite3.Error) as err:
        return _unusable_state_path(config.source, path, err)
    return None


def _unusable_state_path(source: str, path: str, err: OSError | sqlite3.Error) -> ConfigError:
    return ConfigError(source, [("cloud.fake.statePath", unusable_path(path, err))])


def unusable_path(path: str, err: OSError | sqlite3.Error) -> str:
    """Why a file allset creates at ``path`` cannot be, and what to do: one line, not the
    traceback of whichever directory on the way failed."""
    if isinstance(err, OSError):
        where = f" ({err.filename})" if err.filename and str(err.filename) != path else ""
        reason = f"{err.strerror or err}{where}"
    else:
        reason = str(err)  # sqlite3: "unable to open database file", "file is not a database"
    return (f"cannot create or open {path}: {reason}; give a file allset may create (its "
            "directory too) or one it wrote before (a relative path is relative to the "
            "config file)")


def beside_config(source: str, path: str | None) -> str | None:
    """A relative statePath is relative to the config file, not to wherever allset was
    started: `serve` and `plan` run from different directories still share one cloud."""
    if path is None or Path(path).is_absolute() or not Path(source).is_file():
        return path
    return str(Path(source).resolve().parent / path)


def _epoch(value: dt.datetime | None) -> float | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def _aws(config: LoadedConfig, clock: Clock) -> CloudAdapter:
    from adapters.aws import create  # imports boto3: only when AWS is configured

    return create(config, clock)


def _gcp(config: LoadedConfig, clock: Clock) -> CloudAdapter:
    from adapters.gcp import create  # imports google-cloud-compute: only for GCP

    return create(config, clock)


_FACTORIES: dict[str, Factory] = {"fake": _fake, "aws": _aws, "gcp": _gcp}


def connect(config: LoadedConfig, clock: Clock) -> tuple[CloudAdapter, LoadedConfig]:
    """The configured cloud's adapter, and the config completed with the shapes of the
    instance types it left to the cloud (DescribeInstanceTypes, machine types) and what
    the cloud says the groups' launches are."""
    adapter = create_adapter(config, clock)
    if config.unresolved:
        config = config.with_shapes(adapter.describe_shapes(list(config.unresolved)))
    # What each group's launches are, where the cloud matches reservations on it (an
    # optional capability: EC2 reservations take one platform and tenancy).
    launches = getattr(adapter, "describe_launches", None)
    if launches is not None:
        config = config.with_launches(launches([g.id for g in config.groups]))
    return adapter, config


def create_adapter(config: LoadedConfig, clock: Clock) -> CloudAdapter:
    name = config.schema.cloud.provider
    factory = _FACTORIES[name]
    try:
        return factory(config, clock)
    except ModuleNotFoundError as err:
        extra = {"aws": "aws", "gcp": "gcp"}.get(name, name)
        raise ConfigError(config.source, [(
            "cloud.provider",
            f"the {name} adapter needs {err.name}; install allset[{extra}]",
        )]) from err
