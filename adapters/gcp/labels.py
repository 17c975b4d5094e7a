"""OwnerTags <-> GCE labels.

GCE label keys and values allow only lowercase letters, digits, ``_`` and ``-``, at most
63 characters each, so ``allset.dev/...`` keys are refused and values such as a part
("0.1") or a ProvisioningRequest ("team-a/train.v2") must be encoded. The encoding keeps
``[a-z0-9-]`` as is and writes every other byte of the UTF-8 text as ``_`` and two hex
digits; it is reversible, and the common values (cluster, group, attempt ids) read the same
in the console as in allset. A value longer than 63 characters once encoded continues in
``<key>-2``, ``<key>-3``...; filters use the first piece and decoding checks the whole.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

from provider.domain.cloud import CapacityType, OwnerTags

MAX_LEN = 63
PREFIX = "allset-"
CLUSTER = "allset-cluster"
NODE_GROUP = "allset-node-group"
ATTEMPT = "allset-attempt"
PART = "allset-part"
SOURCE = "allset-source"
RESERVATION = "allset-reservation"
REQUEST = "allset-request"
REQUEST_UID = "allset-request-uid"
PLAN_NODES = "allset-plan-nodes"
COMMITTED = "allset-committed"
# Written by mark_deleting before the first delete call: allset owes this instance's
# deletion, since the time it carries (whole epoch seconds: a label value allows digits).
DELETING = "allset-deleting"

_PLAIN = frozenset(string.ascii_lowercase + string.digits + "-")
_LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def encode(value: str) -> str:
    out: list[str] = []
    for char in value:
        if char in _PLAIN:
            out.append(char)
        else:
            out.extend(f"_{byte:02x}" for byte in char.encode())
    return "".join(out)


def decode(value: str) -> str:
    """Inverse of encode; raises ValueError on text encode cannot have produced."""
    if "_" not in value and _plain(value):
        return value  # the common case: nothing was escaped
    raw = bytearray()
    i = 0
    while i < len(value):
        char = value[i]
        if char == "_":
            pair = value[i + 1: i + 3]
            if len(pair) != 2 or not all(c in string.hexdigits for c in pair):
                raise ValueError(f"bad escape in label value {value!r}")
            raw.append(int(pair, 16))
            i += 3
        elif char in _PLAIN:
            raw.append(ord(char))
            i += 1
        else:
            raise ValueError(f"character {char!r} cannot appear in a label value")
    return raw.decode()


def _plain(value: str) -> bool:
    return all(c in _PLAIN for c in value)


def _pieces(encoded: str) -> list[str]:
    """Split into pieces of at most MAX_LEN, never inside a three-character escape."""
    pieces: list[str] = []
    i = 0
    while i < len(encoded):
        end = min(i + MAX_LEN, len(encoded))
        cut = encoded.rfind("_", max(i, end - 2), end)
        if end < len(encoded) and cut != -1:
            end = cut
        pieces.append(encoded[i:end])
        i = end
    return pieces or [""]


def _put(labels: dict[str, str], key: str, value: str) -> None:
    pieces = _pieces(encode(value))
    labels[key] = pieces[0]
    for n, piece in enumerate(pieces[1:], start=2):
        labels[f"{key}-{n}"] = piece


def _get(labels: Mapping[str, str], key: str) -> str | None:
    if key not in labels:
        return None
    encoded = labels[key]
    n = 2
    while f"{key}-{n}" in labels:
        encoded += labels[f"{key}-{n}"]
        n += 1
    return decode(encoded)


def to_labels(tags: OwnerTags) -> dict[str, str]:
    labels: dict[str, str] = {}
    _put(labels, CLUSTER, tags.cluster)
    _put(labels, NODE_GROUP, tags.node_group)
    _put(labels, ATTEMPT, tags.attempt)
    _put(labels, PART, tags.part)
    _put(labels, SOURCE, tags.source.value)
    if tags.reservation is not None:
        _put(labels, RESERVATION, tags.reservation)
    if tags.request is not None:
        _put(labels, REQUEST, tags.request)
    if tags.request_uid is not None:
        _put(labels, REQUEST_UID, tags.request_uid)
    if tags.plan_nodes is not None:
        labels[PLAN_NODES] = str(tags.plan_nodes)
    if tags.committed:
        labels[COMMITTED] = "true"
    if tags.deleting_since is not None:
        labels[DELETING] = deleting_value(tags.deleting_since)
    return labels


def from_labels(labels: Mapping[str, str]) -> OwnerTags | None:
    """The owner tags these labels carry, or None for an instance allset did not launch
    (or whose labels someone damaged: it is then left alone rather than guessed at)."""
    try:
        cluster = _get(labels, CLUSTER)
        group = _get(labels, NODE_GROUP)
        attempt = _get(labels, ATTEMPT)
        part = _get(labels, PART)
        source = _get(labels, SOURCE)
        if cluster is None or group is None or attempt is None or part is None \
                or source is None:
            return None
        return OwnerTags(
            cluster=cluster,
            node_group=group,
            attempt=attempt,
            part=part,
            source=CapacityType(source),
            reservation=_get(labels, RESERVATION),
            request=_get(labels, REQUEST),
            request_uid=_get(labels, REQUEST_UID),
            plan_nodes=_count(labels.get(PLAN_NODES)),
            committed=labels.get(COMMITTED) == "true",
            deleting_since=deleting_since(labels.get(DELETING)),
        )
    except ValueError:  # a bad escape, or an unknown source
        return None


def committed(labels: Mapping[str, str]) -> dict[str, str]:
    return {**labels, COMMITTED: "true"}


def moved_to(labels: Mapping[str, str], reservation: str) -> dict[str, str]:
    """The labels of a VM that landed in ``reservation`` rather than the one it was sent
    to (its long value's pieces replaced whole)."""
    piece = re.compile(rf"{re.escape(RESERVATION)}(-\d+)?$")
    out = {k: v for k, v in labels.items() if not piece.match(k)}
    _put(out, RESERVATION, reservation)
    return out


def deleting(labels: Mapping[str, str], at: float) -> dict[str, str]:
    return {**labels, DELETING: deleting_value(at)}


def deleting_value(at: float) -> str:
    return str(int(at))


def deleting_since(text: str | None) -> float | None:
    """The time of a deletion mark allset wrote, or None (absent, or not a count of
    seconds: never guessed at)."""
    return float(text) if text and text.isdigit() else None


def filter_for(**values: str) -> str:
    """A Compute list filter matching every given owner label exactly, e.g.
    ``filter_for(cluster="prod")`` -> ``(labels.allset-cluster = "prod")``."""
    keys = {"cluster": CLUSTER, "attempt": ATTEMPT, "part": PART, "node_group": NODE_GROUP}
    terms = []
    for name, value in values.items():
        piece = to_piece(value)
        terms.append(f'(labels.{keys[name]} = "{piece}")')
    return " ".join(terms)


def to_piece(value: str) -> str:
    """The first label piece of a value (what a filter can match)."""
    return _pieces(encode(value))[0]


def valid_key(key: str) -> bool:
    return bool(_KEY.match(key))


def valid_value(value: str) -> bool:
    return bool(_LABEL.match(value))


def _count(text: str | None) -> int | None:
    """A positive count written by allset, or None (absent, or damaged: never guessed)."""
    return int(text) if text and text.isdigit() and int(text) > 0 else None
