"""One ProvisioningRequest's life: accepted, planned and launched as one all-or-nothing
attempt, provisioned when every node runs (or is Ready, with waitForNodes), booked until
its pods land or the booking ends; failed with a reason a person can act on."""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapters.base import CloudInstance, InstanceState
from provider.app import Provider
from provider.controller import conditions as c
from provider.controller.kube import Conflict, Gone, KubeApi
from provider.demand import CLASS_NAME, Demand
from provider.executor import AttemptSpec, Result
from provider.ledger import CapacityView
from provider.plan import Infeasible, Part, Plan, ReasonCode
from provider.planner.gang import plan
from provider.provreq import BadRequest, Parameters, demand_from

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Backoff:
    initial: float = 60.0
    maximum: float = 600.0

    def delay(self, failures: int) -> float:
        return float(min(self.maximum, self.initial * 2.0 ** max(0, failures - 1)))


@dataclass(slots=True)
class Tracked:
    """What the controller remembers of a request between passes (the rest is in its
    status and in the cloud's tags, so a restart loses nothing that matters)."""

    uid: str
    demand: Demand | None = None
    params: Parameters | None = None
    attempt: str | None = None  # in flight
    cancel: threading.Event = field(default_factory=threading.Event)
    failures: int = 0
    retry_at: float = 0.0


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def ours(obj: Mapping[str, Any]) -> bool:
    return (obj.get("spec") or {}).get("provisioningClassName") == CLASS_NAME


