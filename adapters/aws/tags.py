"""OwnerTags <-> EC2 tags. The tags are the record of ownership: every instance carries them
from the moment it exists (TagSpecifications at launch), so reconcile can rebuild everything
from the cloud alone after a crash."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from provider.base.clock import epoch, rfc3339
from provider.domain.cloud import CapacityType, OwnerTags

PREFIX = "allset.dev/"
CLUSTER = PREFIX + "cluster"
NODE_GROUP = PREFIX + "node-group"
ATTEMPT = PREFIX + "attempt"
PART = PREFIX + "part"
SOURCE = PREFIX + "source"
RESERVATION = PREFIX + "reservation"
REQUEST = PREFIX + "request"
REQUEST_UID = PREFIX + "request-uid"
PLAN_NODES = PREFIX + "plan-nodes"
# Written by commit. Its value is the attempt id, so a commit tag only counts on instances
# of that attempt (a stray tag copied onto another instance does not adopt it).
COMMITTED = PREFIX + "committed"
# Written by mark_deleting before the first terminate call: allset owes this instance's
# termination, since the time it carries (RFC 3339, UTC; epoch seconds are read too).
DELETING = PREFIX + "deleting"

Tag = dict[str, str]  # EC2's {"Key": ..., "Value": ...}


def owner_tags(tags: OwnerTags) -> dict[str, str]:
    """What launch writes (never the commit tag: that comes once every part is up)."""
    out = {
        CLUSTER: tags.cluster,
        NODE_GROUP: tags.node_group,
        ATTEMPT: tags.attempt,
        PART: tags.part,
        SOURCE: str(tags.source),
    }
    if tags.reservation is not None:
        out[RESERVATION] = tags.reservation
    if tags.request is not None:
        out[REQUEST] = tags.request
    if tags.request_uid is not None:
        out[REQUEST_UID] = tags.request_uid
    if tags.plan_nodes is not None:
        out[PLAN_NODES] = str(tags.plan_nodes)
    return out


def to_ec2(tags: Mapping[str, str]) -> list[Tag]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def from_ec2(tags: Iterable[Mapping[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in tags or ()}


def parse_owner(tags: Mapping[str, str]) -> OwnerTags | None:
    """The owner tags of an instance, or None when they are missing or malformed (an
    instance someone else tagged with our cluster tag is not ours to manage)."""
    try:
        source = CapacityType(tags[SOURCE])
        owner = OwnerTags(
            cluster=tags[CLUSTER],
            node_group=tags[NODE_GROUP],
            attempt=tags[ATTEMPT],
            part=tags[PART],
            source=source,
            reservation=tags.get(RESERVATION) or None,
            request=tags.get(REQUEST) or None,
            request_uid=tags.get(REQUEST_UID) or None,
            plan_nodes=count(tags.get(PLAN_NODES)),
        )
    except (KeyError, ValueError):
        return None
    if not (owner.cluster and owner.node_group and owner.attempt and owner.part):
        return None
    if (source is CapacityType.RESERVED) != (owner.reservation is not None):
        return None
    committed = tags.get(COMMITTED)
    if committed is not None and committed == owner.attempt:
        owner = dataclasses.replace(owner, committed=True)
    since = deleting_since(tags.get(DELETING))
    if since is not None:
        owner = dataclasses.replace(owner, deleting_since=since)
    return owner


def deleting_value(at: float) -> str:
    return rfc3339(at)


def deleting_since(text: str | None) -> float | None:
    """The time of a deletion mark allset wrote (RFC 3339, or epoch seconds), or None:
    absent, or a value allset cannot have written (never guessed at)."""
    if not text:
        return None
    if text.replace(".", "", 1).isdigit():
        return float(text)
    try:
        return epoch(text)
    except ValueError:
        return None


def count(text: str | None) -> int | None:
    """A positive count written by allset, or None (absent, or damaged: never guessed)."""
    return int(text) if text and text.isdigit() and int(text) > 0 else None
