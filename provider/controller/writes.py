"""What the controller writes to a ProvisioningRequest: conditions and class details on its
status, its finalizer, and events. Every write is guarded by the resourceVersion it was
read at; on a Conflict the request is read again and the change re-applied, but never to
another request that took the same name (a different UID), never by a process that no
longer acts (the KubeApi's fence, asked before each try), and never so that the record of
an attempt of an older lease epoch replaces a newer one (a deposed leader's late write)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from provider.attempts.ids import later_epoch
from provider.base.clock import Clock, rfc3339
from provider.controller import conditions as c
from provider.controller.gang import ATTEMPT_DETAIL
from provider.controller.kube import Conflict, Gone, KubeApi, event

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Change = tuple[str, bool, str, str]  # condition type, status, reason, message
ATTEMPTS = 5


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def newer(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether ``a`` is a later version of the object than ``b`` (its resourceVersion)."""
    def version(o: Mapping[str, Any]) -> int:
        text = str((o.get("metadata") or {}).get("resourceVersion") or "0")
        return int(text) if text.isdigit() else 0

    return version(a) > version(b)


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


class Writer:
    def __init__(self, kube: KubeApi, clock: Clock) -> None:
        self._kube = kube
        self._clock = clock
        self._latest: dict[str, Obj] = {}  # what our own writes returned
        self._lock = threading.Lock()

    def latest(self, key: str) -> Obj | None:
        with self._lock:
            return self._latest.get(key)

    def forget(self, key: str) -> None:
        with self._lock:
            self._latest.pop(key, None)

    def _remember(self, obj: Obj) -> Obj:
        with self._lock:
            self._latest[key_of(obj)] = obj
        return obj

    def _reread(self, obj: Obj) -> Obj | None:
        """The request as stored now, or None if it is gone or is another request that
        took its name."""
        meta = obj["metadata"]
        try:
            fresh = self._kube.get_request(meta["namespace"], meta["name"])
        except Gone:
            return None
        return fresh if uid_of(fresh) == uid_of(obj) else None

    # --- finalizer -----------------------------------------------------------------------

    def finalizers(self, obj: Obj, change: Callable[[list[str]], list[str]]) -> Obj | None:
        """Apply ``change`` to the request's finalizers with a resourceVersion-guarded
        patch, reading again on Conflict. None when the request is gone (or deleted by
        this very write)."""
        current: Obj | None = obj
        for _ in range(ATTEMPTS):
            if current is None:
                return None
            have = list((current["metadata"].get("finalizers")) or [])
            want = change(have)
            if want == have:
                return self._remember(current) if current is not obj else current
            try:
                return self._remember(self._kube.set_finalizers(current, want))
            except Conflict:
                current = self._reread(current)
            except Gone:
                return None
        raise Conflict(f"finalizers of {key_of(obj)}: still conflicting after {ATTEMPTS} "
                       f"tries")

    # --- status --------------------------------------------------------------------------

    def update(self, obj: Obj, changes: list[Change], *, warning: bool = False,
               details: Mapping[str, str | None] | None = None, note: str = ""
               ) -> Obj | None:
        """Apply condition changes and class details (None removes a key), re-reading
        the request on a conflict, and record an event for each transition. Returns the
        request as written (or as it was, when nothing changed); None if it is gone or
        the write kept conflicting."""
        now = self._clock.now()
        current: Obj | None = obj
        for _ in range(ATTEMPTS):
            if current is None:
                return None
            status = dict(current.get("status") or {})
            conds = c.read(status.get("conditions"))
            generation = int((current.get("metadata") or {}).get("generation") or 0)
            changed = [ch for ch in changes
                       if c.put(conds, ch[0], ch[1], ch[2], ch[3], now, generation)]
            before = dict(status.get("provisioningClassDetails") or {})
            merged = dict(before)
            for k, v in (details or {}).items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            if not changed and merged == before:
                return current
            if not _may_record(key_of(current), before, details):
                return None
            status["conditions"] = [x.as_dict() for x in conds.values()]
            if merged:
                status["provisioningClassDetails"] = merged
            else:
                status.pop("provisioningClassDetails", None)
            try:
                written = self._remember(self._kube.replace_status({**current,
                                                                    "status": status}))
            except Conflict:
                current = self._reread(current)
                continue
            except Gone:
                return None
            for ctype, value, reason, message in changed:
                text = f"{ctype}={value}: {message}" + (f" ({note})" if note else "")
                self.event(written, reason, text,
                           warning=warning and (ctype == c.FAILED or not value
                                                or ctype == c.CAPACITY_REVOKED))
            return written
        log.warning("status of %s not written: still conflicting after %d tries",
                    key_of(obj), ATTEMPTS)
        return None

    def event(self, obj: Obj, reason: str, message: str, *, warning: bool = False) -> None:
        meta = obj["metadata"]
        self.event_on({"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                       "name": meta["name"], "namespace": meta["namespace"],
                       "uid": meta.get("uid")}, reason, message, warning=warning)

    def event_on(self, involved: Mapping[str, Any], reason: str, message: str, *,
                 warning: bool = False) -> None:
        """An Event on any object (a Node of the gang, a pod of the request)."""
        made = event(involved, reason, message, warning=warning,
                     stamp=rfc3339(self._clock.now()))
        try:
            self._kube.create_event(made["metadata"]["namespace"], made)
        except Exception as err:  # events are best effort; the status is the record
            log.warning("event %s on %s %s not recorded: %s", reason, involved.get("kind"),
                        involved.get("name"), err)


def _may_record(key: str, stored: Mapping[str, str],
                wanted: Mapping[str, str | None] | None) -> bool:
    """May a write of ``wanted`` class details go over the ``stored`` ones? Not when it
    names an attempt of an older lease epoch than the one recorded: a successor recorded
    its own attempt since this write was prepared (the successor's gang would otherwise be
    taken for an earlier attempt's strays)."""
    want = (wanted or {}).get(ATTEMPT_DETAIL)
    have = stored.get(ATTEMPT_DETAIL)
    if want and have and later_epoch(have, want):
        log.warning("%s: not recording attempt %s over %s, of a later lease epoch", key,
                    want, have)
        return False
    return True
