"""What to do about one gang, from its pods, its minimum size and its request (pure).

A gang is asked for when it is whole and stuck: at least `minMember` pods exist, and
every pod not yet on a node has been tried by the scheduler and found no room. The
request covers only those pods (a partly running gang asks for what it lacks). While a
request is open its pods consume it, so CA's own scale-up leaves them alone. A request
that has run its course (its pods landed, or it failed) makes way for the next one if
pods are stuck again (members added later, or rescheduled after a node went)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    scheduled: bool  # on a node
    unschedulable: bool  # the scheduler tried and found no room (PodScheduled=False)
    consuming: str | None  # the request its annotation names
    shape: str  # pods of one shape share a pod set


class RequestPhase(enum.StrEnum):
    OPEN = "open"  # being planned, launched, or booked for its pods
    DONE = "done"  # booking consumed or expired: it will do nothing more
    FAILED = "failed"  # Failed=True: asking again would fail again


@dataclass(frozen=True, slots=True)
class RequestState:
    name: str
    generation: int  # the n-th request of this gang
    phase: RequestPhase
    reason: str = ""  # the Provisioned=False / Failed reason, typed
    message: str = ""


@dataclass(frozen=True, slots=True)
class Wait:
    why: str


@dataclass(frozen=True, slots=True)
class Ask:
    """Create request number ``generation`` for these pods."""

    generation: int
    pods: tuple[Member, ...]


@dataclass(frozen=True, slots=True)
class Mark:
    """Annotate these pods as consuming the open request."""

    request: str
    pods: tuple[Member, ...]


Decision = Wait | Ask | Mark


def decide(members: tuple[Member, ...], min_member: int,
           request: RequestState | None) -> Decision:
    stuck = tuple(m for m in members if not m.scheduled)
    if request is not None and request.phase is RequestPhase.OPEN:
        unmarked = tuple(m for m in stuck if m.consuming != request.name)
        if unmarked:
            return Mark(request.name, unmarked)
        return Wait(f"request {request.name} is open")
    if not stuck:
        return Wait("every pod of the gang is on a node")
    if request is not None and request.phase is RequestPhase.FAILED:
        return Wait(f"request {request.name} failed ({request.reason}); recreate the gang "
                    "to ask again")
    if len(members) < min_member:
        return Wait(f"{len(members)} of its {min_member} pods exist")
    untried = [m for m in stuck if not m.unschedulable]
    if untried:
        return Wait(f"the scheduler has not tried {len(untried)} of its pods yet")
    return Ask(1 if request is None else request.generation + 1, stuck)
