"""Config loading: YAML -> validated schema -> domain types. Errors name file and field."""

from provider.config.errors import ConfigError
from provider.config.load import LoadedConfig, load_config, load_config_text

__all__ = ["ConfigError", "LoadedConfig", "load_config", "load_config_text"]
