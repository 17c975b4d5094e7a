"""Why a gang cannot be planned, in words a person can act on.

Asks "would it fit if …" one constraint at a time (topology, max size, quota, recent
stockouts, reservation placement). Every constraint whose removal alone makes the gang
fit is reported, each with the numbers and the closest near-miss."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping

from provider.base.clock import ManualClock
from provider.base.words import counted
from provider.capacity.offerings import GroupOfferings
from provider.capacity.unavailable import UnavailableOfferings
from provider.domain.cloud import CapacityType, Reservation
from provider.domain.demand import PodSet, Topology
from provider.domain.plan import Infeasible, Reason, ReasonCode
from provider.planner.gang import (
    Allocation,
    Inputs,
    Relax,
    allocate,
    best_solution,
    domain_of,
    gather,
    left_out_reasons,
)
from provider.planner.matching import Exclusion, Matcher

_SHOWN = 4  # groups named per pod set before "and N more"
_SHOWN_DEVICE_MISSES = 6  # distinct device reasons named per pod set


def explain(inputs: Inputs, matcher: Matcher) -> Infeasible:
    missing = [p for p in inputs.demand.pod_sets if not inputs.candidates[p.name]]
    if missing:
        return Infeasible(tuple(_no_group(inputs, matcher, p) for p in missing))
    reasons: list[Reason] = []
    topology = _relaxed(inputs, Relax(topology=True))
    if topology is not None:
        reasons.append(_topology(inputs))
    sized = _relaxed(inputs, Relax(max_size=True))
    if sized is not None:
        reasons.append(_max_size(inputs, sized))
    quota = _relaxed(inputs, Relax(quota=True))
    if quota is not None:
        reasons.append(_quota(inputs, quota))
    if inputs.view.unavailable.active():
        unmarked = _without_marks(inputs, matcher)
        if _relaxed(unmarked, Relax()) is not None:
            reasons.append(_stockouts(inputs))
    mismatched = _mismatched_reservations(inputs)
    if mismatched and _relaxed(inputs, Relax(reservations=mismatched)) is not None:
        reasons.append(_mismatch(inputs, mismatched))
    if not reasons:
        reasons.extend(_no_capacity(inputs))
        reasons.extend(_type_mismatch(inputs))
    reasons.extend(left_out_reasons(inputs))
    return Infeasible(tuple(reasons))


def _relaxed(inputs: Inputs, relax: Relax) -> Allocation | None:
    found = best_solution(inputs, relax, any_will_do=True)
    return None if found is None else allocate(found)


def _no_group(inputs: Inputs, matcher: Matcher, pod_set: PodSet) -> Reason:
    failures = matcher.explain(inputs.demand, pod_set)
    excluded = {g: f for g, f in failures.items() if f}
    by_rule: dict[str, list[str]] = defaultdict(list)
    for gid, exclusions in excluded.items():
        by_rule[exclusions[0].rule].append(gid)
    summary = "; ".join(
        f"{rule}: {len(items)} group{'s' if len(items) != 1 else ''} "
        f"({', '.join(items[:_SHOWN])}"
        f"{f' and {len(items) - _SHOWN} more' if len(items) > _SHOWN else ''})"
        for rule, items in sorted(by_rule.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    )
    message = f"pod set {pod_set.name}: no node group can host its pods — {summary}"
    devices = _device_misses(excluded)
    if devices:
        # A DRA miss is read group by group: which term failed on whose devices.
        message += ". Devices: " + devices
    elif excluded:
        # The near-miss: the group that fails the fewest rules (then fewest resource gaps).
        near = min(excluded.items(),
                   key=lambda kv: (len(kv[1]), kv[1][0].rule == "resources", kv[0]))
        message += (f". Closest: group {near[0]}, excluded only by "
                    + "; ".join(e.message for e in near[1]))
    unsupported = next((e for f in excluded.values() for e in f
                        if e.rule == "unsupported-selector"), None)
    if unsupported is not None:
        return Reason(ReasonCode.UNSUPPORTED_SELECTOR,
                      f"pod set {pod_set.name}: {unsupported.message}", pod_set.name)
    return Reason(ReasonCode.NO_MATCHING_GROUP, message, pod_set.name)


def _device_misses(excluded: Mapping[str, list[Exclusion]]) -> str:
    """Groups excluded by their devices alone, those with the same words together:
    "h100-a, h100-b: claim g request g: no device matches (memory 80Gi ≥ 96Gi is false)"."""
    by_words: dict[str, list[str]] = defaultdict(list)
    for gid, exclusions in excluded.items():
        if len(exclusions) == 1 and exclusions[0].rule == "devices":
            by_words[exclusions[0].message].append(gid)
    shown = sorted(by_words.items(), key=lambda kv: kv[1][0])[:_SHOWN_DEVICE_MISSES]
    return " | ".join(f"{', '.join(gids)}: {words}" for words, gids in shown)


def _reach(inputs: Inputs, groups: set[str], pod_set: PodSet,
           ignore_limits: bool = False) -> int:
    """Pods of the set that these groups could host on their own (ignores sharing)."""
    total = 0
    for c in inputs.candidates[pod_set.name]:
        if c.group not in groups:
            continue
        group = inputs.groups[c.group]
        room = max(0, group.max_size - inputs.sizes.get(c.group, 0))
        supply = 0
        for o in inputs.offerings[c.group].offerings:
            if o.capacity_type not in inputs.demand.capacity_types:
                continue
            if o.reservation is None or ignore_limits:
                supply = room
                break
            supply += o.available or 0
        total += c.pods_per_node * min(room, supply)
    return total


def _topology(inputs: Inputs) -> Reason:
    topology = inputs.demand.topology
    by_domain: dict[str, set[str]] = defaultdict(set)
    for gid, g in inputs.groups.items():
        by_domain[domain_of(g, topology)].add(gid)
    scored = []
    for domain, groups in sorted(by_domain.items()):
        shares = [(min(1.0, _reach(inputs, groups, p) / p.count), p)
                  for p in inputs.demand.pod_sets]
        worst = min(shares, key=lambda s: s[0])
        scored.append((worst[0], domain, worst[1], _reach(inputs, groups, worst[1])))
    scored.sort(key=lambda s: (-s[0], s[1]))
    word = "zone" if topology is Topology.ZONE else "fabric"
    details = "; ".join(f"{word} {d}: {n} of {p.count} pods of {p.name}"
                        for _, d, p, n in scored[:_SHOWN])
    best = scored[0]
    return Reason(
        ReasonCode.TOPOLOGY,
        f"topology={topology}: no single {word} can hold the whole gang, though the "
        f"capacity exists across {word}s ({details}). Closest: {word} {best[1]}",
        best[2].name,
    )


def _max_size(inputs: Inputs, allocation: Allocation) -> Reason:
    per_group: dict[str, int] = defaultdict(int)
    for (_, gid), n in allocation.nodes.items():
        per_group[gid] += n
    limited = []
    for gid, n in sorted(per_group.items()):
        group = inputs.groups[gid]
        have = inputs.sizes.get(gid, 0)
        if have + n > group.max_size:
            limited.append(f"group {gid} would need {counted(have + n, 'node')} "
                           f"({have} now + {n}), maxSize is {group.max_size}")
    return Reason(ReasonCode.MAX_SIZE, "max size reached: " + "; ".join(limited))


def _quota(inputs: Inputs, allocation: Allocation) -> Reason:
    needed: dict[str, int] = defaultdict(int)
    for gid, source, n in allocation.takes:
        if source.capacity_type is CapacityType.RESERVED:
            continue
        group = inputs.groups[gid]
        for q in inputs.view.quotas:
            covers = (source.capacity_type in q.capacity_types
                      and (not q.instance_types or group.instance_type in q.instance_types)
                      and (not q.zones or group.zone in q.zones))
            if covers:
                needed[q.name] += group.quota_units(q.unit) * n
    parts = []
    for q in inputs.view.quotas:
        if needed.get(q.name, 0) > q.free:
            parts.append(f"quota {q.name}: the gang needs {needed[q.name]} {q.unit}, "
                         f"{q.free} of {q.limit} are free")
    return Reason(ReasonCode.QUOTA, "quota exceeded: " + "; ".join(parts))


def _without_marks(inputs: Inputs, matcher: Matcher) -> Inputs:
    clear = UnavailableOfferings(ManualClock(), 0.0)
    view = dataclasses.replace(inputs.view, unavailable=clear)
    return gather(inputs.demand, view, matcher, inputs.sizes)


def _stockouts(inputs: Inputs) -> Reason:
    zones_types = {(g.zone, g.instance_type) for g in inputs.groups.values()}
    marks = [m for m in inputs.view.unavailable.active()
             if m.key.zone in ("*", *[z for z, _ in zones_types])]
    now = inputs.view.now
    parts = [
        f"{m.key.capacity_type} {m.key.instance_type} in {m.key.zone}"
        + (f" (reservation {m.key.reservation})" if m.key.reservation else "")
        + f": {m.reason} (left out for {max(0, m.until - now):.0f}s more)"
        for m in marks
    ]
    return Reason(ReasonCode.CAPACITY,
                  "capacity unavailable (recent stockouts): " + "; ".join(parts))


def _mismatched_reservations(inputs: Inputs) -> list[Reservation]:
    """Reservations of a candidate group's instance type that no candidate group may use:
    tied to another fabric, taking launches of another platform or tenancy, needing a
    targeted launch, or in a zone with no such group.
    One that some candidate group does use is not mismatched: if it is out of reach,
    topology is."""
    offered = {o.reservation for g in inputs.offerings.values() for o in g.offerings}
    ids = {r.reservation for o in inputs.offerings.values() for r in o.rejections
           if r.rule in ("fabric", "launch", "targeted") and r.reservation not in offered}
    return [r for r in inputs.view.reservations
            if r.free > 0 and r.id not in offered and (r.id in ids or _orphaned(inputs, r))]


def _orphaned(inputs: Inputs, r: Reservation) -> bool:
    """A reservation of a type the gang can use, in a zone where no such group runs."""
    types = {(g.instance_type, g.zone) for g in inputs.groups.values()}
    return (any(t == r.instance_type for t, _ in types)
            and (r.instance_type, r.zone) not in types)


def _mismatch(inputs: Inputs, reservations: list[Reservation]) -> Reason:
    return Reason(ReasonCode.RESERVATION_MISMATCH,
                  "reserved capacity exists but does not fit where the gang can go: "
                  + "; ".join(_mismatch_messages(inputs, reservations)[:_SHOWN * 2]))


def _mismatch_messages(inputs: Inputs, reservations: list[Reservation]) -> list[str]:
    ids = {r.id for r in reservations}
    messages = set(_by_reservation(inputs, inputs.offerings, ("fabric", "launch", "targeted"),
                                   ids))
    for r in reservations:
        if _orphaned(inputs, r):
            messages.add(f"reservation {r.id} holds {r.free} free {r.instance_type} in "
                         f"{r.zone}, where no group that can host the gang runs")
    return sorted(messages)


def _by_reservation(inputs: Inputs, offerings: Mapping[str, GroupOfferings],
                    rules: tuple[str, ...], only: set[str] | None = None) -> list[str]:
    """One "group g: <why>" per rejected reservation (the first group that saw it)."""
    seen: dict[str, str] = {}
    for gid in sorted(offerings):
        for r in offerings[gid].rejections:
            if r.rule in rules and r.reservation not in seen and (only is None
                                                                  or r.reservation in only):
                seen[r.reservation] = f"group {gid}: {r.message}"
    return list(seen.values())


def _type_mismatch(inputs: Inputs) -> list[Reason]:
    types = {g.instance_type for g in inputs.groups.values()}
    zones = {g.zone for g in inputs.groups.values()}
    others = [r for r in inputs.view.reservations
              if r.instance_type not in types and r.zone in zones and r.free > 0]
    if not others:
        return []
    wanted = ", ".join(sorted(types))
    parts = [f"reservation {r.id} holds {r.free} free {r.instance_type} in {r.zone}"
             for r in others[:_SHOWN]]
    return [Reason(ReasonCode.RESERVATION_MISMATCH,
                   f"reservations in these zones hold other instance types (the gang needs "
                   f"{wanted}): " + "; ".join(parts))]


def _no_capacity(inputs: Inputs) -> list[Reason]:
    """One reason per pod set the matching groups cannot hold, with the reservations of
    those groups' instance types that were ruled out (the near-misses)."""
    demand = inputs.demand
    allowed = ", ".join(demand.capacity_types)
    out = []
    for pod_set in demand.pod_sets:
        groups = {c.group for c in inputs.candidates[pod_set.name]}
        reach = _reach(inputs, groups, pod_set)
        if reach >= pod_set.count:
            continue
        free = sum(o.available or 0 for gid in groups
                   for o in inputs.offerings[gid].offerings if o.reservation)
        near = sorted(set(_by_reservation(
                          inputs, {g: inputs.offerings[g] for g in groups},
                          ("zone", "fabric", "targeted", "window", "unavailable")))
                      | set(_mismatch_messages(inputs, [
                          r for r in inputs.view.reservations
                          if r.free > 0 and _orphaned(inputs, r)
                          and any(inputs.groups[g].instance_type == r.instance_type
                                  for g in groups)])))
        message = (
            f"not enough capacity for pod set {pod_set.name}: {pod_set.count} pods, its "
            f"groups ({', '.join(sorted(groups)[:_SHOWN])}) can host {reach} from the "
            f"allowed sources ({allowed}); their matching reservations have {free} free slots"
        )
        if near:
            message += ". Ruled out: " + "; ".join(near[:_SHOWN])
        out.append(Reason(ReasonCode.CAPACITY, message, pod_set.name))
    if not out:  # every pod set fits alone; together they compete for the same capacity
        out.append(Reason(ReasonCode.CAPACITY,
                          "not enough capacity for the whole gang at once: its pod sets "
                          "compete for the same reservations or quota"))
    return out
