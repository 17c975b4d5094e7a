"""Plan a CA scale-up of one group: matching reservations first, then the cheapest
remaining source, all-or-nothing (atomic groups) or as much as can be had (partial)."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.base import CapacityType
from provider.inventory import GroupOfferings, Offering
from provider.plan import Infeasible, Part, Plan, Reason, ReasonCode


def plan_group_delta(
    offerings: GroupOfferings, count: int, *, partial: bool
) -> Plan | Infeasible:
    """Cover ``count`` nodes from the group's offerings (sorted cheapest first).

    With equal prices the fewest parts win: one reservation that holds everything is used
    whole (the smallest such, keeping larger blocks intact); otherwise reservations are
    drawn largest first so the delta spans as few cloud calls as possible."""
    chosen = _cover(offerings.offerings, count)
    got = sum(n for _, n in chosen)
    if got < count and not (partial and got > 0):
        return Infeasible(_why_short(offerings, count, got))
    parts = tuple(
        Part(
            group=offerings.group.id,
            capacity_type=o.capacity_type,
            count=n,
            price=o.price,
            reservation=o.reservation,
            why=_why(o),
        )
        for o, n in chosen
    )
    return Plan(parts)


def _cover(offerings: Sequence[Offering], count: int) -> list[tuple[Offering, int]]:
    chosen: list[tuple[Offering, int]] = []
    remaining = count
    index = 0
    while remaining > 0 and index < len(offerings):
        # Offerings of the same price form a tier; inside a tier pick for fewest parts.
        price = offerings[index].price
        tier = []
        while index < len(offerings) and offerings[index].price == price:
            tier.append(offerings[index])
            index += 1
        for offering, n in _cover_tier(tier, remaining):
            chosen.append((offering, n))
            remaining -= n
    return chosen


def _cover_tier(tier: list[Offering], remaining: int) -> list[tuple[Offering, int]]:
    unbounded = [o for o in tier if o.available is None]
    bounded = [o for o in tier if o.available is not None and o.available > 0]
    whole = [o for o in bounded if (o.available or 0) >= remaining]
    if whole:  # best fit: the smallest single source that holds everything
        return [(min(whole, key=lambda o: (o.available or 0, o.sort_key)), remaining)]
    if unbounded and not bounded:
        return [(unbounded[0], remaining)]
    out: list[tuple[Offering, int]] = []
    for o in sorted(bounded, key=lambda o: (-(o.available or 0), o.sort_key)):
        n = min(o.available or 0, remaining)
        out.append((o, n))
        remaining -= n
        if remaining == 0:
            return out
    if unbounded:
        out.append((unbounded[0], remaining))
    return out


def _why(o: Offering) -> str:
    if o.reservation:
        return f"reservation {o.reservation} has {o.available} free (already paid)"
    if o.capacity_type is CapacityType.SPOT:
        return f"spot at {o.price:.2f}/h"
    return f"on-demand at {o.price:.2f}/h"


def _why_short(offerings: GroupOfferings, count: int, got: int) -> tuple[Reason, ...]:
    group = offerings.group
    reserved = sum(o.available or 0 for o in offerings.offerings if o.reservation)
    bought = [o for o in offerings.offerings if not o.reservation]
    reasons: list[Reason] = []
    if not bought and group.capacity_types != (CapacityType.RESERVED,):
        reasons.append(Reason(
            ReasonCode.CAPACITY,
            f"group {group.id}: {count} nodes needed, {reserved} free in matching reservations "
            f"and {', '.join(c for c in group.capacity_types if c != 'reserved')} capacity in "
            f"{group.zone} is unavailable (recent stockout)",
        ))
    elif bought and all(o.available is not None for o in bought):
        limit = sum(o.available or 0 for o in bought)
        reasons.append(Reason(
            ReasonCode.QUOTA,
            f"group {group.id}: {count} nodes needed, {reserved} free in matching reservations "
            f"and quota allows {limit} more",
        ))
    else:
        reasons.append(Reason(
            ReasonCode.CAPACITY,
            f"group {group.id}: {count} nodes needed, only {got} available "
            f"({reserved} in matching reservations; the group allows only "
            f"{', '.join(group.capacity_types)})",
        ))
    for rejection in offerings.rejections[:3]:
        reasons.append(Reason(ReasonCode.RESERVATION_MISMATCH, rejection.message))
    return tuple(reasons)
