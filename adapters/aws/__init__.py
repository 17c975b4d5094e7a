"""The AWS adapter (work in progress: see the AWS adapter issue)."""

from __future__ import annotations

from adapters.base import CloudAdapter
from provider.clock import Clock
from provider.config import ConfigError, LoadedConfig


def create(config: LoadedConfig, clock: Clock) -> CloudAdapter:
    raise ConfigError(config.source, [("cloud.provider", "the aws adapter is not built yet")])
