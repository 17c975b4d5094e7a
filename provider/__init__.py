"""allset: an all-or-nothing, reservation-first Cluster Autoscaler provider for GPU fleets."""

__version__ = "0.1.0"
