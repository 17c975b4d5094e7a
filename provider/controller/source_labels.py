"""Every Node allset launched says where its capacity comes from, as Karpenter's users
expect of theirs: `allset.dev/capacity-type` (reserved, on-demand, spot) and, from a
reservation, `allset.dev/reservation`. Written once the Node registers and its instance is
committed; a Node someone relabels is put right at the next resync."""

from __future__ import annotations

import re

from provider.controller.conditions import SCALE_DOWN_DISABLED
from provider.controller.nodes import Node
from provider.domain.cloud import CloudInstance
from provider.domain.model import CAPACITY_TYPE_LABEL

RESERVATION_LABEL = "allset.dev/reservation"
# On a reserved Node allset keeps up while idle (reservedNodes: keep), beside CA's
# scale-down-disabled: says the protection is the keeper's, so that it alone takes it off
# (when the reservation ends or the group releases), and a booking's end leaves it.
KEPT_ANNOTATION = "allset.dev/kept-reserved"


def kept_changes(node: Node, keep: bool) -> dict[str, str | None]:
    """The annotation changes that keep this Node up (or let it go), empty when none."""
    notes = (node.get("metadata") or {}).get("annotations") or {}
    if keep:
        want: dict[str, str | None] = {SCALE_DOWN_DISABLED: "true", KEPT_ANNOTATION: "true"}
        return {k: v for k, v in want.items() if notes.get(k) != v}
    if KEPT_ANNOTATION in notes:
        return {SCALE_DOWN_DISABLED: None, KEPT_ANNOTATION: None}
    return {}


def is_kept(node: Node) -> bool:
    return KEPT_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {})


def missing(node: Node, inst: CloudInstance) -> dict[str, str | None]:
    """The label changes this Node needs (None removes one), empty when it has them."""
    have = (node.get("metadata") or {}).get("labels") or {}
    reservation = inst.tags.reservation
    want: dict[str, str | None] = {
        CAPACITY_TYPE_LABEL: inst.tags.source.value,
        RESERVATION_LABEL: label_value(reservation) if reservation else None}
    return {k: v for k, v in want.items() if have.get(k) != v}


def label_value(reservation: str) -> str:
    """A reservation id as a label value (at most 63 of [A-Za-z0-9._-], alphanumeric at
    both ends): GCP names reservations `zone/name` or `projects/P/reservations/NAME`, and
    a value with `/` would be refused on every try. The name is what people look for."""
    name = reservation.rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]", "-", name)[:63].strip("-._")
