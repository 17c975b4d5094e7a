"""The cloud as the adversary sees it: the simulated cloud (adapters/fake, with its own
injected faults) behind two thin layers.

* :class:`LaggingCloud` adds eventual consistency to listings, which the fake's listing
  does not model: a launched instance, a commit tag, a deletion mark and a termination
  reach ``snapshot`` only some steps later, each instance on its own schedule, and
  reservation free counts are computed from what the listing shows. AWS documents this for the EC2
  API ("Eventual consistency in the Amazon EC2 API", EC2 API Reference: results of
  RunInstances, CreateTags and TerminateInstances may not be visible to Describe* calls
  at once) and the adapter contract says so (provider/domain/cloud.py, "Eventual consistency").
  It also records every launch that created instances, by token, for invariant I4.
* :class:`GatedCloud` is one provider incarnation's handle on it: a yield point before
  and after every call, and after a crash every call raises :class:`Crashed`, so a dead
  process never reaches the cloud."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapters.fake import FakeCloud
from provider.domain.cloud import (
    Busy,
    CloudInstance,
    CloudSnapshot,
    InstanceState,
    LaunchRequest,
    OutcomeUnknown,
    Shape,
    TransientError,
)
from tests.adversary.sched import Crashed, current, yield_point


@dataclass(slots=True)
class LaunchRecord:
    token: str
    count: int
    instance_ids: tuple[str, ...]
    group: str
    attempt: str
    part: str
    request: str | None
    request_uid: str | None = None  # when the tags carry it
    reservation: str | None = None
    # When its call was sent, by the launching process's own wall clock (a replica's clock
    # may have been stepped).
    at: float = 0.0


Mark = tuple[int, float]  # (step, simulated time) of a change


@dataclass(slots=True)
class _Seen:
    launched: Mark
    committed: Mark | None = None
    terminated: Mark | None = None
    marked: Mark | None = None  # the deletion mark (CreateTags too: it lags the same way)


@dataclass(slots=True)
class LaggingCloud:
    fake: FakeCloud
    step: Callable[[], int]
    lag: int = 0  # steps a change takes to reach listings (0: consistent)
    # ...but never longer than this in simulated time: the bound allset is configured to
    # assume (reconcile.listingSettle). Real lag is seconds; with no bound at all, no
    # process could ever know what a dead predecessor launched last.
    bound_seconds: float = float("inf")
    clock: Callable[[], float] = lambda: 0.0
    # A task's name -> its process's wall-clock offset (a replica's clock may be stepped):
    # what the process's own clock read when it launched.
    skew: Callable[[str], float] = lambda task: 0.0
    launches: dict[str, LaunchRecord] = field(default_factory=dict)
    launched_by: dict[str, str] = field(default_factory=dict)  # attempt -> its task
    refused: list[str] = field(default_factory=list)  # reservation refusals not injected
    outside_window: int = 0  # launches into a capacity block its window refused
    terminate_called: set[str] = field(default_factory=set)
    # Committed instances allset terminated, and the task that did it.
    killed_committed: list[tuple[CloudInstance, str]] = field(default_factory=list)
    # Instance id -> the process ("i3") that first wrote its deletion mark, and the one
    # whose terminate call ended it: a debt paid by a later process than owed it.
    marked_by: dict[str, str] = field(default_factory=dict)
    ended_by: dict[str, str] = field(default_factory=dict)
    # Instances the cloud ended on its own (their capacity's end ended them, a reclaim),
    # and when it was first seen.
    cloud_ended: dict[str, float] = field(default_factory=dict)
    refused_for_room: int = 0  # launches refused for want of room (Busy)
    reclaimed: set[str] = field(default_factory=set)  # instances the world's moves took
    _seen: dict[str, _Seen] = field(default_factory=dict)

    # --- the real calls, recorded -----------------------------------------------------

    def snapshot(self, cluster: str) -> CloudSnapshot:
        self.sweep()
        truth = self.fake.snapshot(cluster)
        if self.lag <= 0:
            return truth
        now = self._mark()
        shown: list[CloudInstance] = []
        by_id = {i.id: i for i in truth.instances}
        for inst in self.fake.all_instances():
            if inst.tags.cluster != cluster:
                continue
            seen = self._seen.get(inst.id)
            if seen is None:
                shown.extend([by_id[inst.id]] if inst.id in by_id else [])
                continue
            lag = self.lag + self._jitter(inst.id)
            if self._hidden(seen.launched, now, lag):
                continue  # not listed yet
            if seen.terminated is not None and not self._hidden(seen.terminated, now, lag):
                continue
            view = by_id.get(inst.id) or dataclasses.replace(inst, state=InstanceState.RUNNING)
            if view.tags.committed and seen.committed is not None and \
                    self._hidden(seen.committed, now, lag):
                view = dataclasses.replace(view, tags=dataclasses.replace(view.tags,
                                                                          committed=False))
            if seen.marked is not None and view.marked_deleting and \
                    self._hidden(seen.marked, now, lag):
                view = dataclasses.replace(view, tags=dataclasses.replace(
                    view.tags, deleting_since=None))
            shown.append(view)
        reservations = [
            dataclasses.replace(r, free=max(0, r.total - sum(
                1 for i in shown if i.tags.reservation == r.id)))
            for r in truth.reservations
        ]
        return dataclasses.replace(truth, instances=shown, reservations=reservations)

    def launch(self, request: LaunchRequest) -> Sequence[CloudInstance]:
        task = current()
        if task is not None:  # a part's own task is a child of the attempt's
            self.launched_by.setdefault(request.tags.attempt, task.name.split(".part")[0])
        before = {i.id for i in self.fake.all_instances()}
        # When it was sent, by the launching process's own wall clock.
        sent = self.clock() + (self.skew(task.name) if task is not None else 0.0)
        try:
            result = self.fake.launch(request)
        except Exception as err:
            self._record(request, before, sent)
            if isinstance(err, Busy):
                self.refused_for_room += 1
            code = getattr(err, "cloud_code", "")
            if code == "ReservationCapacityExceeded" and "not active now" in str(err):
                # The window by the cloud's clock: a replica's wall clock may be stepped.
                self.outside_window += 1
            elif code == "ReservationCapacityExceeded" and "injected" not in str(err):
                self.refused.append(f"{request.token}: {err}")
            raise
        self._record(request, before, sent)
        return result

    def terminate(self, instance_ids: Sequence[str]) -> None:
        self.terminate_called.update(instance_ids)
        live = {i.id: i for i in self.fake.live_instances()}
        try:
            self.fake.terminate(instance_ids)
        finally:
            now_alive = {i.id for i in self.fake.live_instances()}
            task = current()
            for iid in live.keys() - now_alive:
                self.ended_by.setdefault(iid, _process(task.name if task else "?"))
                if iid in self._seen:
                    self._seen[iid].terminated = self._mark()
                if live[iid].tags.committed:
                    self.killed_committed.append((live[iid], task.name if task else "?"))

    def commit(self, instance_ids: Sequence[str], attempt: str) -> None:
        before = {i.id for i in self.fake.all_instances() if i.tags.committed}
        try:
            self.fake.commit(instance_ids, attempt)
        finally:
            for inst in self.fake.all_instances():
                if inst.tags.committed and inst.id not in before and inst.id in self._seen:
                    self._seen[inst.id].committed = self._mark()

    def mark_deleting(self, instance_ids: Sequence[str], at: float) -> None:
        before = {i.id for i in self.fake.all_instances() if i.marked_deleting}
        try:
            self.fake.mark_deleting(instance_ids, at)
        finally:
            task = current()
            for inst in self.fake.all_instances():
                if inst.marked_deleting and inst.id not in before:
                    self.marked_by.setdefault(inst.id, _process(task.name if task else "?"))
                    if inst.id in self._seen:
                        self._seen[inst.id].marked = self._mark()

    def describe_shapes(self, instance_types: Sequence[str]) -> dict[str, Shape]:
        return self.fake.describe_shapes(instance_types)

    def __getattr__(self, name: str) -> Any:
        # Calls of the adapter contract this layer does not model (a deleting tag, say):
        # the fake's own, unchanged.
        if name == "fake":
            raise AttributeError(name)
        return getattr(self.fake, name)

    # --- the world's own moves ----------------------------------------------------------

    def reclaim(self, instance_id: str) -> None:
        """The cloud takes an instance away (a spot reclaim, a person in the console)."""
        self.reclaimed.add(instance_id)
        self.fake.reclaim(instance_id)
        if instance_id in self._seen:
            self._seen[instance_id].terminated = self._mark()

    def stop(self, instance_id: str) -> None:
        """The cloud stops an instance (a GCE host event, a run's end): it stays."""
        self.fake.stop(instance_id)

    def sweep(self) -> None:
        """Instances the cloud ended on its own (the end of capacity whose end ends them):
        they leave listings after the lag, as a termination does, and count as lost."""
        now: Mark | None = None
        for inst in self.fake.all_instances():
            if inst.state is not InstanceState.TERMINATED or inst.id in self.cloud_ended \
                    or inst.id in self.terminate_called:
                continue
            now = now or self._mark()
            seen = self._seen.get(inst.id)
            if seen is not None and seen.terminated is None:
                seen.terminated = now
            self.cloud_ended[inst.id] = now[1]

    def _mark(self) -> Mark:
        return self.step(), self.clock()

    def _hidden(self, change: Mark, now: Mark, lag: int) -> bool:
        """Is a change still missing from listings: fewer than ``lag`` steps ago and
        within the time bound."""
        return now[0] - change[0] < lag and now[1] - change[1] < self.bound_seconds

    def _record(self, request: LaunchRequest, before: set[str], sent: float) -> None:
        # Its own: another call may have launched meanwhile (a launch takes time).
        created = [i for i in self.fake.all_instances() if i.id not in before
                   and (i.tags.attempt, i.tags.part) == (request.tags.attempt,
                                                         request.tags.part)]
        if not created:
            return
        now = self._mark()
        for inst in created:
            self._seen[inst.id] = _Seen(now)
        ids = tuple(i.id for i in created)
        old = self.launches.get(request.token)
        if old is not None:  # a token that launches twice: I4 reads this
            ids = old.instance_ids + ids
        self.launches[request.token] = LaunchRecord(
            request.token, request.count, ids, request.node_group, request.tags.attempt,
            request.tags.part, request.tags.request, getattr(request.tags, "request_uid", None),
            request.reservation, sent)

    @staticmethod
    def _jitter(instance_id: str) -> int:
        return hashlib.sha256(instance_id.encode()).digest()[0] % 2


# How long a cloud call may hang in a partition before its SDK gives up. With the wait at
# the yield before it (world.STARVE_SECONDS) and a launch's own latency, a call the fence
# let through is done within the fence's margin (the lease duration less the renew
# deadline: 20s at deploy/'s timing), so what a deposed leader launched last shows in
# the listing its successor waits for (reconcile.listingSettle after that).
CLOUD_TIMEOUT = 10.0


class CloudLink:
    """One replica's network path to the cloud: ``refuse`` fails each call at once,
    ``hang`` holds it until the partition heals (then it goes through) or its timeout
    passes (then it fails, not performed)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self.partition: str | None = None

    def cross(self, op: str) -> None:
        kind = self.partition
        if kind is None:
            return
        task = current()
        mutating = op in ("launch", "terminate", "commit") or op not in _READS
        if kind == "hang" and task is not None:
            deadline = self._now() + CLOUD_TIMEOUT
            task.wait_until(lambda: self.partition is None or self._now() >= deadline,
                            f"cloud.{op} held")
            if self.partition is None:
                return
        if mutating:
            raise OutcomeUnknown(f"{op}: no answer (partitioned from the cloud)")
        raise TransientError(f"{op}: connection failed (partitioned from the cloud)")


_READS = frozenset({"snapshot", "describe_shapes"})


def _process(task: str) -> str:
    """The incarnation a task belongs to: "i3.w.7" -> "i3"."""
    return task.split(".", 1)[0]


class GatedCloud:
    """One incarnation's adapter (implements provider.domain.cloud.CloudAdapter)."""

    name = "fake"

    def __init__(self, cloud: LaggingCloud, alive: Callable[[], bool],
                 link: CloudLink | None = None) -> None:
        self._cloud = cloud
        self._alive = alive
        self._link = link

    def _enter(self, op: str) -> None:
        if not self._alive():
            raise Crashed
        yield_point(f"cloud.{op}")
        if not self._alive():
            raise Crashed
        if self._link is not None:
            self._link.cross(op)
            if not self._alive():
                raise Crashed

    def _leave(self, op: str) -> None:
        # The call happened; a crash here loses its answer.
        yield_point(f"cloud.{op}.done")
        if not self._alive():
            raise Crashed

    def snapshot(self, cluster: str) -> CloudSnapshot:
        self._enter("snapshot")
        try:
            return self._cloud.snapshot(cluster)
        finally:
            self._leave("snapshot")

    def launch(self, request: LaunchRequest) -> Sequence[CloudInstance]:
        self._enter("launch")
        try:
            return self._cloud.launch(request)
        finally:
            self._leave("launch")

    def terminate(self, instance_ids: Sequence[str]) -> None:
        self._enter("terminate")
        try:
            self._cloud.terminate(instance_ids)
        finally:
            self._leave("terminate")

    def commit(self, instance_ids: Sequence[str], attempt: str) -> None:
        self._enter("commit")
        try:
            self._cloud.commit(instance_ids, attempt)
        finally:
            self._leave("commit")

    def mark_deleting(self, instance_ids: Sequence[str], at: float) -> None:
        self._enter("mark_deleting")
        try:
            self._cloud.mark_deleting(instance_ids, at)
        finally:
            self._leave("mark_deleting")

    def describe_shapes(self, instance_types: Sequence[str]) -> dict[str, Shape]:
        return self._cloud.describe_shapes(instance_types)

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        """A call of the contract added since this was written (a deleting tag on an
        instance, say): gated like the others."""
        value = getattr(self._cloud.fake, name)
        if not callable(value) or name.startswith("_"):
            return value

        def gated(*args: Any, **kwargs: Any) -> Any:
            self._enter(name)
            try:
                return getattr(self._cloud, name)(*args, **kwargs)
            finally:
                self._leave(name)

        return gated
