"""allset: an all-or-nothing, reservation-first Cluster Autoscaler provider for GPU fleets.
Its version is the installed distribution's (provider.base.build.version()), written once,
in pyproject.toml."""