class RequestHandler:
    """Brings one request a step closer to where it should be; returns when to look
    again (seconds, or None for "when it changes")."""

    def __init__(self, provider: Provider, kube: KubeApi, backoff: Backoff) -> None:
        self._p = provider
        self._kube = kube
        self._backoff = backoff
        self._tracked: dict[str, Tracked] = {}
        self._latest: dict[str, Obj] = {}  # what our own writes returned
        self._lock = threading.Lock()

    def latest(self, key: str) -> Obj | None:
        with self._lock:
            return self._latest.get(key)

    # --- entry points ------------------------------------------------------------------

    def gone(self, key: str) -> None:
        """The request was deleted: stop its attempt, end its booking."""
        with self._lock:
            tracked = self._tracked.pop(key, None)
            self._latest.pop(key, None)
        if tracked is not None:
            tracked.cancel.set()
        self._release(key)

    def cancel(self, key: str) -> None:
        """Stop the request's attempt now (it is being deleted): the executor rolls back
        at its next step instead of committing."""
        with self._lock:
            tracked = self._tracked.get(key)
        if tracked is not None:
            tracked.cancel.set()

    def cancelling(self, key: str) -> bool:
        with self._lock:
            tracked = self._tracked.get(key)
        return tracked is not None and tracked.cancel.is_set()

    def handle(self, obj: Obj) -> float | None:
        key = key_of(obj)
        meta = obj.get("metadata") or {}
        with self._lock:
            tracked = self._tracked.get(key)
            if tracked is None or tracked.uid != meta.get("uid"):
                tracked = self._tracked[key] = Tracked(str(meta.get("uid")))
        if meta.get("deletionTimestamp"):
            return self._deleting(obj, tracked)
        conds = c.read((obj.get("status") or {}).get("conditions"))
        if any(conds.get(t, _FALSE).true for t in (c.FAILED, c.BOOKING_EXPIRED,
                                                  c.CAPACITY_REVOKED)):
            self._release(key)
            return None
        if c.FINALIZER not in (meta.get("finalizers") or []):
            self._remember(self._kube.patch_request(meta["namespace"], meta["name"], {
                "metadata": {"finalizers": [*(meta.get("finalizers") or []), c.FINALIZER]}}))
            return 0.0
        if tracked.demand is None:
            try:
                tracked.demand, tracked.params = self._demand(obj)
            except BadRequest as err:
                message = "; ".join(f"{f}: {m}" if f else m for f, m in err.problems)
                self._update(obj, [(c.FAILED, True, c.INVALID_REQUEST, message)],
                             warning=True)
                return None
        if conds.get(c.PROVISIONED, _FALSE).true:
            return self._booked(obj, tracked, conds)
        return self._provisioning(obj, tracked, conds)

    # --- phases ------------------------------------------------------------------------

    def _provisioning(self, obj: Obj, t: Tracked, conds: dict[str, c.Condition]
                      ) -> float | None:
        key, now = key_of(obj), self._p.clock.now()
        assert t.demand is not None and t.params is not None
        if not conds.get(c.ACCEPTED, _FALSE).true:
            self._update(obj, [(c.ACCEPTED, True, "Accepted",
                                f"allset plans {t.demand.pods} pods in "
                                f"{len(t.demand.pod_sets)} pod sets all-or-nothing")])
            return 0.0
        created = c.epoch((obj.get("metadata") or {}).get("creationTimestamp")) or now
        if t.params.valid_until_seconds is not None and \
                now > created + t.params.valid_until_seconds:
            t.cancel.set()
            self._update(obj, [(c.FAILED, True, c.EXPIRED,
                                f"not provisioned within validUntilSeconds "
                                f"({t.params.valid_until_seconds:.0f}s)")], warning=True)
            return None
        if t.attempt is not None:
            return None  # the worker running it will look again when it is done
        mine = self._instances(key)
        if mine:
            return self._waiting(obj, t, mine)
        if now < t.retry_at:
            return t.retry_at - now
        return self._attempt(obj, t)

    def _attempt(self, obj: Obj, t: Tracked) -> float | None:
        """Plan and launch the whole gang as one attempt (in this worker's thread)."""
        key = key_of(obj)
        demand = t.demand
        assert demand is not None
        t.attempt = "r-" + uuid.uuid4().hex[:16]
        t.cancel.clear()

        attempt = t.attempt

        def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
            # What every group holds against maxSize: nodes, CA's scale-ups and other
            # requests' launches (the executor claims this plan's share atomically).
            return plan(demand, view, self._p.matcher, self._p.fleet.occupied(exclude=attempt))

        try:
            outcome = self._p.executor.execute(
                AttemptSpec(t.attempt, self._p.config.cluster, request=key), build,
                cancelled=t.cancel.is_set)
        finally:
            t.attempt = None
        if outcome.instances:
            self._p.fleet.adopt(outcome.instances, self._p.clock.now())
            t.failures = 0
            self._event(obj, "Launched", f"{len(outcome.instances)} nodes launched by attempt "
                        f"{outcome.attempt}; waiting for them to run")
            return 0.0
        if outcome.result is Result.CANCELLED:
            return None
        t.failures += 1
        code, message = _why(outcome.infeasible, outcome.last_error)
        changes = [(c.PROVISIONED, False, code, message)]
        if demand.no_retry:
            changes.append((c.FAILED, True, code, f"noRetry: {message}"))
            self._update(obj, changes, warning=True)
            return None
        delay = self._backoff.delay(t.failures)
        t.retry_at = self._p.clock.now() + delay
        self._update(obj, changes, warning=True, note=f"retrying in {delay:.0f}s")
        return delay

    def _waiting(self, obj: Obj, t: Tracked, mine: list[CloudInstance]) -> float | None:
        """Launched and committed: provisioned once every node runs (and is Ready)."""
        self._p.refresh_if_older(5.0)
        mine = self._instances(key_of(obj)) or mine
        pending = [i for i in mine if i.state is not InstanceState.RUNNING]
        if not pending and t.params is not None and t.params.wait_for_nodes:
            ready = self._ready_nodes()
            pending = [i for i in mine if i.provider_id not in ready]
        if pending:
            self._update(obj, [(c.PROVISIONED, False, c.WAITING_FOR_NODES,
                                f"{len(mine) - len(pending)} of {len(mine)} nodes ready")])
            return 5.0
        meta = obj["metadata"]
        value = c.booking_value(meta["namespace"], meta["name"])
        self._book(key_of(obj), mine, value)
        self._update(obj, [(c.PROVISIONED, True, c.CAPACITY_IS_PROVISIONED,
                            f"{len(mine)} nodes provisioned; pods select them with "
                            f"{c.BOOKING_LABEL}={value}")],
                     details={c.BOOKING_DETAIL: value})
        return 0.0

    def _booked(self, obj: Obj, t: Tracked, conds: dict[str, c.Condition]) -> float | None:
        key, now = key_of(obj), self._p.clock.now()
        assert t.demand is not None
        meta = obj["metadata"]
        mine = self._instances(key)
        self._book(key, mine, c.booking_value(meta["namespace"], meta["name"]))
        if self._consumed(meta["namespace"], meta["name"], t.demand.pods):
            self._release(key)
            self._update(obj, [(c.BOOKING_EXPIRED, True, c.BOOKING_CONSUMED,
                                "every pod of the request is scheduled")])
            return None
        since = c.epoch(conds[c.PROVISIONED].last_transition) or now
        ends = since + t.demand.booking_seconds
        if now >= ends:
            self._release(key)
            self._update(obj, [(c.BOOKING_EXPIRED, True, c.BOOKING_TIME_EXPIRED,
                                f"booking of {t.demand.booking_seconds:.0f}s ended")])
            return None
        return min(15.0, ends - now)

    def _deleting(self, obj: Obj, t: Tracked) -> float | None:
        key = key_of(obj)
        t.cancel.set()
        if t.attempt is not None:
            return 1.0  # its worker rolls it back; then the finalizer can go
        self._release(key)
        meta = obj["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != c.FINALIZER]
        if len(finalizers) != len(meta.get("finalizers") or []):
            with contextlib.suppress(Gone):
                self._kube.patch_request(meta["namespace"], meta["name"],
                                         {"metadata": {"finalizers": finalizers}})
        with self._lock:
            self._tracked.pop(key, None)
            self._latest.pop(key, None)
        return None

    # --- helpers -------------------------------------------------------------------------

    def _demand(self, obj: Obj) -> tuple[Demand, Parameters]:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace"))
        templates: dict[str, Any] = {}
        for index, pod_set in enumerate((obj.get("spec") or {}).get("podSets") or []):
            name = ((pod_set or {}).get("podTemplateRef") or {}).get("name")
            if not name:
                continue
            try:
                templates[name] = self._kube.get_pod_template(namespace, name)
            except Gone:
                raise BadRequest(key_of(obj), [(
                    f"spec.podSets[{index}].podTemplateRef.name",
                    f"PodTemplate {name!r} not found in namespace {namespace}",
                )]) from None
        return demand_from(obj, templates)

    def _instances(self, key: str) -> list[CloudInstance]:
        """This request's committed nodes, as the fleet (and so CA) sees them."""
        out = []
        for group in self._p.fleet.groups():
            for node in self._p.fleet.view(group.id).nodes:
                inst = node.instance
                if inst is not None and inst.tags.request == key and \
                        inst.state is not InstanceState.TERMINATED:
                    out.append(inst)
        return out

    def _ready_nodes(self) -> set[str]:
        ready = set()
        for node in self._kube.list_nodes():
            status = node.get("status") or {}
            if any(cond.get("type") == "Ready" and cond.get("status") == "True"
                   for cond in status.get("conditions") or []):
                ready.add((node.get("spec") or {}).get("providerID", ""))
        return ready

    def _consumed(self, namespace: str, name: str, pods: int) -> bool:
        scheduled = 0
        for pod in self._kube.list_pods(namespace):
            notes = (pod.get("metadata") or {}).get("annotations") or {}
            if any(notes.get(k) == name for k in c.CONSUME_ANNOTATIONS) and \
                    (pod.get("spec") or {}).get("nodeName"):
                scheduled += 1
        return scheduled >= pods

    def _book(self, key: str, instances: list[CloudInstance], value: str) -> None:
        """Protect the request's nodes from scale-down and label them for its pods."""
        ids = {i.provider_id for i in instances}
        self._p.book(key, ids)
        for node in self._kube.list_nodes():
            spec, meta = node.get("spec") or {}, node.get("metadata") or {}
            if spec.get("providerID") not in ids:
                continue
            labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
            if labels.get(c.BOOKING_LABEL) != value or notes.get(c.SCALE_DOWN_DISABLED) != "true":
                self._kube.patch_node(meta["name"], {c.BOOKING_LABEL: value},
                                      {c.SCALE_DOWN_DISABLED: "true"})

    def _release(self, key: str) -> None:
        """End a booking: CA may scale the nodes down again."""
        ids = self._p.unbook(key)
        if not ids:
            return
        for node in self._kube.list_nodes():
            spec, meta = node.get("spec") or {}, node.get("metadata") or {}
            if spec.get("providerID") in ids:
                self._kube.patch_node(meta["name"], {c.BOOKING_LABEL: None},
                                      {c.SCALE_DOWN_DISABLED: None})

    def _update(self, obj: Obj, changes: list[tuple[str, bool, str, str]], *,
                warning: bool = False, details: Mapping[str, str] | None = None,
                note: str = "") -> None:
        """Apply condition changes (re-reading the request on a conflict) and record an
        event for each transition."""
        now = self._p.clock.now()
        for _ in range(5):
            status = dict(obj.get("status") or {})
            conds = c.read(status.get("conditions"))
            generation = int((obj.get("metadata") or {}).get("generation") or 0)
            changed = [ch for ch in changes
                       if c.put(conds, ch[0], ch[1], ch[2], ch[3], now, generation)]
            merged = dict(status.get("provisioningClassDetails") or {})
            if details:
                merged.update(details)
            if not changed and merged == (status.get("provisioningClassDetails") or {}):
                return
            status["conditions"] = [x.as_dict() for x in conds.values()]
            if merged:
                status["provisioningClassDetails"] = merged
            try:
                self._remember(self._kube.replace_status({**obj, "status": status}))
            except Conflict:
                meta = obj["metadata"]
                obj = self._kube.get_request(meta["namespace"], meta["name"])
                continue
            except Gone:
                return
            for ctype, value, reason, message in changed:
                text = f"{ctype}={value}: {message}" + (f" ({note})" if note else "")
                self._event(obj, reason, text,
                            warning=warning and (ctype == c.FAILED or not value))
            return

    def _remember(self, obj: Obj) -> None:
        with self._lock:
            self._latest[key_of(obj)] = obj

    def _event(self, obj: Obj, reason: str, message: str, *, warning: bool = False) -> None:
        meta = obj["metadata"]
        stamp = c.rfc3339(self._p.clock.now())
        try:
            self._kube.create_event(meta["namespace"], {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                                   "name": meta["name"], "namespace": meta["namespace"],
                                   "uid": meta.get("uid")},
                "reason": reason,
                "message": message[:1024],
                "type": "Warning" if warning else "Normal",
                "source": {"component": "allset"},
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            })
        except Exception as err:  # events are best effort; the status is the record
            log.warning("event for %s not recorded: %s", key_of(obj), err)


_FALSE = c.Condition("", "False", "", "", "")


def _why(infeasible: Infeasible | None, error: Exception | None) -> tuple[str, str]:
    """A Provisioned=False reason and message that tell the causes apart."""
    if infeasible is not None:
        first = infeasible.primary
        return str(first.code), infeasible.summary()
    if error is not None:
        code = getattr(error, "code", "")
        reason = {"InsufficientCapacity": ReasonCode.CAPACITY,
                  "QuotaExceeded": ReasonCode.QUOTA}.get(code, "FailedToProvision")
        return str(reason), f"{code}: {error}"
    return "FailedToProvision", "the attempt ended without nodes"
