"""Where a gang's scheduler keeps its pods together, as its PodGroup says (pure). Carried onto
the gang's request and into its demand; planning by it is issue 56's.

- KAI Scheduler (github.com/NVIDIA/KAI-scheduler v0.12.0,
  pkg/apis/scheduling/v2alpha2/podgroup_types.go, TopologyConstraint):
  ``spec.topologyConstraint.requiredTopologyLevel`` is a node label, one of the levels of a
  Topology object (kai.scheduler Topology, ``spec.levels[].nodeLabel``), and every pod of the
  gang must run on nodes sharing one value of it; ``preferredTopologyLevel`` is the same,
  wished for; ``topology`` names the Topology object.
- Volcano (volcano.sh/apis v1.14.0, pkg/apis/scheduling/v1beta1/types.go,
  NetworkTopologySpec): ``spec.networkTopology.mode`` is ``hard`` (the default) or ``soft``,
  and ``highestTierAllowed`` (a number, 0 or more) or ``highestTierName`` (never both) is
  the highest tier of HyperNodes (topology.volcano.sh/v1alpha1) the gang may span."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class TopologyMode(enum.StrEnum):
    HARD = "hard"
    SOFT = "soft"


@dataclass(frozen=True, slots=True)
class NetworkTopology:
    """A Volcano gang's bound on the HyperNode tiers it may span."""

    mode: TopologyMode = TopologyMode.HARD
    highest_tier: int | None = None
    highest_tier_name: str | None = None

    def render(self) -> str:
        """As carried on a request: ``mode=hard,highestTierAllowed=2``."""
        parts = [f"mode={self.mode.value}"]
        if self.highest_tier is not None:
            parts.append(f"highestTierAllowed={self.highest_tier}")
        if self.highest_tier_name is not None:
            parts.append(f"highestTierName={self.highest_tier_name}")
        return ",".join(parts)

    @staticmethod
    def parse(text: str) -> NetworkTopology:
        """``render``'s text back; ValueError naming what is wrong."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.strip().partition("=")
            if not sep or not value:
                raise ValueError(f"{part!r} is not key=value")
            fields[key] = value
        unknown = set(fields) - {"mode", "highestTierAllowed", "highestTierName"}
        if unknown:
            raise ValueError(f"unknown keys {', '.join(sorted(unknown))}")
        try:
            mode = TopologyMode(fields.get("mode", "hard"))
        except ValueError as err:
            raise ValueError(f"mode must be hard or soft, not {fields['mode']!r}") from err
        tier = fields.get("highestTierAllowed")
        if tier is not None and not tier.isdigit():
            raise ValueError(f"highestTierAllowed must be a number, not {tier!r}")
        return NetworkTopology(mode, int(tier) if tier is not None else None,
                               fields.get("highestTierName"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def kai_levels(podgroup: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A KAI PodGroup's (required, preferred) topology level: node label keys, or None."""
    constraint = (podgroup.get("spec") or {}).get("topologyConstraint")
    if not isinstance(constraint, Mapping):
        return None, None
    return _text(constraint.get("requiredTopologyLevel")), \
        _text(constraint.get("preferredTopologyLevel"))


def volcano_network(podgroup: Mapping[str, Any]) -> NetworkTopology | None:
    """A Volcano PodGroup's network topology, or None when it states no tier (a mode alone
    bounds nothing)."""
    spec = (podgroup.get("spec") or {}).get("networkTopology")
    if not isinstance(spec, Mapping):
        return None
    tier = spec.get("highestTierAllowed")
    tier = tier if isinstance(tier, int) and not isinstance(tier, bool) and tier >= 0 \
        else None
    name = _text(spec.get("highestTierName"))
    if tier is None and name is None:
        return None
    mode = TopologyMode.SOFT if spec.get("mode") == "soft" else TopologyMode.HARD
    return NetworkTopology(mode, tier, name)
