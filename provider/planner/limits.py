"""What can never fit, said before any planning (issue 32): a gang with more pods than the
node groups that can host them could hold even empty, every group at its maxSize. Such a
gang is refused whatever the fleet holds now, so its request fails at once instead of
being planned (and retried) at a cost that grew with its pod count.

The bound is a true one, never a guess: a node hosts pods of one pod set (as every plan
has it), at most its pods-per-node of them, and a group never holds more than maxSize
nodes. So a pod set fits at most sum(maxSize x pods per node) over its groups, and the
gang needs at least ceil(pods / most pods a node holds) nodes per pod set, which its
groups together hold at most sum(maxSize) of. It reads the gang's layout only (cached per
distinct ask): the work is per pod set and candidate group, never per pod."""

from __future__ import annotations

from provider.base.words import counted
from provider.domain.demand import Demand
from provider.domain.devices import budget
from provider.domain.devices.cel import short
from provider.domain.plan import Infeasible, Reason, ReasonCode
from provider.planner.layout import layout
from provider.planner.matching import Matcher

_SHOWN = 4  # groups named in a refusal before "and N more"


def never_fits(demand: Demand, matcher: Matcher) -> Infeasible | None:
    """Why the gang can never fit at its groups' maxSize, or one of its DRA selectors ran
    out of its evaluation budget (None: it might fit)."""
    try:
        with budget.request_budget():
            found = layout(demand, matcher)  # judges every selector on the groups' devices
    except budget.RequestOverBudget as err:
        return Infeasible((Reason(ReasonCode.INVALID, f"the request is refused: {err}"),))
    over = _over_budget(demand, matcher)
    if over is not None:
        return Infeasible((over,))
    groups = matcher.groups
    refused: list[Reason] = []
    nodes = 0  # the fewest nodes the gang could need
    hosts: set[str] = set()
    for pod_set, candidates in zip(demand.pod_sets, found.candidates, strict=True):
        arcs = [(c.group, c.pods_per_node) for c in candidates if c.pods_per_node > 0]
        if not arcs:
            continue  # no node holds one of its pods: the planner says why
        most = sum(groups[g].max_size * per for g, per in arcs)
        if pod_set.count > most:
            shown = ", ".join(f"{g} {groups[g].max_size} x {per}" for g, per in arcs[:_SHOWN])
            more = f" and {len(arcs) - _SHOWN} more" if len(arcs) > _SHOWN else ""
            refused.append(Reason(
                ReasonCode.MAX_SIZE,
                f"pod set {pod_set.name}: {pod_set.count} pods can never fit: the "
                f"{len(arcs)} node groups that can host them hold at most {most} at their "
                f"maxSize (maxSize x pods per node: {shown}{more})", pod_set.name))
        nodes += -(-pod_set.count // max(per for _, per in arcs))
        hosts.update(g for g, _ in arcs)
    if refused:
        return Infeasible(tuple(refused))
    room = sum(groups[g].max_size for g in hosts)
    if nodes > room:
        return Infeasible((Reason(
            ReasonCode.MAX_SIZE,
            f"the gang can never fit: its pod sets need at least {counted(nodes, 'node')} (a node "
            f"hosts pods of one pod set), and the {len(hosts)} node groups that can host "
            f"them hold at most {room} at their maxSize together"),))
    return None


def _over_budget(demand: Demand, matcher: Matcher) -> Reason | None:
    """The first selector of the gang whose evaluation ran out of its budget (on any device,
    for this request or an earlier one): the request is invalid, as one over the static
    limits is when it is parsed."""
    for pod_set in demand.pod_sets:
        for claim in pod_set.claims:
            for request in claim.requests:
                for option in request.options:
                    for selector in option.selectors:
                        why = matcher.cel.over_budget(selector.expression)
                        if why is not None:
                            return Reason(ReasonCode.INVALID, (
                                f"pod set {pod_set.name}: claim {claim.name} request "
                                f"{option.name}: {selector.origin} selector "
                                f"{short(selector.expression)!r} {why}"), pod_set.name)
    return None
