"""Idle nodes a gang may book instead of launching (issue 34): priced at zero, inside one
topology domain with whatever is launched beside them.

A reused node runs already: it costs nothing more (an on-demand node bills whether it
hosts work or not until scale-down removes it; a reserved one bills with its reservation)
and it starts the gang without a boot. So for each domain holding idle nodes that can host
some of the gang's pods, the pods they can host are taken off the demand, and the rest is
planned in that domain alone; the answer with the least on-demand spend wins, ties going
to the one that reuses more nodes (a launch is never chosen over a free node that is
already up), and the plan without reuse stays a candidate (never worse than today).

Within a domain, nodes are handed out greedily: pod sets with the most GPUs per pod
first (the scarce nodes go to the pods that need them), each pod set taking the idle
nodes of the groups that pack the most of its pods per node. Every idle node of a group is
the same template as a fresh one, so what the layout's arcs say a group's node hosts, an
idle node of it hosts."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from provider.domain.cloud import CapacityType
from provider.domain.demand import Demand
from provider.domain.model import GPU_RESOURCE
from provider.domain.plan import IdleNode, Part, Plan
from provider.planner.gang import Inputs, domain_of


@dataclass(frozen=True, slots=True)
class Reuse:
    """What one domain's idle nodes take of a gang: parts booking them, and the demand
    left to launch (None: nothing left)."""

    domain: str
    parts: tuple[Part, ...]
    rest: Demand | None


def by_domain(inputs: Inputs, idle: Sequence[IdleNode]) -> list[Reuse]:
    """For each domain holding idle nodes that host some pod of the gang, what they take,
    in the domains' sorted order."""
    topology = inputs.demand.topology
    nodes: dict[str, list[IdleNode]] = defaultdict(list)
    for node in sorted(idle, key=lambda n: (n.group, n.provider_id)):
        if node.group in inputs.arcs and node.group in inputs.groups and _lasts(inputs, node):
            nodes[domain_of(inputs.groups[node.group], topology)].append(node)
    out = []
    for domain in sorted(nodes):
        reuse = _take(inputs, domain, nodes[domain])
        if reuse is not None:
            out.append(reuse)
    return out


def _lasts(inputs: Inputs, node: IdleNode) -> bool:
    """The rules a launch into the node's reservation obeys (gang.Inputs._usable), with
    no boot to wait for: capacity whose end ends its instances and that ends under the
    gang's runtime, or that its owner may reclaim, is not planned unless the gang allows
    interruption. A node of capacity whose end only ends launches (an ODCR) runs on past
    it, so it hosts any gang."""
    if node.reservation is None or inputs.demand.allow_interruption:
        return True
    demand, view = inputs.demand, inputs.view
    for r in view.reservations:
        if r.id != node.reservation:
            continue
        if r.interruptible:
            return False
        return r.ends_at is None or not r.ends_instances or \
            r.ends_at >= view.now + (demand.runtime_to_outlast or 0.0)
    # Not listed (ended, or not yet seen): a block's node may go at its end, unknown here.
    return False


def _take(inputs: Inputs, domain: str, idle: list[IdleNode]) -> Reuse | None:
    demand = inputs.demand
    per_node = {(gid, name): k for gid in {n.group for n in idle}
                for name, k in inputs.arcs[gid]}
    free = list(idle)
    left: dict[str, int] = {p.name: p.count for p in demand.pod_sets}
    booked: dict[tuple[str, CapacityType, str | None], list[tuple[str, str, int]]] = \
        defaultdict(list)  # (group, type, reservation) -> (node, pod set, pods)
    for pod_set in sorted(demand.pod_sets,
                          key=lambda p: (-p.requests.get(GPU_RESOURCE), p.name)):
        fits = sorted((n for n in free if (n.group, pod_set.name) in per_node),
                      key=lambda n: (-per_node[(n.group, pod_set.name)], n.group,
                                     n.provider_id))
        for node in fits:
            if left[pod_set.name] <= 0:
                break
            pods = min(left[pod_set.name], per_node[(node.group, pod_set.name)])
            left[pod_set.name] -= pods
            free.remove(node)
            booked[(node.group, node.capacity_type, node.reservation)].append(
                (node.provider_id, pod_set.name, pods))
    if not booked:
        return None
    parts = []
    for (gid, ctype, rid), entries in sorted(booked.items(), key=lambda kv: (
            kv[0][0], str(kv[0][1]), kv[0][2] or "")):
        hosted: dict[str, int] = {}
        for _, name, pods in entries:
            hosted[name] = hosted.get(name, 0) + pods
        ids = tuple(node for node, _, _ in entries)
        where = f" of reservation {rid}" if rid else ""
        parts.append(Part(group=gid, capacity_type=ctype, count=len(ids), price=0.0,
                          reservation=rid, pod_sets=MappingProxyType(hosted),
                          why=f"reused {len(ids)} idle node{'s' if len(ids) != 1 else ''}"
                              f"{where} (running already: no launch, no new spend)",
                          reused=ids))
    rest = tuple(dataclasses.replace(p, count=left[p.name]) for p in demand.pod_sets
                 if left[p.name] > 0)
    return Reuse(domain, tuple(parts),
                 dataclasses.replace(demand, pod_sets=rest) if rest else None)


def joined(reuse: Reuse, rest: Plan | None) -> Plan:
    """The reused parts with the plan for what is left (None: nothing was left)."""
    if rest is None:
        return Plan(reuse.parts)
    return Plan((*reuse.parts, *rest.parts), rest.notes)
