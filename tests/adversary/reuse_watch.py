"""What I14-I16 read of the world after each step (issue 50), and what the moves on reuse
and warm nodes reached.

- I14: the nodes of each gang that just turned Provisioned, as its Nodes stand (taints
  someone put on after its Provisioned write was prepared left out: its pass could not
  see them), with the request's capacity types and pod sets.
- I15: each node a process booked for a request since the last look whose Node carried
  another booking in that process's cache, and that booking's consumers alive now which
  the process could know of: pods born before its Pod cache's last listing (its cache is
  listed at the start of each pass here, no watch), its requests as it last listed them,
  and Kueue Workloads (read through a cache of WORKLOAD_TTL: a state older than that).
- I16: every Node kept warm, whether its instance runs and it is Ready, and whether it
  became kept since the last look after the processes' last view of their Nodes; at
  quiescence, stopped nodes the keep policy holds that are not deleted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from provider.config.schema import FakeReservation
from provider.controller import conditions as c
from provider.controller.consumers import Consumers, gang_owner
from provider.controller.idle import WORKLOAD_ANNOTATION, WORKLOAD_TTL
from provider.domain.cloud import CloudInstance, InstanceState
from provider.domain.gangs.sources import SOURCES
from provider.planner import reuse as planner_reuse
from tests.adversary.state import BookingSeen, GangNodeSeen, KeptSeen, PodSetSeen, RequestSeen
from tests.adversary.workloads import FOREIGN_KEYS, STRANGERS, kept, live
from tests.adversary.world import NAMESPACE, Incarnation, World, pod_id

Json = dict[str, Any]
# Reservations whose nodes the keep policy holds warm: r-a's for ever (it has no end),
# r-c's until its end (issue 52 gave it one; after it they are ordinary nodes billed
# on-demand, a stopped one left to CA's unready scale-down as any other).
KEPT_IN = frozenset({"r-a", "r-c"})
# Refusals and protections the product made, seen through its own functions (per seed).
SEEN: dict[str, set[str]] = {"tainted": set(), "annotation": set(), "gang": set()}


def _install() -> None:
    """See which idle nodes the planner refused for someone's taint, and which bookings
    a consumer by annotation or gang membership protected (counted, never changed)."""
    if getattr(planner_reuse.refusal, "adversary", False):
        return
    refusal, of = planner_reuse.refusal, Consumers.of

    def counted_refusal(node: Any, pod_set: Any) -> str | None:
        why = refusal(node, pod_set)
        if why is not None and any(t.key in FOREIGN_KEYS for t in node.taints) and \
                why.startswith("taint"):
            SEEN["tainted"].add(node.provider_id)
        return why

    def counted_of(self: Consumers, booking: str, request: Any) -> str | None:
        why = of(self, booking, request)
        if why is not None and "consume its request" in why:
            SEEN["annotation"].add(booking)
        elif why is not None and "of its gang" in why:
            SEEN["gang"].add(booking)
        return why

    counted_refusal.adversary = True  # type: ignore[attr-defined]
    planner_reuse.refusal = counted_refusal
    Consumers.of = counted_of  # type: ignore[method-assign]


class ReuseWatch:
    def __init__(self, world: World) -> None:
        _install()
        for seen in SEEN.values():
            seen.clear()
        self.w = world
        self.pod_born: dict[str, int] = {}  # pod_id -> resourceVersion first seen at
        self.pods_rv: dict[str, int] = {}  # incarnation -> rv its Pod cache last listed at
        self.nodes_at: dict[str, float] = {}  # incarnation -> when it last listed Nodes
        self.booked: dict[str, dict[str, str]] = {}  # incarnation -> node -> request
        self.kept_before: set[str] = set()
        self.reuses: Counter[str] = Counter()  # by capacity type
        self.coverage: Counter[str] = Counter()
        self._rv = -1
        self._pods: list[Json] = []
        self._nodes: list[Json] = []

    # --- reading the world ---------------------------------------------------------------

    def _hook(self, inc: Incarnation) -> None:
        """Note when each process's Pod and Node caches list (they do at each pass)."""
        ctl = inc.controller
        if getattr(ctl, "_watched_by_adversary", False):
            return
        ctl._watched_by_adversary = True  # type: ignore[attr-defined]
        kube, tag, now = self.w.kube, inc.tag, self.w.now
        pods, nodes = ctl.pods.relist, ctl.nodes.relist

        def pods_relist() -> str:
            self.pods_rv[tag] = kube.resource_version
            return pods()

        def nodes_relist() -> str:
            self.nodes_at[tag] = now()
            return nodes()

        ctl.pods.relist = pods_relist  # type: ignore[method-assign]
        ctl.nodes.relist = nodes_relist  # type: ignore[method-assign]

    def _read(self) -> None:
        rv = self.w.kube.resource_version
        if rv == self._rv:
            return
        self._rv = rv
        self._pods = self.w.kube.list("pods")
        self._nodes = self.w.kube.list("nodes")
        for pod in self._pods:
            self.pod_born.setdefault(pod_id(pod), rv)

    def look(self, requests: list[RequestSeen], fresh: set[str], final: bool
             ) -> tuple[tuple[GangNodeSeen, ...], tuple[BookingSeen, ...],
                        tuple[KeptSeen, ...], tuple[str, ...]]:
        for inc in self.w.alive():
            self._hook(inc)
        self._read()
        instances = {i.name: i for i in self.w.fake.all_instances()}
        gang = tuple(n for r in requests if r.uid in fresh
                     for n in self._gang_nodes(r, instances))
        self.reuses.update(n.source for n in gang if n.reused)
        return (gang, self._bookings(), self._kept(instances),
                self._stopped_warm(instances) if final else ())

    # --- I14 --------------------------------------------------------------------------------

    def _gang_nodes(self, r: RequestSeen, instances: dict[str, CloudInstance]
                    ) -> list[GangNodeSeen]:
        obj = self.w.kube.get("provisioningrequests", r.key.split("/", 1)[1], NAMESPACE)
        if obj is None:
            return []
        spec = obj.get("spec") or {}
        allowed = tuple(t.strip() for t in str((spec.get("parameters") or {}).get(
            "capacityTypes", "reserved,on-demand")).split(","))
        pod_sets = tuple(self._pod_set(ps) for ps in spec.get("podSets") or [])
        prepared = self.w.ledger.prepared.get(r.key, float("inf"))
        out = []
        for node in self._nodes:
            meta = node["metadata"]
            inst = instances.get(meta["name"])
            if (meta.get("labels") or {}).get(c.BOOKING_LABEL) != r.booking or inst is None:
                continue
            late = self.w.truth.tainted.get(meta["name"], float("-inf")) >= prepared
            taints = tuple((t["key"], t.get("value", ""), t["effect"])
                           for t in node["spec"].get("taints") or []
                           if not (late and t["key"] in FOREIGN_KEYS))
            gpus = ((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu")
            out.append(GangNodeSeen(r.key, inst.id, inst.tags.source.value, allowed,
                                    inst.provider_id in r.reused, pod_sets,
                                    tuple(sorted((meta.get("labels") or {}).items())), taints,
                                    int(gpus) if gpus is not None else None))
        return out

    def _pod_set(self, pod_set: Json) -> PodSetSeen:
        name = (pod_set.get("podTemplateRef") or {}).get("name", "")
        found = self.w.kube.get("podtemplates", name, NAMESPACE) or {}
        spec = (found.get("template") or {}).get("spec") or {}
        gpus = sum(int(((ct.get("resources") or {}).get("requests") or {}).get(
            "nvidia.com/gpu", 0)) for ct in spec.get("containers") or [])
        return PodSetSeen(tuple(sorted((spec.get("nodeSelector") or {}).items())),
                          tuple((t.get("key", ""), t.get("operator", "Equal"),
                                 t.get("value", ""), t.get("effect", ""))
                                for t in spec.get("tolerations") or []), gpus)

    # --- I15 --------------------------------------------------------------------------------

    def _bookings(self) -> tuple[BookingSeen, ...]:
        out = []
        for inc in self.w.alive():
            if not inc.started:
                continue
            now = _booked_by(inc)
            before = self.booked.get(inc.tag, {})
            self.booked[inc.tag] = now
            if not inc.acting():
                continue
            for pid, key in sorted(now.items()):
                if before.get(pid) == key:
                    continue
                node = inc.controller.nodes.get(pid) or {}
                meta = node.get("metadata") or {}
                previous = (meta.get("labels") or {}).get(c.BOOKING_LABEL)
                if not previous or previous == c.booking_value(*key.split("/", 1)):
                    continue
                consumers = self._consumers(inc, str(previous), meta.get("annotations") or {})
                if any(p.get("metadata", {}).get("namespace") == STRANGERS and live(p)
                       for p in self._selecting(str(previous))):
                    self.coverage["reuses past another namespace's pod that selects the "
                                  "booking"] += 1
                out.append(BookingSeen(str(meta.get("name") or pid), key, str(previous),
                                       consumers))
        return tuple(out)

    def _selecting(self, booking: str) -> Iterable[Json]:
        return (p for p in self._pods
                if ((p.get("spec") or {}).get("nodeSelector") or {}).get(c.BOOKING_LABEL)
                == booking)

    def _consumers(self, inc: Incarnation, booking: str, notes: dict[str, Any]
                   ) -> tuple[str, ...]:
        """Consumers of ``booking`` alive now that ``inc`` could know of."""
        known = self.pods_rv.get(inc.tag, -1)
        cached = _cached(inc)
        owner = next((gang_owner(obj) for obj in cached
                      if c.booking_value(NAMESPACE, obj["metadata"]["name"]) == booking), None)
        out = []
        for pod in self._pods:
            meta = pod.get("metadata") or {}
            if not live(pod) or meta.get("namespace") != NAMESPACE or \
                    self.pod_born.get(pod_id(pod), known + 1) > known:
                continue
            how = _consumes(pod, booking, owner)
            if how:
                out.append(f"pod {meta.get('name')} ({how})")
        for obj in cached:
            meta = obj["metadata"]
            if c.booking_value(NAMESPACE, meta["name"]) == booking and _stands(obj):
                out.append(f"its request {meta['name']}, which stands in the process's cache")
        out += self._workload(str(notes.get(WORKLOAD_ANNOTATION) or ""))
        return tuple(out)

    def _workload(self, ref: str) -> list[str]:
        """The node's Kueue Workload, if it has run (or been unreadable) longer than a
        read of it is cached."""
        if not ref:
            return []
        name = ref.rsplit("/", 1)[-1]
        now, truth = self.w.now(), self.w.truth
        settled = WORKLOAD_TTL + 1.0
        if truth.forbidden_since is not None and now - truth.forbidden_since > settled:
            return [f"Workload {name}, unreadable (403) for {now - truth.forbidden_since:.0f}s"]
        runs, since = truth.workloads.get(name, (False, 0.0))
        if runs and now - since > settled:
            return [f"Workload {name}, admitted and unfinished for {now - since:.0f}s"]
        return []

    # --- I16 --------------------------------------------------------------------------------

    def _kept(self, instances: dict[str, CloudInstance]) -> tuple[KeptSeen, ...]:
        views = [self.nodes_at[i.tag] for i in self.w.alive() if i.tag in self.nodes_at]
        view = min(views) if views else float("inf")
        out = []
        now_kept = set()
        for node in self._nodes:
            if not kept(node):
                continue
            name = node["metadata"]["name"]
            now_kept.add(name)
            inst = instances.get(name)
            ready = any(x.get("type") == "Ready" and x.get("status") == "True"
                        for x in (node.get("status") or {}).get("conditions") or [])
            running = inst is not None and inst.state is InstanceState.RUNNING
            changed = self.w.lost.get(name, float("-inf")) >= view
            out.append(KeptSeen(name, running, ready,
                                fresh=name not in self.kept_before and not changed))
        self.kept_before = now_kept
        return tuple(out)

    def _stopped_warm(self, instances: dict[str, CloudInstance]) -> tuple[str, ...]:
        """Stopped nodes the keep policy holds (a reservation that lasts) whose Node is
        there (so a label pass sees them): at quiescence each is deleted."""
        names = {n["metadata"]["name"] for n in self._nodes}
        lasting = self._lasting()
        return tuple(sorted(i.id for i in instances.values()
                            if i.state is InstanceState.STOPPED and i.tags.committed
                            and i.tags.reservation in lasting and i.name in names))

    def _lasting(self) -> frozenset[str]:
        """Of KEPT_IN, those not ended by the cloud's clock nor by any living process's
        (a replica's wall clock may be stepped ahead: it judges a reservation's end by
        its own, Provider._warm_policy)."""
        alive = self.w.alive()
        if not alive:
            return frozenset()
        fake = alive[0].config.schema.cloud.fake
        latest = max([self.w.now(), *(i.replica.clock.now() for i in alive)])
        return lasting_at(fake.reservations if fake is not None else (), latest)

    # --- coverage ---------------------------------------------------------------------------

    def reached(self) -> Counter[str]:
        out = Counter(self.coverage)
        for source, n in self.reuses.items():
            out[f"reuses of {source} idle nodes"] += n
        out["tainted idle nodes refused"] = len(SEEN["tainted"])
        out["bookings held by a consumer by annotation"] = len(SEEN["annotation"])
        out["bookings held by a pod of the owning gang"] = len(SEEN["gang"])
        ended = {i.id for i in self.w.fake.all_instances()
                 if i.state is InstanceState.TERMINATED}
        out["stopped warm nodes released"] = len(self.w.truth.stopped_kept & ended)
        return +out


def _booked_by(inc: Incarnation) -> dict[str, str]:
    """Node -> request, as the process books them: its requests' bookings, and the idle
    nodes its attempts' plans booked in the ledger (by the request running that attempt)."""
    out = dict(inc.provider.bookings())
    running = {t.attempt: key for key, t in inc.controller.handler._tracked.items()
               if t.attempt is not None}
    for pid, (attempt, _) in inc.provider.ledger._booked.items():
        if attempt in running:
            out.setdefault(pid, running[attempt])
    return out


def _cached(inc: Incarnation) -> list[Json]:
    with inc.controller._lock:
        return list(inc.controller._cache.values())


def _stands(obj: Json) -> bool:
    conds = c.read((obj.get("status") or {}).get("conditions"))
    return not any(conds.get(t) is not None and conds[t].true
                   for t in (c.BOOKING_EXPIRED, c.CAPACITY_REVOKED, c.FAILED))


def _consumes(pod: Json, booking: str, owner: tuple[str, str, str] | None) -> str | None:
    """How a pod of the booking's namespace consumes it, or None."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if (spec.get("nodeSelector") or {}).get(c.BOOKING_LABEL) == booking:
        return "selects its label"
    notes = meta.get("annotations") or {}
    if any(notes.get(k) and c.booking_value(NAMESPACE, str(notes[k])) == booking
           for k in c.CONSUME_ANNOTATIONS):
        return "consumes its request"
    if owner is not None:
        for source in SOURCES.values():
            if source.name.value == owner[1] and source.gang_of(pod) == owner[2]:
                return f"of its gang {owner[1]}/{owner[2]}"
    return None


def lasting_at(reservations: Iterable[FakeReservation], now: float) -> frozenset[str]:
    """Which reservations of KEPT_IN still last at ``now``: a stopped node of one is the
    keep policy's to delete (I16)."""
    return frozenset(r.id for r in reservations if r.id in KEPT_IN
                     and (r.ends_at is None or r.ends_at.timestamp() > now))
