"""Every Node allset launched says where its capacity comes from, as Karpenter's users
expect of theirs: `allset.dev/capacity-type` (reserved, on-demand, spot) and, from a
reservation, `allset.dev/reservation`. Written once the Node registers and its instance is
committed; a Node someone relabels is put right at the next resync."""

from __future__ import annotations

import re

from provider.controller.nodes import Node
from provider.domain.cloud import CloudInstance

CAPACITY_TYPE_LABEL = "allset.dev/capacity-type"
RESERVATION_LABEL = "allset.dev/reservation"


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
