"""What the world did for I14-I16 and when (issue 50): taints someone put on Nodes,
instances the cloud stopped while kept warm, Kueue Workloads' states and an RBAC that
cannot read them. Kept by the moves (tests/adversary/workloads.py, actions.py), read by
the observer."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Truth:
    tainted: dict[str, float] = field(default_factory=dict)  # Node -> when last tainted
    stopped_kept: set[str] = field(default_factory=set)  # instances stopped while kept warm
    # Workload name -> (admitted and not finished, since when)
    workloads: dict[str, tuple[bool, float]] = field(default_factory=dict)
    forbidden_since: float | None = None  # Workloads answer 403 since then
    made: int = 0  # consumer pods made so far: names never repeat
