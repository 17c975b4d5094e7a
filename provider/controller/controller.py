"""The controller loop: list and watch ProvisioningRequests of our class in every
namespace, and Nodes into a local cache, and hand each changed request (or the request
whose Node changed) to a worker (one worker per request at a time, many requests at
once)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kubernetes.client.rest import ApiException

from provider.app import Provider
from provider.controller import conditions as c
from provider.controller import source_labels
from provider.controller.consumers import Consumers
from provider.controller.gang_bridge import GangBridge
from provider.controller.idle import IdleNodes
from provider.controller.kube import KubeApi, resumable
from provider.controller.nodes import Node, NodeCache, is_ready, provider_id
from provider.controller.pod_cache import PodCache
from provider.controller.queue import WorkQueue
from provider.controller.request_metrics import RequestMetrics
from provider.controller.requests import NOT_READY_DELAY, Backoff, RequestHandler, ours
from provider.controller.sim_nodes import SimulatedNodes
from provider.controller.writes import Writer, key_of, newer, uid_of
from provider.domain.cloud import CloudInstance
from provider.domain.model import CAPACITY_TYPE_LABEL
from provider.leadership.elector import NotLeader

log = logging.getLogger(__name__)


class Controller:
    def __init__(
        self,
        provider: Provider,
        kube: KubeApi,
        *,
        workers: int = 16,
        backoff: Backoff | None = None,
        resync_seconds: float = 30.0,
        watch_seconds: int = 300,
        gangs: GangBridge | None = None,
    ) -> None:
        self.gangs = gangs
        self._p = provider
        self._kube = kube
        # Every write that steers the cloud asks again, right before each try: a worker
        # that checked at the top of its pass may have been deposed since.
        kube.fence_with(self._fence)
        self._workers = workers
        self._resync = resync_seconds
        self._watch_seconds = watch_seconds
        self.queue = WorkQueue(provider.clock)
        self.nodes = NodeCache(kube, self._node_changed, watch_seconds=watch_seconds)
        self.pods = PodCache(kube, self._pods_changed, watch_seconds=watch_seconds,
                             on_pending=gangs.wake if gangs is not None else None,
                             on_emptied=self._node_emptied)
        if gangs is not None:
            gangs.use_pods(self.pods)
            # Only the acting leader bridges gangs; one that starts acting passes at once.
            gangs.act_while(provider.acting)
            gangs.fence_with(self._fence)
            provider.watch_serving(lambda acting: gangs.wake() if acting else None)
        self.consumers = Consumers(self.pods)
        idle = IdleNodes(provider, self.nodes, self.pods, kube, self.standing,
                         self.standing_bookings, self.requests_by_booking)
        provider.find_idle_with(idle.find)
        self.metrics = RequestMetrics(provider.metrics.registry)
        self.handler = RequestHandler(provider, kube, backoff or Backoff(), self.nodes,
                                      self.pods, self.metrics, idle_note=idle.note,
                                      requests=self._requests)
        self._cache: dict[str, dict[str, Any]] = {}
        self._listed = False  # the cache holds a complete list (since this process began)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._label_wanted = threading.Event()
        self._labelling = threading.Lock()  # one label_sources pass at a time
        self._events = Writer(kube, provider.clock)
        fake = provider.config.schema.cloud.fake
        self.simulated_nodes = SimulatedNodes(provider, kube, self.nodes) \
            if provider.config.schema.cloud.provider == "fake" and fake is not None and \
            fake.register_nodes else None
        self._threads: list[threading.Thread] = []
        provider.protect_gangs_with(self.standing, self.booked_by_label)

    def standing(self, key: str, uid: str | None) -> bool | None:
        """Whether request ``key`` (of this uid) still holds its gang: it exists and has
        not ended (its booking expired, its capacity revoked, or it failed); None before
        the first list. A deleted request's gang is its own to end (RequestHandler)."""
        with self._lock:
            if not self._listed:
                return None
            obj = self._cache.get(key)
        if obj is None or (uid is not None and uid_of(obj) != uid):
            return False
        return _stands(obj)

    def _requests_listed(self) -> list[dict[str, Any]] | None:
        """Every request known now; None before the first complete list."""
        with self._lock:
            return list(self._cache.values()) if self._listed else None

    def _requests(self) -> list[dict[str, Any]]:
        """Every request of allset's class as last listed or watched."""
        with self._lock:
            return list(self._cache.values())

    def standing_bookings(self) -> set[str] | None:
        """The booking values of the requests that stand (see ``standing``); None before
        the first list."""
        objs = self._requests_listed()
        if objs is None:
            return None
        return {c.booking_value(str(meta.get("namespace")), str(meta.get("name")))
                for obj in objs if _stands(obj) for meta in [obj.get("metadata") or {}]}

    def booked_by_label(self, pid: str) -> str | bool | None:
        """The standing request (namespace/name) whose booking label the Node of ``pid``
        carries; False when none does; None until Nodes and requests are listed."""
        objs = self._requests_listed()
        if objs is None or not self.nodes.synced.is_set():
            return None
        node = self.nodes.get(pid)
        value = ((node or {}).get("metadata") or {}).get("labels", {}).get(c.BOOKING_LABEL)
        if not value:
            return False
        for obj in objs:
            meta = obj.get("metadata") or {}
            if _stands(obj) and c.booking_value(str(meta.get("namespace")),
                                                str(meta.get("name"))) == value:
                return f"{meta.get('namespace')}/{meta.get('name')}"
        return False

    def requests_by_booking(self) -> dict[str, dict[str, Any]]:
        """Every request known now (ended ones too), by the booking value naming it."""
        with self._lock:
            objs = list(self._cache.values())
        return {c.booking_value(str(meta.get("namespace")), str(meta.get("name"))): obj
                for obj in objs for meta in [obj.get("metadata") or {}]}

    def _fence(self) -> None:
        if not self._p.acting():
            raise NotLeader("this allset replica no longer acts (not the leader, or not "
                            "settled): the write is not sent")

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._choose_version()
        if self.gangs is not None:
            self.gangs.use_version(self._kube.version)
        self._relist()
        targets = [self._watch_loop, self._node_loop, self._pod_loop, self._resync_loop,
                   self._label_loop] + \
            ([self._gang_loop] if self.gangs is not None else []) + \
            ([self._simulated_nodes_loop] if self.simulated_nodes is not None else []) + \
            [self._work] * self._workers
        for i, target in enumerate(targets):
            thread = threading.Thread(target=target, name=f"provreq-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("ProvisioningRequest controller started (%s/%s, %d workers)",
                 "autoscaling.x-k8s.io", self._kube.version, self._workers)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop watching and working, waiting at most ``timeout`` for the threads in all:
        True when every one ended (a worker still running may be in an attempt)."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        if self.gangs is not None:
            self.gangs.wake()  # out of its wait, to see the stop
        self.queue.close()
        self._kube.stop_watching()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def sync_once(self, limit: int = 1000) -> int:
        """List, then handle every key that is due, in this thread (tests, simulation)."""
        self.nodes.relist()
        self.pods.relist()
        self._relist()
        handled = 0
        while handled < limit:
            key = self.queue.get_nowait()
            if key is None:
                break
            self._handle(key)
            handled += 1
        self.label_sources()
        if self.gangs is not None:
            self.gangs.pass_once()
        return handled

    # --- loops -----------------------------------------------------------------------------

    def _choose_version(self) -> None:
        """v1 is the storage version; clusters that only serve v1beta1 are tolerated."""
        try:
            self._kube.probe_requests()
        except ApiException as err:
            if err.status != 404:
                raise
            self._kube.version = "v1beta1"
            log.warning("ProvisioningRequest v1 is not served; using v1beta1")

    def _relist(self) -> str:
        items, version = self._kube.list_requests()
        seen = set()
        vanished: list[tuple[str, dict[str, Any]]] = []
        with self._lock:
            for obj in items:
                if not ours(obj):
                    continue
                key = key_of(obj)
                seen.add(key)
                old = self._cache.get(key)
                if old is not None and uid_of(old) != uid_of(obj):
                    vanished.append((key, old))  # deleted and recreated between lists
                self._cache[key] = obj
                self.queue.add(key)
            gone = [k for k in self._cache if k not in seen]
            vanished += [(k, self._cache.pop(k)) for k in gone]
            self._listed = True
        for key, last in vanished:
            self._tell_gone(key, last)
        return version

    def _tell_gone(self, key: str, last: dict[str, Any]) -> None:
        """The handler hears that a request is gone, each on its own: one it fails to act
        on (the API is down, or this replica stopped acting mid-way: adversary seed
        896126978) does not keep the others from being heard, nor a listing from ending.
        What it left undone is the acting leader's: attempts of a request that is gone are
        cancelled, and bookings end by the labelling sweep (label_sources)."""
        try:
            self.handler.gone(key, last)
        except Exception as err:
            log.warning("request %s is gone; handling it stopped part way: %s", key, err)

    def _watch_loop(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                version = version or self._relist()
                for kind, obj in self._kube.watch_requests(version, self._watch_seconds):
                    if self._stop.is_set():
                        return
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if kind in ("ADDED", "MODIFIED") and ours(obj):
                        with self._lock:
                            self._cache[key_of(obj)] = obj
                        if (obj.get("metadata") or {}).get("deletionTimestamp"):
                            self.handler.cancel(key_of(obj))  # its worker may be busy
                        self.queue.add(key_of(obj))
                    elif kind == "DELETED" and ours(obj):
                        with self._lock:
                            if uid_of(self._cache.get(key_of(obj)) or obj) == uid_of(obj):
                                self._cache.pop(key_of(obj), None)
                        self._tell_gone(key_of(obj), obj)
            except Exception as err:
                if self._stop.is_set():
                    return  # stop() closed the watch under us
                # A dropped connection resumes from the last version seen, as client-go's
                # reflector does (no relist per blip); the API's own errors list again.
                version = version if resumable(err) else ""
                if isinstance(err, ApiException) and err.status == 410:
                    # Our resourceVersion is too old (compacted, or a new API server):
                    # list again at once. Logged so an operator can tell this from an outage.
                    log.info("ProvisioningRequest watch expired (410 Gone); listing again")
                else:
                    log.warning("watching ProvisioningRequests failed: %s", err)
                    self._stop.wait(5.0)

    def _gang_loop(self) -> None:
        assert self.gangs is not None
        self.gangs.run(self._stop)

    def _node_loop(self) -> None:
        self.nodes.run(self._stop)

    def _pod_loop(self) -> None:
        self.pods.run(self._stop)

    def _pods_changed(self, key: str) -> None:
        """A pod that consumes request ``key`` changed: look at the request (only ours: a
        key not in the cache would read as a deleted request)."""
        with self._lock:
            known = key in self._cache
        if known:
            self.queue.add(key)

    def _node_emptied(self, name: str) -> None:
        """A Node's last pod went: each request waiting out a backoff looks now whether
        it could book the node (provider/planner/wake.py), before CA scales it down. Only
        a Node of allset's groups can be booked; another's emptying changes nothing."""
        node = self.nodes.named(name)
        pid = provider_id(node) if node is not None else ""
        if not pid or self._p.fleet.instance(pid) is None:
            return
        self.handler.idle_changed()
        for key in self.handler.backing_off():
            self.queue.add(key)

    def _node_changed(self, node: Node) -> None:
        """A Node of a request's gang registered, changed or went: look at the request.
        Any Node of ours is labelled with its capacity source."""
        inst = self._p.fleet.instance(provider_id(node)) if provider_id(node) else None
        if inst is not None and inst.tags.request is not None:
            # Ahead of requests not yet started when it is not Provisioned yet: it may be a
            # patch from it. Not for keys no longer known (a deleted request's Nodes), nor
            # for provisioned ones (Node churn must not hold new requests back).
            with self._lock:
                obj = self._cache.get(inst.tags.request)
            if obj is not None:
                done = c.read((obj.get("status") or {}).get("conditions")).get(c.PROVISIONED)
                self.queue.add(inst.tags.request, first=not (done is not None and done.true))
            if self._p.booked(inst.provider_id):
                return  # its request labels it, with the booking label in the same patch
        if inst is not None and (source_labels.missing(node, inst) or source_labels.kept_changes(
                node, self._p.keeps_warm(inst, is_ready(node)))):
            self._label_wanted.set()  # labelled by its own thread, never this one

    def _simulated_nodes_loop(self) -> None:
        assert self.simulated_nodes is not None
        self.simulated_nodes.run(self._stop)

    def _label_loop(self) -> None:
        """Label Nodes with their capacity source soon after they register (and put right
        a Node someone relabelled), without waiting for the next resync."""
        while not self._stop.is_set():
            if not self._label_wanted.wait(1.0):
                continue
            self._label_wanted.clear()
            try:
                self.label_sources()
            except Exception:
                log.exception("labelling Nodes with their capacity source failed")

    def label_sources(self) -> None:
        """Label each Node of ours with its capacity source (a pass of the resync loop:
        never on the watch thread, which one slow PATCH would stall). One pass at a time:
        the resync loop and the labelling thread both run it, and two passes over Nodes
        not yet labelled would patch each twice; the one that finds a pass running leaves
        a note for the labelling thread instead."""
        if not self._labelling.acquire(blocking=False):
            self._label_wanted.set()
            return
        try:
            booked = self._p.bookings()  # their requests label them (RequestHandler._label)
            kept = self._bookings_in_use()
            requests = self.requests_by_booking()
            for node in self.nodes.all():
                pid = provider_id(node)
                if kept is not None:
                    self._unlabel_if_done(node, kept, requests, booked=pid in booked)
                inst = self._p.fleet.instance(pid) if pid and pid not in booked else None
                if inst is not None:
                    self._label_source(node, inst)
        finally:
            self._labelling.release()

    def _bookings_in_use(self) -> set[str] | None:
        """The booking values whose Nodes keep their label (I12): every request that
        exists and has not failed or lost its capacity (an expired booking's workload may
        still run and replace pods). None until requests and pods are both listed."""
        requests = self._requests_listed()
        if requests is None or not self.pods.synced.is_set():
            return None
        kept = set()
        for obj in requests:
            conds = c.read((obj.get("status") or {}).get("conditions"))
            if any(conds.get(t) is not None and conds[t].true
                   for t in (c.FAILED, c.CAPACITY_REVOKED)):
                continue
            meta = obj.get("metadata") or {}
            kept.add(c.booking_value(str(meta.get("namespace")), str(meta.get("name"))))
        return kept

    def _unlabel_if_done(self, node: Node, kept: set[str],
                         requests: dict[str, dict[str, Any]], *, booked: bool) -> None:
        """Take the booking label off a Node once nothing can ask for it: no request it
        names stands and no consumer of it lives (controller.consumers). The booking's
        scale-down-disabled goes with it unless another booking holds the Node: it is
        taken off when the booking ends, but a request whose end was handled part way
        (the API down, or the replica deposed mid-way) left it, and CA would never scale
        the Node down."""
        meta = node.get("metadata") or {}
        value = (meta.get("labels") or {}).get(c.BOOKING_LABEL)
        name = meta.get("name")
        if not value or not name or value in kept or not self._p.acting() or \
                self.consumers.of(str(value), requests.get(str(value))):
            return
        try:
            read = str(meta.get("resourceVersion") or "")
            notes = meta.get("annotations") or {}
            held = {c.SCALE_DOWN_DISABLED: None} if not booked and not source_labels.is_kept(
                node) and notes.get(c.SCALE_DOWN_DISABLED) == "true" else {}
            self.nodes.wrote(self._kube.patch_node(str(name), {c.BOOKING_LABEL: None}, held),
                             read)
        except Exception as err:  # the next resync tries again
            log.warning("removing the ended booking %s from Node %s failed: %s", value,
                        name, err)

    def _label_source(self, node: Node, inst: CloudInstance) -> None:
        """Its capacity-source labels and, for a reserved Node kept warm, the protection
        from scale-down (both in one patch). A warm node the cloud stopped loses that
        protection and is deleted (issue 50, item 4)."""
        changes = source_labels.missing(node, inst)
        notes = source_labels.kept_changes(node, self._p.keeps_warm(inst, is_ready(node)))
        if self._p.stopped_warm(inst) and self._p.acting():
            log.info("Node %s (%s) was kept warm and its instance is stopped: deleting it",
                     (node.get("metadata") or {}).get("name"), inst.provider_id)
            self._p.gangs.terminate([inst])
        name = (node.get("metadata") or {}).get("name")
        if not (changes or notes) or not name or not inst.tags.committed or \
                not self._p.acting():
            return
        first = CAPACITY_TYPE_LABEL not in ((node.get("metadata") or {}).get("labels") or {})
        try:
            read = str((node.get("metadata") or {}).get("resourceVersion") or "")
            self.nodes.wrote(self._kube.patch_node(str(name), changes, notes), read)
        except Exception as err:  # the next resync tries again
            log.warning("labelling Node %s with its capacity source failed: %s", name, err)
            return
        if first and changes and inst.tags.request is None:
            # A request's Nodes are told when booked (RequestHandler); CA's own scale-ups
            # are told here, once, when the Node first registers: where its pods will run.
            meta = node.get("metadata") or {}
            self._events.event_on({"apiVersion": "v1", "kind": "Node", "name": name,
                                   "uid": meta.get("uid")}, "Launched", launched(inst))

    def _resync_loop(self) -> None:
        """Time moves even when nothing changes: bookings end, retries come due."""
        while not self._stop.wait(self._resync):
            with self._lock:
                keys = list(self._cache)
            for key in keys:
                self.queue.add(key)
            try:
                self._count_states()
                self.label_sources()
            except Exception:  # the loop must survive anything: bookings end through it
                log.exception("controller resync pass failed; next one in %.0fs",
                              self._resync)

    def _work(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get(timeout=1.0)
            if key is not None:
                self._handle(key)

    def _handle(self, key: str) -> None:
        delay: float | None = None
        try:
            with self._lock:
                obj = self._cache.get(key)
            if obj is None:
                self.handler.gone(key)
                return
            fresh = self.handler.latest(key)
            if fresh is not None and newer(fresh, obj):
                obj = fresh
            delay = self.handler.handle(obj)
        except NotLeader as err:
            # Deposed in the middle of a pass: nothing more was written. The new leader
            # handles the request; here it waits its turn as a standby's does.
            log.info("handling ProvisioningRequest %s stopped: %s", key, err)
            delay = NOT_READY_DELAY
        except ApiException as err:
            # The API refusing or failing a call (a 403 while a restarted API server's
            # authorizer warms up, a 5xx) is an outage, not a bug: one line, then retry.
            log.warning("handling ProvisioningRequest %s failed: the API server answered "
                        "%s %s; will retry", key, err.status, err.reason)
            delay = 10.0
        except Exception:
            log.exception("handling ProvisioningRequest %s failed; will retry", key)
            delay = 10.0
        finally:
            self.queue.done(key)
        if delay is not None:
            self.queue.add(key, delay)

    def _count_states(self) -> None:
        with self._lock:
            objs = list(self._cache.values())
        self.metrics.count(objs)
        self._p.report_pending(self.metrics.by_reason)


def launched(inst: CloudInstance) -> str:
    """What the Launched Event on a Node of CA's scale-up says."""
    tags = inst.tags
    source = f"reservation {tags.reservation}" if tags.reservation else \
        f"{tags.source.value} capacity"
    return (f"launched by attempt {tags.attempt} for Cluster Autoscaler's scale-up of node "
            f"group {tags.node_group}, from {source} in {inst.zone}")


def _stands(obj: dict[str, Any]) -> bool:
    """Not ended: its booking did not expire, its capacity was not revoked, it did not fail."""
    conds = c.read((obj.get("status") or {}).get("conditions"))
    ended = (conds.get(name) for name in (c.BOOKING_EXPIRED, c.CAPACITY_REVOKED, c.FAILED))
    return not any(cond is not None and cond.true for cond in ended)
