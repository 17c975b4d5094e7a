"""Prometheus metrics (`--metrics-address`). Each Provider has its own registry."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from provider.attempts.executor import SHORTFALL_REASONS, Outcome, Result
from provider.attempts.figures import ReservedGpus, TeamKey, TeamSpend
from provider.base.build import commit, version
from provider.domain.cloud import CloudInstance, CloudSnapshot
from provider.domain.plan import Part

_DECISION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    """Implements provider.attempts.executor.Observer; reconcile and refresh report here too."""

    def __init__(self, registry: CollectorRegistry | None = None,
                 zones: Mapping[str, str] | None = None) -> None:
        """``zones``: each group's zone, for the labels an operator filters launches by."""
        self.registry = registry or CollectorRegistry()
        self._zones = dict(zones or {})
        r = self.registry
        self.attempts = Counter("allset_attempts", "Attempts by outcome, and why those "
                                "that fell short did.", ["outcome", "reason"], registry=r)
        self.rollbacks = Counter("allset_rollbacks", "Rollbacks of attempts that terminated "
                                 "what they had launched, by the group and zone of what "
                                 "they terminated.", ["group", "zone"], registry=r)
        self.rolled_back_instances = Counter(
            "allset_rolled_back_instances", "Instances terminated by rollbacks, by group "
            "and zone.", ["group", "zone"], registry=r)
        self.decision = Histogram("allset_decision_seconds", "From an attempt's start to its "
                                  "all-or-nothing outcome.", buckets=_DECISION_BUCKETS,
                                  registry=r)
        self.launched = Counter("allset_nodes_launched", "Nodes launched, by capacity "
                                "source, group and zone.", ["source", "group", "zone"],
                                registry=r)
        self.orphans = Gauge("allset_orphan_instances", "Instances of attempts that will "
                             "never commit, seen by the last reconcile (should be 0).",
                             registry=r)
        self.unknown_group = Gauge("allset_unknown_group_instances", "Committed instances of "
                                   "node groups no longer in the config, seen by the last "
                                   "reconcile (should be 0).", registry=r)
        self.ready = Gauge("allset_ready", "1 once the first complete cloud listing is in; "
                           "until then every CA call is refused.", registry=r)
        self.leader = Gauge("allset_leader", "1 while this replica holds the lease and may "
                            "act on the cluster's instances.", registry=r)
        self.leader.set(1)  # until an elector says otherwise (one process, no election)
        self.leader_failovers = Counter("allset_leader_failovers", "Times this replica took "
                                        "the lease over from another holder.", registry=r)
        self.without_leader = Gauge("allset_seconds_without_leader", "How long, as this "
                                    "replica sees it, no replica has held a live lease.",
                                    registry=r)
        self.route_here = Gauge("allset_leader_route_here", "1 while CA's route (the leader "
                                "EndpointSlice, as this replica last saw it) names this "
                                "replica; 0 otherwise, and without one.", registry=r)
        self.owed = Gauge("allset_terminations_owed", "Terminations still to be retried.",
                          registry=r)
        self.refresh_failures = Counter("allset_refresh_failures", "Cloud listings that "
                                        "failed; the previous state was kept.", registry=r)
        self.reserved_free = Gauge("allset_reservation_free_slots", "Free slots per "
                                   "reservation at the last refresh.",
                                   ["reservation", "zone", "instance_type"], registry=r)
        self.reused = Counter("allset_nodes_reused", "Idle nodes ProvisioningRequests "
                              "booked instead of launching like ones, by group, zone and "
                              "capacity source.", ["group", "zone", "source"], registry=r)
        self.build_info = Gauge("allset_build_info", "1, labelled with the version of allset "
                                "that runs and the commit it was built from.",
                                ["version", "commit"], registry=r)
        self.build_info.labels(version=version(), commit=commit()).set(1)
        self.gang_api = Gauge("allset_gang_api_served", "1 while the cluster serves this "
                              "gang API (in any version the gang bridge reads), 0 while it "
                              "does not: its gangs get no request.", ["api"], registry=r)
        self.gangs_held = Gauge("allset_gangs_held_by_queue", "Gangs the gang bridge does "
                                "not ask for because their scheduler's queue would not "
                                "admit them now (reason QueueWouldNotAdmit on each).",
                                registry=r)
        self.scale_in_saved = Counter(
            "allset_scale_in_saved_usd", "Estimated USD saved by on-demand and spot nodes "
            "CA deleted after their group's unneeded time rather than CA's default.",
            ["group"], registry=r)
        # Every series an attempt can count exists from the start, so the first of each
        # shows in rate() and increase().
        for outcome, reason in ATTEMPT_LABELS:
            self.attempts.labels(outcome=outcome, reason=reason)

    # --- executor.Observer -------------------------------------------------------------

    def launched_part(self, part: Part, instances: int) -> None:
        self.launched.labels(source=str(part.capacity_type), group=part.group,
                             zone=self._zones.get(part.group, "")).inc(instances)

    def rolled_back(self, attempt: str, instances: Sequence[CloudInstance]) -> None:
        # A rollback across groups counts once in each: the label says where it struck.
        where: dict[tuple[str, str], int] = {}
        for i in instances:
            where[i.tags.node_group, i.zone] = where.get((i.tags.node_group, i.zone), 0) + 1
        for (group, zone), n in where.items():
            self.rollbacks.labels(group=group, zone=zone).inc()
            self.rolled_back_instances.labels(group=group, zone=zone).inc(n)

    def finished(self, outcome: Outcome) -> None:
        self.attempts.labels(outcome=str(outcome.result), reason=outcome.shortfall).inc()
        self.decision.observe(outcome.seconds)
        if outcome.result is Result.SUCCEEDED:
            for part in outcome.reused_parts:
                self.reused.labels(group=part.group, zone=self._zones.get(part.group, ""),
                                   source=str(part.capacity_type)).inc(len(part.reused))

    # --- the fleet, as a scrape finds it -------------------------------------------------

    def collect_fleet(self, figures: Callable[[], FleetFigures]) -> None:
        """Reserved GPUs and spend per hour, computed at each scrape from ``figures``."""
        self.registry.register(_FleetCollector(figures))

    # --- reconcile ---------------------------------------------------------------------

    def observe_snapshot(self, snapshot: CloudSnapshot, orphans: int, owed: int) -> None:
        self.orphans.set(orphans)
        self.owed.set(owed)
        self.reserved_free.clear()
        for r in snapshot.reservations:
            self.reserved_free.labels(r.id, r.zone, r.instance_type).set(r.free)


