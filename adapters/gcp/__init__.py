"""The GCP adapter (work in progress: see the GCP adapter issue)."""

from __future__ import annotations

from adapters.base import CloudAdapter
from provider.clock import Clock
from provider.config import ConfigError, LoadedConfig


def create(config: LoadedConfig, clock: Clock) -> CloudAdapter:
    raise ConfigError(config.source, [("cloud.provider", "the gcp adapter is not built yet")])
