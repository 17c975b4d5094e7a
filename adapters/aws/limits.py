"""Which of EC2's vCPU limits an instance type counts against. On-Demand (and Spot) vCPU
quotas are per instance-family bucket, not per region: "Running On-Demand P instances",
"Running On-Demand G and VT instances", "Running On-Demand Standard (A, C, D, H, I, M, R,
T, Z) instances" and so on ("On-Demand Instance quotas", EC2 user guide; the Spot quotas
split the same way). A VcpuLimitExceeded on a p5 launch says nothing about g6 or m7i."""

from __future__ import annotations

import re

_STANDARD = frozenset("acdhimrtz")
# Buckets named by more than a first letter, and the families sharing one.
_NAMED = {"inf": "inf", "trn": "trn", "dl": "dl", "hpc": "hpc", "vt": "g", "u": "high-memory"}
_FAMILY = re.compile(r"[a-z]+")


def vcpu_bucket(instance_type: str) -> str:
    """The vCPU quota bucket of ``instance_type`` (``p5.48xlarge`` -> ``p``,
    ``m7i.large`` -> ``standard``, ``vt1.3xlarge`` -> ``g``)."""
    found = _FAMILY.match(instance_type.lower())
    letters = found.group(0) if found else instance_type
    if letters in _NAMED:
        return _NAMED[letters]
    first = letters[:1]
    return "standard" if first in _STANDARD else first
