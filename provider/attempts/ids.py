"""Attempt ids: ``a`` (CA's scale-up) or ``r`` (a request's gang), the lease epoch the
attempt ran under, and a random part (``r3-5f0c2a9e41b7``). The cloud's tags then tell
which leadership launched what, and a record of an attempt from an older epoch can be
told from a newer one without asking anyone (a deposed leader's late write)."""

from __future__ import annotations

import re
import uuid

_ID = re.compile(r"[a-z](\d+)-[0-9a-f]+")


def attempt_id(kind: str, epoch: int) -> str:
    return f"{kind}{epoch}-{uuid.uuid4().hex[:12]}"


def epoch_of(attempt: str | None) -> int | None:
    """The lease epoch an attempt ran under; None for an id of another shape (an older
    release's ``a-<hex>``, a hand-written record)."""
    found = _ID.fullmatch(attempt or "")
    return int(found.group(1)) if found else None


def later_epoch(attempt: str | None, than: str | None) -> bool:
    """Did ``attempt`` run under a later lease epoch than ``than``? False when either
    epoch is unknown: then neither can be ordered by it."""
    mine, theirs = epoch_of(attempt), epoch_of(than)
    return mine is not None and theirs is not None and mine > theirs
