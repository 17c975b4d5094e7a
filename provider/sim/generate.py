"""A seeded trace generator: a three-zone GPU fleet with reservations tied to zones and
fabrics, a capacity block now and then, on-demand stockouts that come and go, a GPU quota,
and gang jobs of 1-64 nodes (some with CPU parameter servers besides their GPU workers).

The same seed always gives the same trace."""

from __future__ import annotations

import math
import random
from typing import Any

from provider.sim.trace import TraceModel, parse_trace

DAY = 86400.0
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SHAPES: dict[str, dict[str, Any]] = {
    "h100": {"instanceType": "p5.48xlarge", "gpuType": "nvidia-h100-80gb", "gpus": 8,
             "cpu": 191, "memoryGib": 1900, "onDemandPrice": 98.32},
    "a100": {"instanceType": "p4d.24xlarge", "gpuType": "nvidia-a100-40gb", "gpus": 8,
             "cpu": 95, "memoryGib": 1100, "onDemandPrice": 32.77},
    "cpu": {"instanceType": "m7i.8xlarge", "cpu": 31, "memoryGib": 120,
            "onDemandPrice": 1.61},
}
# Gang sizes in GPU nodes, and how often each comes.
SIZES = ((1, 0.35), (2, 0.20), (4, 0.15), (8, 0.12), (16, 0.10), (32, 0.05), (64, 0.03))


def fleet(days: float) -> dict[str, Any]:
    """Groups, reservations, quota: fixed; a 5-day capacity block every 10 days."""
    groups: list[dict[str, Any]] = []
    for z in ZONES:
        s = z[-1]
        groups.append({"id": f"h100-{s}-pg", "shape": "h100", "zone": z,
                       "fabric": f"pg-{s}", "maxSize": 96})
        groups.append({"id": f"h100-{s}", "shape": "h100", "zone": z, "maxSize": 64})
        groups.append({"id": f"cpu-{s}", "shape": "cpu", "zone": z, "maxSize": 64})
    for z in ZONES[:2]:
        groups.append({"id": f"a100-{z[-1]}", "shape": "a100", "zone": z, "maxSize": 64})
    reservations: list[dict[str, Any]] = [
        {"id": "cr-h100-a-pg", "shape": "h100", "zone": ZONES[0], "fabric": "pg-a",
         "count": 32},
        {"id": "cr-h100-b", "shape": "h100", "zone": ZONES[1], "count": 24},
        {"id": "cr-a100-a", "shape": "a100", "zone": ZONES[0], "count": 16},
    ]
    blocks: list[str] = []
    start = 2 * DAY
    while start + DAY <= days * DAY:
        rid = f"cb-h100-c-{len(blocks) + 1}"
        blocks.append(rid)
        reservations.append({"id": rid, "shape": "h100", "zone": ZONES[2], "fabric": "pg-c",
                             "count": 32, "kind": "capacity-block", "start": start,
                             "end": min(start + 5 * DAY, days * DAY)})
        start += 10 * DAY
    if blocks:  # capacity blocks are targeted: the fabric group of zone c names them
        next(g for g in groups if g["id"] == "h100-c-pg")["reservations"] = blocks
    return {"shapes": SHAPES, "groups": groups, "reservations": reservations,
            "quotas": [{"name": "on-demand-gpus", "gpus": 3072}]}


def stockouts(rng: random.Random, days: float) -> list[dict[str, Any]]:
    """Each GPU pool in each zone: in stock for ~36 h on average, then out for ~6 h."""
    out = []
    for shape in ("h100", "a100"):
        for z in ZONES:
            t = rng.expovariate(1 / (36 * 3600))
            while t < days * DAY:
                length = rng.expovariate(1 / (6 * 3600))
                out.append({"shape": shape, "zone": z, "start": round(t),
                            "end": round(t + length) + 1})
                t += length + rng.expovariate(1 / (36 * 3600))
    return out


def jobs(rng: random.Random, count: int, days: float) -> list[dict[str, Any]]:
    arrivals = sorted(rng.uniform(0, days * DAY) for _ in range(count))
    sizes, weights = zip(*SIZES, strict=True)
    out = []
    for i, at in enumerate(arrivals):
        nodes = rng.choices(sizes, weights)[0]
        shape = "h100" if rng.random() < 0.7 or nodes == 64 else "a100"
        # Training gangs of 8+ H100 nodes want one fabric; the rest one zone.
        topology = "fabric" if shape == "h100" and nodes >= 8 and rng.random() < 0.6 \
            else "zone"
        pod_sets = [{"shape": shape, "nodes": nodes}]
        if topology == "zone" and nodes >= 2 and rng.random() < 0.2:
            pod_sets.append({"shape": "cpu", "nodes": rng.randint(1, 2)})
        minutes = min(48 * 60, max(10, math.exp(rng.gauss(math.log(90), 0.9))))
        out.append({"name": f"j{i + 1:05d}", "arrival": round(at), "duration": round(minutes * 60),
                    "topology": topology, "podSets": pod_sets})
    return out


def generate(seed: int, count: int = 2300, days: float = 7.0) -> TraceModel:
    rng = random.Random(seed)
    raw = fleet(days)
    raw["stockouts"] = stockouts(rng, days)
    raw["jobs"] = jobs(rng, count, days)
    raw["settings"] = {"horizon": days * DAY}
    return parse_trace(raw, f"<generated seed {seed}>")
