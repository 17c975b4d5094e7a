"""Storage with the API server's write semantics: one global resourceVersion that every
write bumps, a bounded history of watch events, server-owned metadata, the status
subresource split, optimistic concurrency (409), and deletion held by finalizers.

Objects are JSON dicts kept in the storage version; `render` gives them the apiVersion
the caller asked for (v1 and v1beta1 ProvisioningRequests are one storage)."""

from __future__ import annotations

import copy
import json
import secrets
import threading
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.fakes.kube import errors, patch, validation
from tests.fakes.kube.resources import PODS, Resource

Json = dict[str, Any]
Key = tuple[str, str, str]  # (plural.group, namespace, name): plurals alone collide
Clock = Callable[[], datetime]

# Metadata only the server writes; whatever a client sends for these is ignored.
SERVER_OWNED = ("uid", "creationTimestamp", "generation", "deletionTimestamp",
                "deletionGracePeriodSeconds", "resourceVersion")


@dataclass(frozen=True)
class Change:
    """One entry of the watch history. ``obj`` is a snapshot never mutated later."""

    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: Resource
    namespace: str
    obj: Json


def render(obj: Json, resource: Resource, version: str) -> Json:
    out = copy.deepcopy(obj)
    out["apiVersion"] = resource.api_version(version)
    return out


def _timestamp(clock: Clock) -> str:
    return clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _omit_empty(res: Resource, obj: Json) -> None:
    """Built-in types serialise these fields with omitempty: an emptied map or list
    disappears (custom resources are unstructured and keep it)."""
    if res.custom:
        return
    meta = obj.get("metadata", {})
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if key in meta and not meta[key]:
            del meta[key]


