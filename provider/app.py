"""The provider core, wired together: fleet, ledger, executor, scale-ups, reconcile loop.
The gRPC servicer and the CLI sit on top of this; nothing here knows about gRPC."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor

from provider.attempts.executor import Executor as AttemptExecutor
from provider.attempts.executor import Journal, MemoryJournal, Observer, PartRunner, ThreadRunner
from provider.attempts.figures import reserved_gpus, scale_in_saving, spend_per_hour, team_spend
from provider.attempts.gangs import GangAttempts
from provider.attempts.ids import attempt_id
from provider.attempts.metrics import FleetFigures, Metrics
from provider.attempts.planning import InProcess, Planner
from provider.attempts.recent import RecentOutcomes
from provider.attempts.reconcile import Reconciler, UnknownGroups
from provider.attempts.scaleups import ScaleUps
from provider.base.clock import Clock, SystemClock
from provider.base.words import counted
from provider.capacity.ledger import Ledger
from provider.capacity.unavailable import UnavailableOfferings
from provider.config import LoadedConfig
from provider.domain.cloud import (
    CapacityType,
    CloudAdapter,
    CloudError,
    CloudInstance,
    InstanceState,
)
from provider.domain.demand import Demand
from provider.domain.errors import DomainError, FailedPrecondition, Unavailable
from provider.domain.fleet import Fleet, NodeState
from provider.domain.model import NodeGroup, Resources, ScaleUpMode
from provider.domain.plan import IdleNode, Infeasible
from provider.leadership.elector import AlwaysLeader, Leadership, NotLeader
from provider.planner.limits import never_fits
from provider.planner.matching import Matcher

log = logging.getLogger(__name__)

# DeleteNodes writes its deletion marks inside CA's gRPC deadline (grpc_timeout, 5s).
MARK_SECONDS = 3.0


class Provider:
    def __init__(
        self,
        config: LoadedConfig,
        adapter: CloudAdapter,
        clock: Clock | None = None,
        *,
        workers: int = 16,
        pool: Executor | None = None,
        runner: PartRunner | None = None,
        journal: Journal | None = None,
        observer: Observer | None = None,
        ids: Callable[[], str] | None = None,
        leadership: Leadership | None = None,
        planner: Planner | None = None,
    ) -> None:
        """``planner``: where requests' plans are built (in-process by default; `allset
        serve` gives a planning process, provider/attempts/planning.py)."""
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.adapter = adapter
        self.groups: dict[str, NodeGroup] = {g.id: g for g in config.groups}
        self._ends_cache: tuple[object, dict[str, float | None]] | None = None
        self.unavailable = UnavailableOfferings(self.clock, config.unavailable_ttl_seconds,
                                                config.not_offered_ttl_seconds,
                                                _quota_families(adapter, config.groups))
        self.ledger = Ledger(config.groups, self.clock, self.unavailable)
        self.ledger.booked_elsewhere(self.booked)
        self.fleet = Fleet(config.groups)
        self.ready = threading.Event()  # set by the first complete cloud listing
        self.leadership: Leadership = leadership or AlwaysLeader(self.clock)
        self._thread_runner = ThreadRunner() if runner is None else None
        self.metrics = Metrics(zones={g.id: g.zone for g in config.groups})
        self.journal: Journal = journal or MemoryJournal()
        self.recent = RecentOutcomes(observer or self.metrics)
        self.executor = AttemptExecutor(
            adapter, self.ledger, config.groups, self.clock,
            runner=runner or self._thread_runner or ThreadRunner(),
            journal=self.journal,
            observer=self.recent,
            max_plans=config.schema.attempts.max_plans,
            deadline_seconds=config.attempt_deadline_seconds,
            sizes=self.fleet,
            fence=self.leadership.check,
            unknown_hold_seconds=config.orphan_grace_seconds,
        )
        self.executor.terminator.on_marked = self.fleet.marked
        self.workers: Executor = pool or ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="scaleup"
        )
        self.matcher = Matcher(config.groups, config.schema.gpu_label)
        self.planner: Planner = planner or InProcess(self.matcher)
        self.scaleups = ScaleUps(config.cluster, self.fleet, self.executor, self.clock,
                                 self.workers, self.matcher,
                                 ids=ids or (lambda: self.new_attempt_id("a")))
        self.gangs = GangAttempts(config.cluster, self.fleet, self.executor, self.ledger,
                                  self.planner, self.clock, self,
                                  lambda: self.new_attempt_id("r"))
        self.reconciler = Reconciler(
            config.cluster, adapter, self.fleet, self.ledger, self.executor, self.clock,
            orphan_grace_seconds=config.orphan_grace_seconds,
            unknown_groups=UnknownGroups(config.schema.reconcile.unknown_groups),
            partial_groups=[g.id for g in config.groups if g.scale_up is ScaleUpMode.PARTIAL],
            leadership=self.leadership,
            attempt_deadline_seconds=config.attempt_deadline_seconds,
            metrics=self.metrics)
        self._booked: dict[str, set[str]] = {}  # request -> provider ids it holds
        self._booker: dict[str, str] = {}  # provider id -> the request that books it
        self._queue_of: dict[str, str] = {}  # request -> its Kueue LocalQueue, if any
        self._booked_lock = threading.Lock()
        # Whether a request (key, uid) still holds its committed gang: True, False, or
        # None while not known yet (the controller has not listed requests since start).
        self._standing: Callable[[str, str | None], bool | None] = lambda key, uid: False
        # Whether a Node carries the booking label of a standing request (None: not known
        # yet); the controller says, as it sees Nodes and requests.
        self._labelled: Callable[[str], str | bool | None] = lambda pid: False
        # The nodes a request may book instead of launching, now (controller.idle; none
        # without a controller: only it sees Nodes and pods).
        self._idle: Callable[[], list[IdleNode]] = list
        # CA's --scale-down-unneeded-time per group, as its last GetOptions said it.
        self._ca_unneeded: dict[str, float] = {}
        # ProvisioningRequests not Provisioned yet, by why they wait (the controller's count).
        self.pending_by_reason: dict[str, int] = {}
        # Each configured gang API: the version the cluster serves it in, or None (the
        # gang bridge's finding, for `allset status`).
        self.gang_apis: dict[str, str | None] = {}
        self.gangs_held: dict[str, str] = {}  # gang -> why its queue holds it back
        self.metrics.collect_fleet(self.fleet_figures)
        self._refresh_lock = threading.Lock()
        # Guards only who watches and what they last heard; never held across I/O, so the
        # elector's thread is not kept from renewing the lease by a slow cloud listing.
        self._watch_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._drained = threading.Event()  # stop() saw every worker finish
        self._loop: threading.Thread | None = None
        self._last_refresh = float("-inf")
        # Monotonic, as the leadership's times they are compared with (settled_from).
        self._listed_at = float("-inf")  # when the last complete listing was taken
        self._started_at = self.clock.monotonic()
        # Read once: acting() runs on every CA call.
        self._settle = config.listing_settle_seconds
        self._watchers: list[Callable[[bool], None]] = []
        self._state = (False, False)  # (ready, acting) as watchers last heard it
        self.not_ready_retry_seconds = 2.0  # how soon a failed first listing is tried again

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """First reconcile synchronously, then keep the inventory fresh in the background.
        Until one listing is complete allset knows nothing of its fleet, so it is not
        ready: CA's calls are refused and the controller waits (the loop keeps trying).
        Attempts a previous run left open are over: reconcile commits or rolls back their
        instances by their tags."""
        self._started_at = self.clock.monotonic()
        interrupted = self.journal.open_attempts()
        if interrupted:
            log.warning("previous run stopped during %d attempts: %s", len(interrupted),
                        ", ".join(a.id for a in interrupted))
            self.journal.close_interrupted([a.id for a in interrupted])
            # Those that had not begun their commit never will: no grace for them.
            self.reconciler.abandoned([a.id for a in interrupted if not a.committing])
        if not self.refresh_now():
            log.warning("first cloud listing failed (%s); not ready, retrying",
                        self.reconciler.last_error)
        self._loop = threading.Thread(target=self._refresh_loop, name="refresh", daemon=True)
        self._loop.start()

    def new_attempt_id(self, kind: str) -> str:
        """``a`` (CA scale-up) or ``r`` (request), the lease epoch it runs under, a random
        part: the cloud's tags then tell which leadership launched what."""
        return attempt_id(kind, self.leadership.epoch)

    def acting(self) -> bool:
        """May this process act on the cluster: it leads, and its fleet is read from a
        listing that shows everything its predecessor launched."""
        return self.ready.is_set() and self.leadership.is_leader() and \
            self._listed_at >= self.settled_from()

    def settled_from(self) -> float:
        """Listings lag launches (reconcile.listingSettle): one taken sooner after this
        process started, or after the lease's last holder could still act, may miss that
        process's last instances, and would show their reservation slots and maxSize room
        free. Its journal, if any, knows only this host's attempts. A monotonic reading,
        as the leadership's times are: a step of the wall clock must not let a listing
        taken before the predecessor stopped count as one taken after."""
        settle = self._settle
        # A listing from before this process led was read as a standby: nothing in it was
        # acted on (its predecessor's half gangs were never recorded as suspects).
        since = max(self._started_at, self.leadership.acquired_at)
        before = self.leadership.predecessor_stopped_by
        if before is not None:
            since = max(since, before)
        return since + settle

    def watch_serving(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(acting)`` now and whenever acting or readiness changes."""
        with self._watch_lock:
            self._watchers.append(callback)
            acting = self._state[1]
        callback(acting)

    def leadership_changed(self) -> None:
        """The elector gained or lost the lease."""
        self.metrics.leader.set(1 if self.leadership.is_leader() else 0)
        self._wake.set()  # a new leader acts only on a listing taken after it took over
        self._notify()

    def not_ready_reason(self) -> str:
        if self.ready.is_set() and not self.leadership.is_leader():
            return (f"this allset replica is the standby; the leader is "
                    f"{self.leadership.holder or 'being elected'} (retry shortly)")
        if self.ready.is_set():
            wait = max(0.0, self.settled_from() - self.clock.monotonic())
            return (f"allset waits {wait:.0f}s more for a cloud listing that shows what "
                    f"the previous allset process launched (reconcile.listingSettle "
                    f"{self._settle:.0f}s); retry shortly")
        error = self.reconciler.last_error
        return ("allset has not completed its first cloud listing yet, so it does not "
                "know its nodes" + (f" (last error: {error})" if error else "") +
                "; retry shortly")

    def _notify(self) -> None:
        """Tell watchers when readiness or acting changed (they read both). Callbacks are
        quick (health, a queued routing write) and run under the lock, so two changes
        racing from the refresh and elector threads reach them in order."""
        with self._watch_lock:
            state = (self.ready.is_set(), self.acting())
            if state == self._state:
                return
            self._state = state
            for callback in self._watchers:
                callback(state[1])

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop taking work, let running attempts finish (they commit or roll back) for at
        most ``timeout`` seconds. True when everything finished. False: some attempt or
        termination still runs, recorded in the journal and tagged in the cloud; the
        caller must then end the process without handing its lease over, and the next
        start (or the next leader) recovers it as after a crash."""
        if self.scaleups.draining:
            return self._drained.is_set()
        deadline = time.monotonic() + timeout
        self.scaleups.draining = True
        self._stopping.set()
        self._wake.set()
        if not _within(lambda: self.workers.shutdown(wait=True), timeout):
            log.warning("stopping: attempts still running after %.0fs, left for recovery: "
                        "%s", timeout, ", ".join(sorted(self.executor.in_flight)) or
                        "(terminations)")
            return False
        if self._loop is not None:
            self._loop.join(max(0.0, deadline - time.monotonic()))
        runner = self._thread_runner
        if runner is not None and not _within(runner.shutdown,
                                              max(0.0, deadline - time.monotonic())):
            return False
        if self._loop is not None and self._loop.is_alive():
            return False  # a refresh is still out, and may still terminate orphans
        if self.executor.in_flight:
            return False  # an attempt of another thread (a controller worker) still runs
        self.adapter.close()
        self._drained.set()
        return True

    def refresh_now(self) -> bool:
        with self._refresh_lock:
            taken = self.clock.monotonic()
            found = self.reconciler.run_once()
            if found is not None:
                self._listed_at = taken
                self._last_refresh = self.clock.now()
                if not self.ready.is_set():
                    self.ready.set()
                    self.metrics.ready.set(1)
        self._notify()
        return found is not None

    def refresh_if_older(self, seconds: float) -> None:
        """List the cloud now unless that was done within ``seconds`` (callers waiting on
        instance states share one listing)."""
        if self.clock.now() - self._last_refresh > seconds:
            self.refresh_now()

    # --- bookings: nodes a ProvisioningRequest holds until its pods land ---------------------

    def book(self, request: str, provider_ids: set[str], queue: str | None = None) -> None:
        with self._booked_lock:
            self._drop(request)
            self._booked[request] = set(provider_ids)
            self._booker.update(dict.fromkeys(provider_ids, request))
            self._queue_of[request] = queue or ""

    def unbook(self, request: str) -> set[str]:
        with self._booked_lock:
            self._drop(request)
            self._queue_of.pop(request, None)
            return self._booked.pop(request, set())

    def _drop(self, request: str) -> None:
        for pid in self._booked.get(request, ()):
            if self._booker.get(pid) == request:
                del self._booker[pid]

    def fleet_figures(self) -> FleetFigures:
        """Reserved GPUs per zone, spend per hour per source and group, and per team."""
        idle = {n.provider_id for n in self.idle()}
        with self._booked_lock:  # the requests' queues as their bookings stand
            booker, queues = dict(self._booker), dict(self._queue_of)
        return (reserved_gpus(self.ledger.snapshot, self.groups.values(), self.fleet, idle),
                spend_per_hour(self.fleet), team_spend(
                    self.fleet, booker, queues, idle, self.config.schema.costs.reservation_owners))

    def _count_saving(self, group_id: str, doomed: Sequence[CloudInstance]) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        for inst in doomed:
            saved = scale_in_saving(group, inst.tags.source, self._ca_unneeded.get(group_id))
            if saved:
                self.metrics.scale_in_saved.labels(group=group_id).inc(saved)

    def report_pending(self, by_reason: dict[str, int]) -> None:
        self.pending_by_reason = dict(by_reason)

    def gang_api_served(self, api: str, version: str | None, _looked: tuple[str, ...]) -> None:
        """The gang bridge found gang API ``api`` served in ``version`` (None: not served)."""
        self.gang_apis[api] = version
        self.metrics.gang_api.labels(api=api).set(0 if version is None else 1)

    def gang_held(self, gang: str, why: str | None) -> None:
        """The gang bridge holds ``gang`` back because its queue would not admit it
        (``why``), or no longer does (None)."""
        if why is None:
            self.gangs_held.pop(gang, None)
        else:
            self.gangs_held[gang] = why
        self.metrics.gangs_held.set(len(self.gangs_held))

    def note_ca_unneeded(self, group_id: str, seconds: float | None) -> None:
        if seconds is not None and group_id in self.groups:
            self._ca_unneeded[group_id] = seconds

    def find_idle_with(self, find: Callable[[], list[IdleNode]]) -> None:
        """Say which nodes are idle (the controller, which sees Nodes and pods)."""
        self._idle = find

    def idle(self) -> list[IdleNode]:
        """The nodes a request may book instead of launching, now."""
        return self._idle()

    def refusal(self, demand: Demand) -> Infeasible | None:
        """Why the gang is refused before planning (planner.limits.never_fits), or None.
        A gang whose pods claim devices is judged by the planner (`allset serve`: in a
        process of its own), since judging it evaluates the tenant's DRA selectors; any
        other is judged here, in well under a millisecond."""
        if any(pod_set.claims for pod_set in demand.pod_sets):
            return self.planner.refusal(demand)
        return never_fits(demand, self.matcher)

    def protect_gangs_with(self, standing: Callable[[str, str | None], bool | None],
                           labelled: Callable[[str], str | bool | None] | None = None
                           ) -> None:
        """Say which ProvisioningRequests stand (the controller): CA may not delete a node
        of a standing request's committed gang, booked by this process yet or not. After
        a restart or a failover bookings are empty until a pass books each gang again,
        and a node CA deleted meanwhile would leave the gang short. A reused node's tags
        name the request that launched it, long ended: ``labelled`` says which standing
        request's booking label its Node carries (False: none; None: not known yet), so
        it is protected by its booking too (issue 50, item 6)."""
        self._standing = standing
        if labelled is not None:
            self._labelled = labelled

    def _protection(self, inst: CloudInstance) -> DomainError | None:
        """Why CA may not delete this member now, or None."""
        pid, request = inst.provider_id, inst.tags.request
        with self._booked_lock:
            booker = self._booker.get(pid)
        if booker is not None:
            return FailedPrecondition(f"node {pid} is booked by {booker} and cannot be removed")
        planned = self.ledger.booker(pid)
        if planned is not None:
            return FailedPrecondition(f"node {pid} is idle and being booked by attempt "
                                      f"{planned}; it cannot be removed")
        if request is not None and inst.tags.committed:
            stands = self._standing(request, inst.tags.request_uid)
            if stands is None:
                return Unavailable(
                    f"node {pid} is in the gang of ProvisioningRequest {request}, and this "
                    f"replica has not listed ProvisioningRequests since it started; retry "
                    f"shortly")
            if stands:
                return FailedPrecondition(
                    f"node {pid} is in the gang of ProvisioningRequest {request}, which "
                    f"stands (not provisioned yet, or booked); it cannot be removed")
        # A reused node's tags name the request that launched it: its booking is on its
        # Node (issue 50, item 6).
        held = self._labelled(pid)
        if held is None:
            return Unavailable(
                f"node {pid}: this replica has not listed Nodes and ProvisioningRequests "
                f"since it started, and cannot tell whether a booking holds it; retry shortly")
        if isinstance(held, str):
            return FailedPrecondition(f"node {pid} carries the booking of "
                                      f"ProvisioningRequest {held}, which stands; it cannot "
                                      f"be removed")
        return None

    def bookings(self) -> dict[str, str]:
        """provider id -> the request that books it."""
        with self._booked_lock:
            return dict(self._booker)

    def keeps_warm(self, inst: CloudInstance, ready: bool) -> bool:
        """Whether this node is to stay up while idle (config reservedNodes: keep): it is
        in a reservation that lasts (a block until its cut-off), so it bills with the
        reservation whether it runs work or not, and the next matching gang starts on it
        at once. Only a node that runs and whose Node is ``ready``, and that nobody is
        deleting (issue 50, item 4): one the cloud stopped or whose kubelet is gone serves
        no gang, and kept it would keep its scale-down protection while CA waits on it as
        an unready node."""
        node = self.fleet.node(inst.provider_id)
        return ready and inst.state is InstanceState.RUNNING and not inst.marked_deleting \
            and node is not None and node.state is not NodeState.DELETING \
            and self._warm_policy(inst)

    def stopped_warm(self, inst: CloudInstance) -> bool:
        """A node the keep policy would hold warm that the cloud stopped and no request
        books: it runs nothing and bills (its disks) until deleted, so allset deletes it
        rather than wait for CA's unready scale-down (issue 50, item 4; a GCE VM stopped
        also gives its reservation slot back: docs/cloud-behaviour.md)."""
        node = self.fleet.node(inst.provider_id)
        if inst.state is not InstanceState.STOPPED or not inst.tags.committed or \
                inst.marked_deleting or node is None or node.state is NodeState.DELETING \
                or self.booked(inst.provider_id) or \
                self.ledger.booker(inst.provider_id) is not None:
            return False
        request = inst.tags.request
        if request is not None and \
                self._standing(request, inst.tags.request_uid) is not False:
            return False  # its request's gang, which deletes its stopped nodes itself
        return self._warm_policy(inst)

    def _warm_policy(self, inst: CloudInstance) -> bool:
        """The keep policy, whatever the node's state: a reserved node of a group that
        keeps them, in a reservation listed and not ended."""
        group = self.groups.get(inst.tags.node_group)
        rid = inst.tags.reservation
        if group is None or not group.keep_reserved_nodes or rid is None or \
                inst.tags.source is not CapacityType.RESERVED:
            return False
        ends = self._reservation_ends()
        if rid not in ends:
            return False  # not listed: ended, or not seen yet
        end = ends[rid]
        return end is None or end > self.clock.now()

    def _reservation_ends(self) -> dict[str, float | None]:
        """Reservation id -> its end, per snapshot: asked for every Node of every labelling
        pass, which must not walk every reservation for each of thousands of Nodes."""
        snapshot = self.ledger.snapshot
        cached = self._ends_cache
        if cached is None or cached[0] is not snapshot:
            cached = self._ends_cache = (
                snapshot, {r.id: r.ends_at for r in snapshot.reservations})
        return cached[1]

    def booked(self, provider_id: str) -> bool:
        """Whether a request books this node (per Node event: no copy of every booking)."""
        with self._booked_lock:
            return provider_id in self._booker

    def request_refresh(self) -> None:
        """CA's Refresh: never blocks on the cloud; wakes the loop if the data is stale."""
        if self.clock.now() - self._last_refresh > self.config.refresh_interval_seconds:
            self._wake.set()

    def _refresh_loop(self) -> None:
        interval = self.config.refresh_interval_seconds
        while not self._stopping.is_set():
            # Not ready yet: try again soon rather than a whole interval later.
            settling = self.leadership.is_leader() and not self.acting()
            self._wake.wait(min(interval, self.not_ready_retry_seconds) if settling
                            or not self.ready.is_set() else interval)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self.refresh_now()
            except Exception:  # the loop must survive anything
                log.exception("refresh failed")

    # --- operations the servicer calls ----------------------------------------------------

    def delete_nodes(self, group_id: str, provider_ids: Sequence[str]) -> None:
        """Lower the target now; terminate in the background (retried until done).

        The debt is written on the instances (the cloud's deletion mark) before CA hears
        "done", so a failover cannot lose it: every leader's reconcile terminates marked
        instances. When the mark cannot be written the call is refused with UNAVAILABLE
        and nothing changes (CA asks again). Refused too, with nothing changed, once a
        shutdown began: the workers that terminate are draining, and CA asks again (the
        next leader, or this process restarted)."""
        if self.scaleups.refusing or self.scaleups.draining:
            raise Unavailable("allset is shutting down; node deletions are not accepted")
        terminator = self.executor.terminator
        # Until it is applied or cancelled, the checked deletion holds its nodes against
        # the group's minSize: a deletion checked meanwhile counts them gone.
        deletion = self.fleet.deletion(group_id, provider_ids, protected=self._protection)
        marked = [i.id for i in deletion.instances]
        try:
            terminator.owe(marked, self.executor.retrying(MARK_SECONDS))
        except (CloudError, Unavailable) as err:
            self.fleet.cancel_deletion(deletion)
            raise Unavailable(
                f"could not mark {counted(len(marked), 'node')} of group {group_id} for "
                f"deletion in the cloud ({err}); nothing was deleted, retry shortly") from err
        except BaseException:
            self.fleet.cancel_deletion(deletion)
            raise
        doomed = self.fleet.apply_deletion(deletion)
        ids = [i.id for i in doomed]
        self._count_saving(group_id, doomed)
        # A placeholder that filled since the check: owed as well. Its scale-up never
        # commits it (Fleet.select_commit), so should this process not finish it, any
        # leader's reconcile rolls back the uncommitted instance: no mark is needed.
        checked = set(marked)
        late = [i for i in ids if i not in checked]
        terminator.owe(late, self.executor.retrying(MARK_SECONDS), must_mark=False)
        if ids:
            self.workers.submit(self._terminate_deleted, ids)

    def _terminate_deleted(self, ids: Sequence[str]) -> None:
        """DeleteNodes' terminations, on a worker (nobody reads its result). A replica
        deposed before it pays them leaves them owed: in its backlog, and as the deletion
        mark on the instances, which whoever leads next pays (adversary seed 763347279:
        the NotLeader this raised ended the worker's task instead)."""
        try:
            self.executor.terminator.terminate(ids, self.executor.retrying())
        except NotLeader as err:
            log.info("%d instances CA deleted are left owed to the next leader: %s",
                     len(ids), err)
        except Exception:
            log.exception("terminating %d instances CA deleted failed; they stay owed",
                          len(ids))

    def next_node_price(self, group: NodeGroup) -> float:
        """Per-hour price of the source the next node of this group would come from."""
        offerings = self.ledger.view().offerings(group).offerings
        usable = [o for o in offerings if o.available is None or o.available > 0]
        return usable[0].price if usable else group.price(CapacityType.ON_DEMAND)

    def instance_price(self, provider_id: str) -> float | None:
        inst = self.fleet.instance(provider_id)
        if inst is None:
            return None
        group = self.groups[inst.tags.node_group]
        if inst.tags.source is CapacityType.RESERVED:
            for r in self.ledger.snapshot.reservations:
                if r.id == inst.tags.reservation:
                    return r.price
            return 0.0
        return group.price(inst.tags.source)

    def pod_price_per_hour(self, requests: Resources) -> float | None:
        """Cheapest share of a node that could hold the pod: the next node's price times
        the largest fraction of any resource the pod takes."""
        best: float | None = None
        for group in self.groups.values():
            if not requests.fits_in(group.allocatable):
                continue
            share = max(
                (amount / group.allocatable.get(name) for name, amount in requests.items()
                 if group.allocatable.get(name) > 0),
                default=0.0,
            )
            price = self.next_node_price(group) * share
            best = price if best is None else min(best, price)
        return best


def _within(call: Callable[[], object], seconds: float) -> bool:
    """Run ``call`` (a join with no timeout of its own) for at most ``seconds``: True if
    it returned. Otherwise it goes on in a daemon thread, which the process's exit ends."""
    thread = threading.Thread(target=call, name="stop-wait", daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def _quota_families(adapter: CloudAdapter, groups: Sequence[NodeGroup]
                    ) -> dict[str, tuple[str, ...]]:
    """Each group's instance type -> the quota buckets the cloud counts it in, for a limit
    scoped to one (Scope.FAMILY), from an adapter that names them (``quota_buckets``, an
    optional capability: EC2's vCPU limits are per family bucket, GCE's quotas per
    metric)."""
    buckets = getattr(adapter, "quota_buckets", None)
    if buckets is None:
        return {}
    return {g.instance_type: tuple(buckets(g.instance_type)) for g in groups}
