"""What to do about one gang, from its pods, its minimum size and its request (pure).

A gang is asked for when it is whole and stuck: at least `minMember` pods exist, and
every pod not yet on a node has been tried by the scheduler and found no room. The
request covers only those pods (a partly running gang asks for what it lacks). While a
request is open its pods consume it, so CA's own scale-up leaves them alone. A request
that has run its course (its pods landed, or it failed) makes way for the next one if
pods are stuck again (members added later, or rescheduled after a node went).

An open request counts only the pods it planned: a pod not yet counted in it takes a place
of its shape's pod set that no live pod holds (one replacing a pod that failed), and one
for which there is none waits for the gang's next request, asked for once this one ends."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    scheduled: bool  # on a node
    unschedulable: bool  # the scheduler tried and found no room (PodScheduled=False)
    consuming: str | None  # the request its annotation names
    shape: str  # pods of one shape share a pod set
    counted_in: str | None = None  # the pod set of ``consuming`` that counted it (annotation)
    created: str = ""  # its creationTimestamp (the API server's): who came first


@dataclass(frozen=True, slots=True)
class PodSet:
    """One pod set of a request: its PodTemplate's name, its shape where known (None: no
    pod of the gang has it, or a name the bridge cannot read), and its count."""

    name: str
    shape: str | None
    count: int


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
    pod_sets: tuple[PodSet, ...] = ()  # what it planned
    successor: str = ""  # the name the gang's next request will have


@dataclass(frozen=True, slots=True)
class Wait:
    why: str


@dataclass(frozen=True, slots=True)
class Ask:
    """Create request number ``generation`` for these pods."""

    generation: int
    pods: tuple[Member, ...]


@dataclass(frozen=True, slots=True)
class Counted:
    pod: Member
    pod_set: str  # the name of the pod set it takes a place of


@dataclass(frozen=True, slots=True)
class Deferred:
    """A pod the open request has no place for: of a shape it planned none of (``pod_set``
    None), or of one whose every place a live pod holds."""

    pod: Member
    pod_set: PodSet | None


@dataclass(frozen=True, slots=True)
class Mark:
    """Annotate ``pods`` as consuming the open request (each in its place), and
    ``deferred`` as consuming its ``successor``, which they wait for."""

    request: str
    pods: tuple[Counted, ...]
    deferred: tuple[Deferred, ...] = ()
    successor: str = ""


Decision = Wait | Ask | Mark


def decide(members: tuple[Member, ...], min_member: int,
           request: RequestState | None, short: str | None = None) -> Decision:
    """``short``: why the gang is not whole yet when its size is not one number (a group
    of gangs: provider/domain/gangs/native.py); None: judged by ``min_member``."""
    stuck = tuple(m for m in members if not m.scheduled)
    if request is not None and request.phase is RequestPhase.OPEN:
        return _count(members, request)
    if not stuck:
        return Wait("every pod of the gang is on a node")
    if request is not None and request.phase is RequestPhase.FAILED:
        return Wait(f"request {request.name} failed ({request.reason}); recreate the gang "
                    "to ask again")
    if short is not None:
        return Wait(short)
    if len(members) < min_member:
        return Wait(f"{len(members)} of its {min_member} pods exist")
    untried = [m for m in stuck if not m.unschedulable]
    if untried:
        return Wait(f"the scheduler has not tried {len(untried)} of its pods yet")
    return Ask(1 if request is None else request.generation + 1, stuck)


def _count(members: tuple[Member, ...], request: RequestState) -> Mark | Wait:
    """Places in the open request for the pods it has not counted, oldest first (those
    that already name it before those that do not); the rest wait for its successor.
    Read from the request's pod sets and the pods' annotations alone, so a restart, a
    second replica or a skewed clock counts the same pods."""
    planned = {ps.name: ps for ps in request.pod_sets}
    of_shape = {ps.shape: ps for ps in request.pod_sets if ps.shape is not None}

    def holds(m: Member) -> bool:
        return m.consuming == request.name and m.counted_in in planned

    held = Counter(m.counted_in for m in members if holds(m))
    free = {name: ps.count - held[name] for name, ps in planned.items()}
    new = sorted((m for m in members if not m.scheduled and not holds(m)
                  and m.consuming != request.successor),
                 key=lambda m: (m.consuming != request.name, m.created, m.name))
    counted: list[Counted] = []
    deferred: list[Deferred] = []
    for m in new:
        ps = of_shape.get(m.shape)
        if ps is not None and free[ps.name] > 0:
            free[ps.name] -= 1
            counted.append(Counted(m, ps.name))
        else:
            deferred.append(Deferred(m, ps))
    if not counted and not deferred:
        return Wait(f"request {request.name} is open")
    return Mark(request.name, tuple(counted), tuple(deferred), request.successor)
