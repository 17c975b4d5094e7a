"""When a waiting request is planned again before its backoff ends (issue 34): a request
whose attempt failed (no capacity, quota, a stockout) retries after a backoff of up to
10 minutes, while a gang that ends frees nodes it could book at once. An empty on-demand
node is released after its group's short scaleDownUnneededTime (30 s for GPU groups), so
by the time the backoff ends it is gone and the request launches fresh nodes, paying their
boot and waiting for it.

The rule: the request is planned again now when a node is idle that was not idle at its
last attempt and that one of its pod sets could use: a candidate group of its layout, from
a capacity type the request allows, whose Node as it stands takes a pod of that set
(provider/planner/reuse.py books no other). A
woken attempt that fails again leaves the backoff as it was, so a request never retries
more often than its idle nodes change. The controller and the simulation both apply it."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from provider.domain.demand import Demand
from provider.domain.plan import IdleNode
from provider.planner.layout import layout
from provider.planner.matching import Matcher
from provider.planner.reuse import refusal


def usable_groups(demand: Demand, matcher: Matcher) -> frozenset[str]:
    """The groups a node of which could hold a pod of the gang."""
    return frozenset(c.group for candidates in layout(demand, matcher).candidates
                     for c in candidates if c.pods_per_node > 0)


def wakes(demand: Demand, matcher: Matcher, idle: Iterable[IdleNode],
          seen: Collection[str]) -> bool:
    """Whether an idle node not among ``seen`` (the provider ids idle at the request's
    last attempt) could hold a pod of the gang."""
    fresh = [n for n in idle if n.provider_id not in seen
             and n.capacity_type in demand.capacity_types]
    if not fresh:
        return False
    found = layout(demand, matcher).candidates
    groups = [{c.group for c in candidates if c.pods_per_node > 0} for candidates in found]
    return any(n.group in hosts and refusal(n, pod_set) is None for n in fresh
               for pod_set, hosts in zip(demand.pod_sets, groups, strict=True))
