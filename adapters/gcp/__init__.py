"""The GCP adapter: GCE specific reservations first, one bulkInsert per part (all N or
none), labels as the source of truth. Imported only when cloud.provider is gcp."""

from __future__ import annotations

from provider.base.clock import Clock
from provider.config import ConfigError, LoadedConfig
from provider.domain.cloud import CloudAdapter


def create(config: LoadedConfig, clock: Clock) -> CloudAdapter:
    """The adapter for ``cloud.gcp``; raises ConfigError naming the field to fix."""
    from google.auth.exceptions import DefaultCredentialsError

    from adapters.gcp.adapter import GcpAdapter
    from adapters.gcp.clients import build
    from adapters.gcp.settings import settings_from

    settings = settings_from(config)
    gpu_types = {g.instance_type: g.gpu.type for g in config.schema.node_groups if g.gpu}
    try:
        clients = build(settings)
    except DefaultCredentialsError as err:
        raise ConfigError(config.source, [(
            "cloud.gcp", f"no Google credentials found ({err}); run with a service account "
            "(workload identity) or set GOOGLE_APPLICATION_CREDENTIALS",
        )]) from err
    return GcpAdapter(settings, clients, clock, gpu_types)
