"""Idle nodes a gang may book instead of launching (issue 34), inside one topology domain
with whatever is launched beside them, and only where a launch from the same source would
be allowed for this gang (issue 50): its capacity types, its allowance of interruption,
and a reservation's end against its runtime.

An idle node is priced as it bills from now on. A reserved node costs nothing more (it
bills with its reservation whether it runs work or not). An on-demand or spot node is not
free: left idle it would be released (CA's 30 s scaleDownUnneededTime on a GPU group), so
reusing it keeps it billing for the whole run. What it saves is the boot a launched node
bills before the gang can start: plans are compared per hour of the run, so its price is
discounted by the boot's share of a launched node's billed time, price x R / (R + B) (R
the gang's expected runtime, B its group's boot time). A free slot of a matching
reservation therefore still wins over an idle on-demand node, and an idle on-demand node
wins over launching a like one. The plan's spend (``Plan.on_demand_cost_per_hour``) shows
what the cloud bills, the full price; the discount only weighs the choice.

For each domain holding idle nodes, up to three candidates are planned: its reserved idle
nodes alone (free: always taken first), every idle node it holds, and its reserved idle
nodes with just as many paid ones of a group as the first candidate would launch there
(the paid node replacing a like launch); the rest of the gang is planned in that domain
alone, and the cheapest whole plan wins, ties going to the one that reuses more nodes. The
plan without reuse stays a candidate (never worse than today).

Within a candidate, nodes are handed out greedily: pod sets with the most GPUs per pod
first (the scarce nodes go to the pods that need them), each pod set taking the idle
nodes of the groups that pack the most of its pods per node. An idle node is judged as
its Node stands, not as its group's template (issue 50, item 3): it hosts what the
template hosts, no more than its own allocatable allows, and none of a pod set whose
nodeSelector or required affinity its labels do not meet, or that does not tolerate one of
its NoSchedule or NoExecute taints (a maintenance drain, a GPU health checker,
node-problem-detector: someone else's say that nothing more should land there)."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from provider.domain.cloud import CapacityType
from provider.domain.demand import Demand, PodSet
from provider.domain.model import NodeGroup, Resources, Taint
from provider.domain.plan import IdleNode, Part, Plan
from provider.planner.gang import Inputs, domain_of
from provider.planner.layout import layout
from provider.planner.matching import Matcher

# The run a boot's bill is spread over, for a gang that states no runtime and whose
# operator assumes none (config runtimes.undeclared): an hour.
ASSUMED_RUN_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Reuse:
    """What one domain's idle nodes take of a gang: parts booking them, and the demand
    left to launch (None: nothing left). ``spare``: paid idle nodes of the domain this
    candidate leaves, which may replace a like launch of the plan for the rest."""

    domain: str
    parts: tuple[Part, ...]
    rest: Demand | None
    spare: tuple[IdleNode, ...] = ()
    nodes: tuple[IdleNode, ...] = ()  # the idle nodes ``parts`` book


def usable(inputs: Inputs, node: IdleNode) -> bool:
    """Whether the gang may book ``node`` at all: a node of a group that can host some of
    its pods, from a source a launch of this gang could use (gang.Inputs._usable)."""
    return node.group in inputs.arcs and node.group in inputs.groups and \
        node.capacity_type in inputs.demand.capacity_types and _lasts(inputs, node)


def by_domain(inputs: Inputs, idle: Sequence[IdleNode]) -> list[Reuse]:
    """For each domain holding idle nodes that host some pod of the gang, the candidates
    to plan the rest of it beside, in the domains' sorted order (see the module's doc)."""
    topology = inputs.demand.topology
    nodes: dict[str, list[IdleNode]] = defaultdict(list)
    for node in sorted(idle, key=lambda n: (n.group, n.provider_id)):
        if usable(inputs, node):
            nodes[domain_of(inputs.groups[node.group], topology)].append(node)
    out = []
    for domain in sorted(nodes):
        free = [n for n in nodes[domain] if n.capacity_type is CapacityType.RESERVED]
        paid = tuple(n for n in nodes[domain] if n.capacity_type is not CapacityType.RESERVED)
        alone = _take(inputs, domain, free)
        if alone is None:  # no reserved idle node: the rest is the whole gang
            alone = Reuse(domain, (), inputs.demand)
        out.append(dataclasses.replace(alone, spare=paid))
        if paid:
            every = _take(inputs, domain, [*free, *paid])
            if every is not None:
                out.append(every)
    return out


def replacing(inputs: Inputs, reuse: Reuse, rest: Plan) -> Reuse | None:
    """``reuse`` with as many of its spare paid idle nodes of each group as the plan for
    its rest launches there at a price above theirs (as the plan ranks them), or None
    when none would replace a launch."""
    if not reuse.spare:
        return None
    launched: Counter[str] = Counter()
    for part in rest.launches:
        if part.capacity_type is not CapacityType.RESERVED:
            launched[part.group] += part.count
    dearest: dict[str, float] = {}
    for p in rest.launches:
        if p.capacity_type is not CapacityType.RESERVED:
            dearest[p.group] = max(dearest.get(p.group, 0.0), p.price)
    chosen: list[IdleNode] = []
    for node in reuse.spare:
        group = inputs.groups[node.group]
        if launched[node.group] > 0 and \
                ranked_price(inputs.demand, group, node.capacity_type) < dearest[node.group]:
            chosen.append(node)
            launched[node.group] -= 1
    if not chosen:
        return None
    return _take(inputs, reuse.domain, [*reuse.nodes, *chosen])


def refusal(node: IdleNode, pod_set: PodSet) -> str | None:
    """Why ``node`` as its Node stands can take no pod of ``pod_set`` (None: it can)."""
    taint = pod_set.untolerated(node.taints)
    if taint is not None:
        return (f"taint {taint.key}={taint.value}:{taint.effect} is not tolerated by pod set "
                f"{pod_set.name}")
    if node.labels is not None:
        labels = dict(node.labels)
        for key, want in sorted(pod_set.node_selector.items()):
            if labels.get(key) != want:
                return f"pod set {pod_set.name} selects {key}={want}; the Node has " + \
                    (f"{key}={labels[key]}" if key in labels else f"no {key} label")
        if pod_set.affinity and not any(all(r.matches(labels) for r in term)
                                        for term in pod_set.affinity):
            return f"the Node's labels meet no required node affinity term of pod set " \
                   f"{pod_set.name}"
    if node.allocatable is not None and fits_on(node.allocatable, pod_set) == 0:
        short = ", ".join(sorted(pod_set.requests.shortfall(node.allocatable))) or "pods"
        return f"a pod of set {pod_set.name} does not fit the Node's allocatable ({short})"
    return None


def untolerated(demand: Demand, matcher: Matcher, group: str, taints: Sequence[Taint]
                ) -> Taint | None:
    """A taint of a Node of ``group`` that some pod set of the gang that may land there
    does not tolerate (NoSchedule or NoExecute: someone else's say that nothing more may
    land there); None when its pods may use it. A gang is not Provisioned on such a Node
    (design.md I14), launched or reused."""
    if not taints:
        return None
    found = layout(demand, matcher).candidates
    for pod_set, candidates in zip(demand.pod_sets, found, strict=True):
        if any(c.group == group and c.pods_per_node > 0 for c in candidates):
            taint = pod_set.untolerated(tuple(taints))
            if taint is not None:
                return taint
    return None


def fits_on(allocatable: Resources, pod_set: PodSet) -> int:
    """How many pods of the set fit in ``allocatable`` by every resource they request."""
    return min((allocatable.get(name) // amount for name, amount in pod_set.requests.items()
                if amount > 0), default=1)


def _room(node: IdleNode, pod_set: PodSet, template: int) -> int:
    """Pods of the set ``node`` takes: what its group's template takes (``template``), no
    more than its Node allows, none where the Node refuses them."""
    if refusal(node, pod_set) is not None:
        return 0
    if node.allocatable is None:
        return template
    return min(template, fits_on(node.allocatable, pod_set))


def _lasts(inputs: Inputs, node: IdleNode) -> bool:
    """The rules a launch into the node's reservation obeys (gang.Inputs._usable), with
    no boot to wait for: capacity whose end ends its instances and that ends under the
    gang's runtime, or that its owner may reclaim, is not planned unless the gang allows
    interruption; even then it must not have ended (its node is being terminated, the
    listing may lag), as a launch must outlast its boot. A node of capacity whose end only
    ends launches (an ODCR) runs on past it, so it hosts any gang."""
    if node.reservation is None:
        return True
    demand, view = inputs.demand, inputs.view
    for r in view.reservations:
        if r.id != node.reservation:
            continue
        if r.interruptible and not demand.allow_interruption:
            return False
        return r.ends_at is None or not r.ends_instances or \
            r.ends_at >= view.now + (demand.runtime_to_outlast or 0.0)
    # Not listed (ended, or not yet seen): a block's node may go at its end, unknown here.
    return False


def run_seconds(demand: Demand) -> float:
    """How long the gang is taken to run once up: what it states, else what its operator
    assumes for a gang that states nothing, else ASSUMED_RUN_SECONDS."""
    for seconds in (demand.expected_runtime_seconds, demand.undeclared_runtime_seconds):
        if seconds is not None and seconds > 0:
            return seconds
    return ASSUMED_RUN_SECONDS


def ranked_price(demand: Demand, group: NodeGroup, capacity_type: CapacityType) -> float:
    """What an idle node of ``group`` from ``capacity_type`` is worth per hour when plans
    are compared: its price less the boot a launch would bill, price x R / (R + B)."""
    price = group.price(capacity_type)
    run = run_seconds(demand)
    return price * run / (run + max(0.0, group.boot_seconds))


def boot_saved(demand: Demand, plan: Plan, groups: Mapping[str, NodeGroup]) -> float:
    """USD per hour the plan's paid idle nodes save against launching like ones (the boot
    each would bill), taken off its spend when plans are compared, never billed."""
    return sum(p.count * (p.price - ranked_price(demand, groups[p.group], p.capacity_type))
               for p in plan.parts if p.reused and p.capacity_type is not CapacityType.RESERVED
               and p.group in groups)


def _take(inputs: Inputs, domain: str, idle: list[IdleNode]) -> Reuse | None:
    demand = inputs.demand
    template = {(gid, name): k for gid in {n.group for n in idle}
                for name, k in inputs.arcs[gid]}
    free = list(idle)
    left: dict[str, int] = {p.name: p.count for p in demand.pod_sets}
    booked: dict[tuple[str, CapacityType, str | None], list[tuple[str, str, int]]] = \
        defaultdict(list)  # (group, type, reservation) -> (node, pod set, pods)
    taken: list[IdleNode] = []
    for pod_set in sorted(demand.pod_sets,
                          key=lambda p: (-p.requests.devices(), p.name)):
        room = {n.provider_id: _room(n, pod_set, template[(n.group, pod_set.name)])
                for n in free if (n.group, pod_set.name) in template}
        fits = sorted((n for n in free if room.get(n.provider_id, 0) > 0),
                      key=lambda n: (-room[n.provider_id], n.group, n.provider_id))
        for node in fits:
            if left[pod_set.name] <= 0:
                break
            pods = min(left[pod_set.name], room[node.provider_id])
            left[pod_set.name] -= pods
            free.remove(node)
            taken.append(node)
            booked[(node.group, node.capacity_type, node.reservation)].append(
                (node.provider_id, pod_set.name, pods))
    if not booked:
        return None
    parts = [_part(inputs, gid, ctype, rid, entries) for (gid, ctype, rid), entries in
             sorted(booked.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2] or ""))]
    rest = tuple(dataclasses.replace(p, count=left[p.name]) for p in demand.pod_sets
                 if left[p.name] > 0)
    return Reuse(domain, tuple(parts),
                 dataclasses.replace(demand, pod_sets=rest) if rest else None,
                 nodes=tuple(taken))


def _part(inputs: Inputs, gid: str, ctype: CapacityType, rid: str | None,
          entries: list[tuple[str, str, int]]) -> Part:
    """A part booking these idle nodes, priced as they bill from now on."""
    hosted: dict[str, int] = {}
    for _, name, pods in entries:
        hosted[name] = hosted.get(name, 0) + pods
    ids = tuple(node for node, _, _ in entries)
    nodes = f"{len(ids)} idle node{'s' if len(ids) != 1 else ''}"
    price = inputs.groups[gid].price(ctype)
    if ctype is CapacityType.RESERVED:
        where = f" of reservation {rid}" if rid else ""
        why = f"reused {nodes}{where} (running already, paid with its reservation: no " \
              f"launch, no new spend)"
    else:
        why = f"reused {nodes} ({ctype} at {price:.2f} USD/h, running already: kept " \
              f"instead of released, and no launch or boot to wait for)"
    return Part(group=gid, capacity_type=ctype, count=len(ids), price=price, reservation=rid,
                pod_sets=MappingProxyType(hosted), why=why, reused=ids)


def joined(reuse: Reuse, rest: Plan | None) -> Plan:
    """The reused parts with the plan for what is left (None: nothing was left)."""
    if rest is None:
        return Plan(reuse.parts)
    return Plan((*reuse.parts, *rest.parts), rest.notes)