# (outcome, reason) of every attempt: a reason only for those that fell short.
ATTEMPT_LABELS = tuple(
    (str(result), reason)
    for result in Result
    for reason in (("",) if result in (Result.SUCCEEDED, Result.CANCELLED)
                   else SHORTFALL_REASONS))

FleetFigures = tuple[list[ReservedGpus], dict[tuple[str, str], float],
                     dict[TeamKey, TeamSpend]]
# The labels of the per-team figures; a namespace is "" for nodes charged to nobody.
TEAM_LABELS = ("namespace", "queue", "source", "use")


class _FleetCollector(Collector):
    def __init__(self, figures: Callable[[], FleetFigures]) -> None:
        self._figures = figures

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # described by what collect() yields (no figures needed to register)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        reserved, spend, teams = self._figures()
        gpus = GaugeMetricFamily(
            "allset_reserved_gpus", "GPUs of listed reservations: paid (every slot), up "
            "(on allset's running reserved nodes), busy (on those not idle).",
            labels=["state", "zone"])
        for r in reserved:
            for state, value in (("paid", r.paid), ("up", r.up), ("busy", r.busy)):
                gpus.add_metric([state, r.zone], value)
        yield gpus
        usd = GaugeMetricFamily(
            "allset_spend_usd_per_hour", "USD per hour of allset's running nodes bought "
            "outside reservations, by source and group.", labels=["source", "group"])
        for (source, group), rate in sorted(spend.items()):
            usd.add_metric([source, group], rate)
        yield usd
        yield from _team_families(teams)


def _team_families(teams: Mapping[TeamKey, TeamSpend]) -> Iterator[GaugeMetricFamily]:
    """Per team: one series per (namespace, queue, source, use) that has nodes now, so the
    label set is bounded by the namespaces and queues with requests and the owners the
    config names."""
    usd = GaugeMetricFamily(
        "allset_team_spend_usd_per_hour", "USD per hour of allset's nodes by the namespace "
        "(team) they are charged to, Kueue LocalQueue (namespace/name, \"\" for none), "
        "capacity source and use: booked (by a ProvisioningRequest of the namespace), "
        "idle (a reserved one charged to its reservation's owner, "
        "costs.reservationOwners; else to namespace \"\"), booting, running (booked by no "
        "request). A reserved node at its group's price.reserved.",
        labels=list(TEAM_LABELS))
    nodes = GaugeMetricFamily(
        "allset_team_nodes", "allset's nodes by the namespace (team) they are charged to, "
        "queue, capacity source and use (as allset_team_spend_usd_per_hour).",
        labels=list(TEAM_LABELS))
    for (team, queue, source, use), figure in sorted(teams.items()):
        labels = [team, queue, str(source), str(use)]
        usd.add_metric(labels, figure.usd_per_hour)
        nodes.add_metric(labels, figure.nodes)
    yield usd
    yield nodes