def _spec_part(obj: Json) -> Json:
    """Everything generation counts: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion",
                                                        "kind")}


class Store:
    def __init__(self, clock: Clock, history_limit: int) -> None:
        self.cond = threading.Condition()
        self.clock = clock
        self.history_limit = history_limit
        self.rv = 0
        self.compacted = 0  # every change after this resourceVersion is in `history`
        self.history: deque[Change] = deque()
        self.bookmarks = 0  # bumped by FakeKube.bookmark(); watchers then send one
        self.stopped = False
        self._objects: dict[Key, Json] = {}
        self._conflicts: Counter[Key] = Counter()
        self._races: dict[Key, list[Callable[[], None]]] = {}

    # --- reads -----------------------------------------------------------------------------

    def get(self, res: Resource, namespace: str, name: str) -> Json:
        with self.cond:
            return copy.deepcopy(self._existing(res, namespace, name))

    def select(self, res: Resource, namespace: str, keep: Callable[[Json], bool]
               ) -> tuple[list[Json], int]:
        with self.cond:
            items = [copy.deepcopy(obj) for (plural, ns, _), obj in sorted(self._objects.items())
                     if plural == res.qualified and namespace in ("", ns) and keep(obj)]
            return items, self.rv

    def since(self, rv: int, res: Resource, namespace: str, keep: Callable[[Json], bool]
              ) -> tuple[list[Change], int]:
        """Changes to ``res`` after ``rv`` (caller holds ``cond``), and the
        resourceVersion they bring the watcher up to. ApiError 410 if history no longer
        reaches back to ``rv``."""
        if rv < self.compacted:
            raise errors.expired(f"too old resource version: {rv} ({self.compacted})")
        found = [c for c in self.history
                 if c.rv > rv and c.resource is res and namespace in ("", c.namespace)
                 and keep(c.obj)]
        return found, self.rv

    # --- test controls -----------------------------------------------------------------------

    def compact(self) -> int:
        with self.cond:
            self.history.clear()
            self.compacted = self.rv
            self.cond.notify_all()
            return self.rv

    def inject_conflicts(self, res: Resource, namespace: str, name: str, times: int) -> None:
        with self.cond:
            self._conflicts[(res.qualified, namespace, name)] += times

    def race(self, res: Resource, namespace: str, name: str, write: Callable[[], None]
             ) -> None:
        """``write`` runs just before the next API write to the object is applied: another
        client's write landing between this client's read and its write."""
        with self.cond:
            self._races.setdefault((res.qualified, namespace, name), []).append(write)

    def _run_races(self, res: Resource, namespace: str, name: str) -> None:
        for write in self._races.pop((res.qualified, namespace, name), []):
            write()  # cond is re-entrant: the racing write takes it again

    def bookmark(self) -> None:
        with self.cond:
            self.bookmarks += 1
            self.cond.notify_all()

    def reset(self, clock: Clock) -> None:
        """Forget every object and the watch history: a new, empty cluster on the same
        server (resourceVersions keep counting up, as they would)."""
        with self.cond:
            self.clock = clock
            self._objects.clear()
            self._conflicts.clear()
            self.history.clear()
            self.compacted = self.rv
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def resume(self) -> None:
        with self.cond:
            self.stopped = False

    # --- writes --------------------------------------------------------------------------------

    def create(self, res: Resource, version: str, namespace: str, body: Any, *,
               direct: bool = False) -> Json:
        """POST. ``direct`` (test controls) keeps a given status, which the API drops."""
        obj = self._checked_body(res, version, namespace, body)
        meta = obj.setdefault("metadata", {})
        for owned in SERVER_OWNED:
            meta.pop(owned, None)
        if res.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        with self.cond:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(
                    secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            if not direct and res.custom and res.status_subresource:
                obj.pop("status", None)
            elif not direct and res is PODS:
                obj["status"] = {"phase": "Pending"}
            validation.check_create(res, obj)
            _omit_empty(res, obj)
            key = (res.qualified, namespace, meta["name"])
            if key in self._objects:
                raise errors.already_exists(res.qualified, meta["name"])
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_timestamp(self.clock),
                        generation=1)
            obj["apiVersion"], obj["kind"] = res.api_version(res.versions[0]), res.kind
            self._commit(res, key, obj, "ADDED")
            return copy.deepcopy(obj)

    def update(self, res: Resource, version: str, namespace: str, name: str, body: Any, *,
               status: bool) -> Json:
        """PUT on the object (``status`` False: its status is kept) or on /status (only
        its status changes)."""
        candidate = self._checked_body(res, version, namespace, body)
        meta = candidate.get("metadata") or {}
        if meta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not "
                                     f"match the name on the URL ({name})")
        with self.cond:
            self._run_races(res, namespace, name)
            existing = self._existing(res, namespace, name)
            self._take_conflict(res, namespace, name)
            sent = str(meta.get("resourceVersion") or "")
            if not sent and res.custom:
                raise errors.invalid(res.kind_group, res.kind, name, [errors.Cause(
                    "metadata.resourceVersion", "FieldValueInvalid",
                    "Invalid value: 0x0: must be specified for an update")])
            if sent and sent != existing["metadata"]["resourceVersion"]:
                raise errors.conflict(res.qualified, name)
            return self._write(res, existing, candidate, status_only=status, direct=False)

    def patch(self, res: Resource, version: str, namespace: str, name: str,
              content_type: str, raw: bytes, *, status: bool) -> Json:
        with self.cond:
            self._run_races(res, namespace, name)
            existing = self._existing(res, namespace, name)
            self._take_conflict(res, namespace, name)
            patched = patch.apply(content_type, raw, render(existing, res, version),
                                  custom=res.custom)
            # A patch that carries metadata.resourceVersion is a precondition on it: 409
            # when the object changed since (API conventions, "Concurrency Control and
            # Consistency": https://github.com/kubernetes/community/blob/master/
            # contributors/devel/sig-architecture/api-conventions.md#concurrency-control-
            # and-consistency; kubernetes/kubernetes#63104). Without it a patch applies to
            # whatever is stored, and a merge patch replaces lists whole (RFC 7386).
            sent = str((patched.get("metadata") or {}).get("resourceVersion") or "")
            if sent and sent != existing["metadata"]["resourceVersion"]:
                raise errors.conflict(res.qualified, name)
            return self._write(res, existing, patched, status_only=status, direct=False)

    def modify(self, res: Resource, namespace: str, name: str, change: Callable[[Json], None]
               ) -> Json:
        """Test control: read, let ``change`` edit anything (spec and status alike), write.
        Injected conflicts and immutability do not apply; finalizers do."""
        with self.cond:
            existing = self._existing(res, namespace, name)
            candidate = copy.deepcopy(existing)
            change(candidate)
            return self._write(res, existing, candidate, status_only=False, direct=True)

    def delete(self, res: Resource, namespace: str, name: str, options: Any, *,
               direct: bool = False) -> tuple[Json, bool]:
        """DELETE: (the object, whether it is gone). With finalizers it stays, marked with
        deletionTimestamp, until an update removes the last one."""
        options = options if isinstance(options, dict) else {}
        pre = options.get("preconditions") or {}
        with self.cond:
            existing = self._existing(res, namespace, name)
            if not direct:
                self._take_conflict(res, namespace, name)
            meta = existing["metadata"]
            for field, have in (("uid", meta["uid"]), ("resourceVersion",
                                                        meta["resourceVersion"])):
                want = pre.get(field)
                if want and want != have:
                    raise errors.conflict(res.qualified, name, (
                        f"Precondition failed: {field[0].upper() + field[1:]} in "
                        f"precondition: {want}, {field[0].upper() + field[1:]} in object "
                        f"meta: {have}"))
            if not meta.get("finalizers"):
                return self._remove(res, existing), True
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(existing), False
            marked = copy.deepcopy(existing)
            marked["metadata"].update(deletionTimestamp=_timestamp(self.clock),
                                      deletionGracePeriodSeconds=0)
            self._commit(res, self._key(res, marked), marked, "MODIFIED")
            return copy.deepcopy(marked), False

    # --- internals -----------------------------------------------------------------------------

    def _checked_body(self, res: Resource, version: str, namespace: str, body: Any) -> Json:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        obj = copy.deepcopy(body)
        if res.custom and not obj.get("kind"):
            raise errors.bad_request(f"Object 'Kind' is missing in '{json.dumps(body)}'")
        want = res.api_version(version)
        if obj.get("apiVersion", want) != want:
            raise errors.bad_request(f"the API version in the data ({obj['apiVersion']}) does "
                                     f"not match the expected API version ({want})")
        if obj.get("kind", res.kind) != res.kind:
            raise errors.bad_request(f"the kind in the data ({obj['kind']}) does not match "
                                     f"the expected kind ({res.kind})")
        if not isinstance(obj.get("metadata", {}), dict):
            raise errors.bad_request("metadata must be an object")
        sent_ns = (obj.get("metadata") or {}).get("namespace")
        if res.namespaced and sent_ns and sent_ns != namespace:
            raise errors.bad_request("the namespace of the provided object does not match "
                                     "the namespace sent on the request")
        return obj

    def _key(self, res: Resource, obj: Json) -> Key:
        meta = obj["metadata"]
        return (res.qualified, meta.get("namespace", ""), meta["name"])

    def _existing(self, res: Resource, namespace: str, name: str) -> Json:
        found = self._objects.get((res.qualified, namespace, name))
        if found is None:
            raise errors.not_found(res.qualified, name)
        return found

    def _take_conflict(self, res: Resource, namespace: str, name: str) -> None:
        key = (res.qualified, namespace, name)
        if self._conflicts[key] > 0:
            self._conflicts[key] -= 1
            raise errors.conflict(res.qualified, name)

    def _write(self, res: Resource, existing: Json, candidate: Json, *, status_only: bool,
               direct: bool) -> Json:
        old_meta = existing["metadata"]
        if status_only:
            new = copy.deepcopy(existing)
            if "status" in candidate:
                new["status"] = copy.deepcopy(candidate["status"])
            else:
                new.pop("status", None)
        else:
            new = copy.deepcopy(candidate)
            meta = new.setdefault("metadata", {})
            for key in (*SERVER_OWNED, "name", "namespace"):
                meta.pop(key, None)
                if key in old_meta:
                    meta[key] = old_meta[key]
            if res.status_subresource and not direct:
                new.pop("status", None)
                if "status" in existing:
                    new["status"] = copy.deepcopy(existing["status"])
        new["apiVersion"], new["kind"] = existing["apiVersion"], existing["kind"]
        _omit_empty(res, new)
        validation.check_update(res, new, existing, immutability=not direct)
        if _spec_part(new) != _spec_part(existing):
            new["metadata"]["generation"] = int(old_meta.get("generation", 0)) + 1
        if old_meta.get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._remove(res, existing)
        if new == existing:
            return copy.deepcopy(existing)  # a no-op write changes nothing, not even the rv
        self._commit(res, self._key(res, new), new, "MODIFIED")
        return copy.deepcopy(new)

    def _remove(self, res: Resource, existing: Json) -> Json:
        gone = copy.deepcopy(existing)
        self._commit(res, self._key(res, gone), gone, "DELETED")
        return copy.deepcopy(gone)

    def _commit(self, res: Resource, key: Key, obj: Json, kind: str) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if kind == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
        self.history.append(Change(self.rv, kind, res, key[1], copy.deepcopy(obj)))
        while len(self.history) > self.history_limit:
            self.compacted = self.history.popleft().rv
        self.cond.notify_all()
