"""What planning a gang depends on that stays fixed while the node groups do: the groups
that can host each pod set, with how many pods a node, and which of them are
interchangeable for planning.

Worked out group by group for every request, this made each request cost more as the
fleet grew (issue 18). It depends only on the matcher's groups and on what the gang's pod
sets ask (not on their names, which are usually the request's own), so it is worked out
once per distinct ask and kept with the matcher; a plan then does its per-view work
(offerings, usable sources, classes) once per kind of group."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

from provider.capacity.ledger import offerings_kind
from provider.domain.demand import Demand
from provider.domain.model import NodeGroup
from provider.planner.matching import Candidate, Matcher

Arcs = tuple[tuple[str, int], ...]  # (pod set, pods per node), pods per node > 0


@dataclass(frozen=True, slots=True)
class Kind:
    """Candidate groups that are interchangeable for a gang: the same pods per node for
    every pod set, the same offerings (offerings_kind: type, zone, fabric, sources and
    prices) and the same boot time. Its first group stands for all in per-kind work."""

    groups: tuple[str, ...]  # sorted
    max_sizes: tuple[int, ...]  # of each group, in the same order
    first: NodeGroup
    arcs: Arcs  # empty: the groups match some pod set but a node holds none of its pods


@dataclass(frozen=True, slots=True)
class Layout:
    """A gang's layout, with pod sets named by their position in the demand."""

    candidates: tuple[tuple[Candidate, ...], ...]  # of each pod set
    used: tuple[str, ...]  # every candidate group, sorted
    groups: Mapping[str, NodeGroup]  # the matcher's groups (more than `used`)
    # In the order a walk of the groups with arcs (first seen over the pod sets'
    # candidates) meets each kind's last group: per-group writes done per kind in this
    # order leave what that walk left. Arcs name pod sets by position ("0", "1", ...).
    kinds: tuple[Kind, ...]

    def named(self, demand: Demand) -> tuple[Kind, ...]:
        """The kinds with the demand's own pod set names in their arcs."""
        names = [p.name for p in demand.pod_sets]
        return tuple(Kind(k.groups, k.max_sizes, k.first,
                          tuple((names[int(i)], n) for i, n in k.arcs)) for k in self.kinds)


# Distinct asks remembered per matcher. Each layout holds a few references per candidate
# group (about 24 KiB at 1,000 groups); a miss costs one walk of the candidates.
_MAX_LAYOUTS = 256
_layouts: weakref.WeakKeyDictionary[Matcher, dict[tuple[object, ...], Layout]] = \
    weakref.WeakKeyDictionary()
_lock = threading.Lock()


def layout(demand: Demand, matcher: Matcher) -> Layout:
    """The gang's layout over the matcher's groups (remembered per distinct ask)."""
    key = (demand.pinned_group, *[matcher.match_key(demand, p) for p in demand.pod_sets])
    with _lock:
        known = _layouts.setdefault(matcher, {})
        found = known.get(key)
    if found is None:
        found = _lay_out(demand, matcher)
        with _lock:
            if len(known) >= _MAX_LAYOUTS:
                known.clear()  # the matcher lives as long as its config
            known[key] = found
    return found


def _lay_out(demand: Demand, matcher: Matcher) -> Layout:
    candidates = matcher.match_all(demand)
    arcs: dict[str, list[tuple[str, int]]] = {}
    for i, p in enumerate(demand.pod_sets):
        for c in candidates[p.name]:
            if c.pods_per_node > 0:
                arcs.setdefault(c.group, []).append((str(i), c.pods_per_node))
    position = {gid: i for i, gid in enumerate(arcs)}
    used = sorted({c.group for cs in candidates.values() for c in cs})
    by_kind: dict[tuple[Arcs, tuple[object, ...], float], list[str]] = {}
    for gid in used:
        group = matcher.groups[gid]
        mine = tuple(arcs.get(gid, ()))
        by_kind.setdefault((mine, offerings_kind(group), group.boot_seconds), []).append(gid)
    kinds = [Kind(tuple(gids), tuple(matcher.groups[g].max_size for g in gids),
                  matcher.groups[gids[0]], mine)
             for (mine, _, _), gids in by_kind.items()]
    kinds.sort(key=lambda k: max(position.get(g, -1) for g in k.groups))
    return Layout(tuple(tuple(candidates[p.name]) for p in demand.pod_sets), tuple(used),
                  matcher.groups, tuple(kinds))
