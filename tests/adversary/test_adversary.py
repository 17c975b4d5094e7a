"""The adversary (tests/adversary) in CI: a bounded number of seeds through the real
service (three in four with two replicas, the fourth one process), every invariant
checked after every step and at quiescence, and the moves shown to reach what they are
for (requests' attempts at once, window holds and windows opening and closing, pods of two
gang APIs asked for; with replicas failovers, partitions healed both ways, clock steps,
late writes refused, gangs under a later leader, debts paid by a later process); proof
that each invariant checker can fail, by handing it a deliberately broken picture; and the
API server link's partitions, in both orders.

More seeds: ``python -m bench.adversary --seeds 10000 --jobs 2``; replay one failing seed
with the command its report prints."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import threading
from collections import Counter
from pathlib import Path

import pytest

from provider.config.schema import FakeReservation
from provider.domain.cloud import CapacityType, CloudInstance, InstanceState, OwnerTags
from tests.adversary.cloud import LaunchRecord
from tests.adversary.invariants import (
    INVARIANTS,
    check,
    i5_slot_once,
    i17_outlasting_capacity,
    v1_one_gang_per_workload,
)
from tests.adversary.kube import RecordWrite
from tests.adversary.observe import runtimes_to_outlast
from tests.adversary.queues import QueueState
from tests.adversary.reuse_watch import lasting_at
from tests.adversary.run import run_seed
from tests.adversary.sched import Crashed, Scheduler, yield_point
from tests.adversary.state import (
    BookingSeen,
    GangNodeSeen,
    GroupSeen,
    KeptSeen,
    NodeSeen,
    PodSetSeen,
    RequestSeen,
    State,
)

# Measured: ~0.85 s a seed on this 2-core machine shared with other work (load 8): 200
# seeds take about three minutes (the concurrent workers, windows and gangs of issue 32
# cost some 30% more than before).
CI_SEEDS = 200
# What the CI seeds must reach between them (run.py's and bench.adversary's figures): a
# harness that stopped reaching these would pass while testing less.
MUST_REACH = (
    "failovers",
    "API partitions healed, held requests landing late",
    "API partitions healed, held requests dropped",
    "held requests landed after the caller gave up",
    "wall-clock steps forward",
    "wall-clock steps back",
    "late writes refused by the server (409)",
    "gangs committed in lease epoch 1",
    "terminations paid by a later process than owed them",
    "rolling updates (SIGTERM)",
    # Issue 32: concurrent workers, holds and windows, gangs of two APIs.
    "request attempts run at once in one process",
    "window holds taken",
    "windows opened with slots held",
    "windows closed with gangs in them",
    "gang requests Provisioned",
    "pods named by two gang APIs asked for",
    # Issue 33: a stopped VM is a lost node of its gang, and deleted.
    "stopped gang nodes deleted",
    # Issue 50: reuse and warm nodes keep every promise.
    "requests Provisioned on reused idle nodes",
    "tainted idle nodes refused",
    "bookings held by a consumer by annotation",
    "stopped warm nodes released",
    # Issue 52: capacity whose end ends its instances ends them; launches refused for room.
    "instances ended by their capacity's end",
    "launches refused for room",
    # Issue 58: KAI and YuniKorn gangs asked for, gangs held back by their queue.
    "gang requests created for KAI gangs",
    "gang requests created for YuniKorn gangs",
    "gangs held back by their queue (passes)",
    "requests for queued gangs judged by Q1",
)
# Invariants not to check, comma-separated: only to look past a known break while its
# fix is on the way (the report says which were skipped). Empty in CI.
IGNORE = tuple(x for x in os.environ.get("ALLSET_ADVERSARY_IGNORE", "").split(",") if x)


# The CI seeds run in batches, one test each (the xdist group keeps them on one worker): a
# batch of 20 takes ~17 s on a quiet 2-core machine and ~25 s at a load of 8, so its 300 s
# bound catches a hang and still holds at a load of ~20. 200 seeds in one test took ~3 min at
# a load of 8 and timed out under more. Each batch leaves what its seeds reached in a folder
# the session's workers share, and the batch that finds every batch's file there checks the
# reach: that holds however the batches were spread over workers or ordered (CI once ran
# five of them in one worker and five in another).
BATCH = 20
BATCHES = range(0, CI_SEEDS, BATCH)


@pytest.fixture
def reach_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # each worker's own basetemp sits in the session's
    folder = base / "adversary-reach"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.mark.xdist_group("adversary")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("first", BATCHES, ids=lambda first: f"seeds {first}-{first + BATCH - 1}")
def test_random_interleavings_keep_every_invariant(first: int, reach_folder: Path) -> None:
    failing = []
    reached: Counter[str] = Counter()
    for seed in range(first, first + BATCH):
        result = run_seed(seed, ignore=IGNORE)
        reached.update(result.reached)
        if not result.ok:
            failing.append(result)
    written = reach_folder / f"batch-{first}.json.part"
    written.write_text(json.dumps(reached))
    written.rename(reach_folder / f"batch-{first}.json")  # whole, or not there
    if failing:
        reports = "\n\n".join(r.report(tail=40) for r in failing[:3])
        seeds = [r.seed for r in failing]
        broke = sorted({b.invariant for r in failing for b in r.breaks})
        pytest.fail(f"{len(failing)} of {BATCH} seeds broke {broke}: {seeds}\n\n{reports}",
                    pytrace=False)
    files = [reach_folder / f"batch-{f}.json" for f in BATCHES]
    if all(f.exists() for f in files):  # the last batch to finish: what did they all reach?
        total: Counter[str] = Counter()
        for f in files:
            total.update(json.loads(f.read_text()))
        missed = [k for k in MUST_REACH if not total[k]]
        assert not missed, f"{CI_SEEDS} seeds never reached {missed}: {dict(total)}"


@pytest.mark.parametrize("solo", [True, False], ids=["one process", "replicas"])
def test_a_seed_replays_the_same_interleaving(solo: bool) -> None:
    first, again = run_seed(7, steps=80, solo=solo), run_seed(7, steps=80, solo=solo)
    assert first.trace == again.trace
    assert len(first.trace) > 80


# --- the scheduler: a crashed task never acts again ----------------------------------------


def test_a_killed_task_stops_at_its_yield_point_and_never_acts_again() -> None:
    import random

    sched = Scheduler(random.Random(1))
    acted: list[str] = []
    owner = object()

    def work() -> None:
        acted.append("before")
        yield_point("cloud.launch")
        acted.append("after")  # must never run: the process died at the yield point

    task = sched.spawn("w", work, owner)
    sched.step(task)
    assert acted == ["before"] and task.at == "cloud.launch"
    assert sched.kill(owner) == 1
    assert acted == ["before"] and task.done and task.error is None
    assert threading.active_count() < 50


def test_a_dead_incarnations_cloud_calls_raise() -> None:
    from adapters.fake import FakeCloud, FakeSettings
    from provider.base.clock import ManualClock
    from tests.adversary.cloud import GatedCloud, LaggingCloud

    cloud = LaggingCloud(FakeCloud(FakeSettings(), ManualClock()), lambda: 0)
    alive = [True]
    gated = GatedCloud(cloud, lambda: alive[0])
    gated.snapshot("c")
    alive[0] = False
    with pytest.raises(Crashed):
        gated.snapshot("c")


# --- the link to the API server: a cut, healed in either order -----------------------------


@dataclasses.dataclass
class _Sender:
    """An incarnation as the link sees it: alive, leading in epoch 1 as allset-a."""

    alive: bool = True
    tag: str = "a1"

    def identity(self) -> str:
        return "allset-a_a1"

    def epoch(self) -> int:
        return 1

    def leading(self) -> bool:
        return True


@pytest.mark.parametrize("caller_waits", [False, True], ids=["caller gave up", "caller waits"])
def test_a_held_write_lands_at_the_heal(caller_waits: bool) -> None:
    """A write sent while its replica is cut off is held: with a timeout, its caller sees
    a read timeout once that passes, and the write still lands when the cut heals (the
    late write of finding 1); healed sooner, the caller gets the answer. Either way the
    fake server records the attempt-record change, its sender, epoch and the Lease."""
    from kubernetes import client
    from urllib3.exceptions import ReadTimeoutError

    from tests.adversary.kube import KubeLink
    from tests.adversary.run import _deterministic
    from tests.adversary.world import NAMESPACE, _client, make_world
    from tests.fakes.kube import objects

    with _deterministic(3):
        w = make_world(3, solo=False)
        try:
            w.kube.create(objects.provisioning_request(NAMESPACE, "job", {"workers": 1}))
            api = _client(w.kube)
            w.apis.append(api)
            link = KubeLink(w.ledger, w.now)
            link.install(api, _Sender())
            custom = client.CustomObjectsApi(api)
            outcome: list[object] = []

            def write() -> None:
                obj = custom.get_namespaced_custom_object(
                    "autoscaling.x-k8s.io", "v1", NAMESPACE, "provisioningrequests", "job")
                obj["status"] = {"provisioningClassDetails": {"allset.dev/attempt": "r1-ab"}}
                try:
                    custom.replace_namespaced_custom_object_status(
                        "autoscaling.x-k8s.io", "v1", NAMESPACE, "provisioningrequests",
                        "job", obj, _request_timeout=None if caller_waits else 8.0)
                    outcome.append("answered")
                except ReadTimeoutError:
                    outcome.append("timed out")

            task = w.sched.spawn("a1.ctl", write)
            w.sched.step(task)  # at the GET
            w.sched.step(task)  # read; at the PUT
            link.partition = "hang"
            w.sched.step(task)  # sent: held
            assert task.at == "kube.PUT held" and not task.runnable
            w.clock.advance(30)
            if not caller_waits:
                w.sched.step(task)  # its timeout passed
                assert outcome == ["timed out"] and task.done
            assert link.heal(land=True) == (1, 0 if caller_waits else 1)
            if caller_waits:
                w.sched.step(task)
                assert outcome == ["answered"]
            stored = w.kube.get("provisioningrequests", "job", NAMESPACE)
            assert stored is not None
            assert stored["status"]["provisioningClassDetails"]["allset.dev/attempt"] == "r1-ab"
            [written] = w.ledger.writes
            assert (written.sender, written.epoch, written.late) == ("a1", 1, not caller_waits)
            assert written.deposed  # no Lease names allset-a in epoch 1
        finally:
            w.close()


# --- each checker can fail ---------------------------------------------------------------


def _inst(iid: str, group: str = "g", attempt: str = "a1", part: str = "0.0",
          committed: bool = True, state: InstanceState = InstanceState.RUNNING,
          reservation: str | None = None, request: str | None = None) -> CloudInstance:
    tags = OwnerTags("adv", group, attempt, part, CapacityType.ON_DEMAND,
                     reservation=reservation, request=request, committed=committed)
    return CloudInstance(iid, f"fake://z/{iid}", iid, "z", "t", state, tags)


def _launch(attempt: str, part: str, ids: tuple[str, ...], count: int | None = None,
            group: str = "g", request: str | None = None) -> LaunchRecord:
    return LaunchRecord(f"{attempt}/{part}", len(ids) if count is None else count, ids,
                        group, attempt, part, request)


GOOD = State(
    instances=(_inst("i1"), _inst("i2")),
    launches=(_launch("a1", "0.0", ("i1", "i2")),),
    max_size={"g": 2},
    launched_groups=frozenset({"g"}),
    ca=(GroupSeen("g", 2, (("fake://z/i1", "running"), ("fake://z/i2", "running")),
                  (("fake://z/i1", "g"),)),),
)

BROKEN: dict[str, State] = {
    # a live uncommitted instance at quiescence; a group nobody configures, unreported
    "I1": dataclasses.replace(GOOD, instances=(*GOOD.instances, _inst("i3", committed=False),
                                               _inst("x1", group="gone"))),
    # Provisioned with 1 of 2 nodes, and the one left has no booking label
    "I2": dataclasses.replace(
        GOOD,
        instances=(_inst("r1", attempt="r-1", request="ml/job"),
                   _inst("r2", attempt="r-1", request="ml/job",
                         state=InstanceState.TERMINATED)),
        launches=(_launch("r-1", "0.0", ("r1", "r2"), request="ml/job"),),
        attempt_uid={"r-1": "u1"},
        requests=(RequestSeen("ml/job", "u1", True, False, "ml.job"),),
        nodes=(NodeSeen("r1", "fake://z/r1", True, None),),
        ca=()),
    # three live nodes in a group of maxSize 2, just launched
    "I3": dataclasses.replace(GOOD, instances=(*GOOD.instances, _inst("i3", attempt="a2")),
                              ca=()),
    # one token created three instances for a part of two
    "I4": dataclasses.replace(GOOD, launches=(_launch("a1", "0.0", ("i1", "i2", "i9"), 2),)),
    # the ledger sees a free slot the cloud does not have; the cloud refused an over-booking
    "I5": dataclasses.replace(GOOD, instances=(_inst("i1", reservation="r"),),
                              ledger_free={"r": 1}, reservation_total={"r": 1},
                              refused=("a9/0.0: reservation r has 0 free, 1 requested",),
                              ca=()),
    # a pod named by two gang APIs asked for by both gangs' open requests
    "B1": dataclasses.replace(GOOD, counted={"ml/coscheduling-g1-aa-1": frozenset({"p1 (u1)"}),
                                             "ml/volcano-g1-bb-1": frozenset({"p1 (u1)",
                                                                              "p2 (u2)"})}),
    # marked for deletion, still running at the end
    "I6": dataclasses.replace(GOOD, must_end=frozenset({"i1"})),
    # CA sees a target of 3 with 2 nodes, and a node the cloud does not run; a node CA
    # reads in g that NodeGroupForNode puts in no group
    "I7": dataclasses.replace(GOOD, ca=(GroupSeen("g", 3, (("fake://z/i1", "running"),
                                                           ("fake://z/zz", "running"))),),
                              misread=("NodeGroupForNode(fake://z/i1) = '', listed in g",)),
    "I8": dataclasses.replace(GOOD, killed_unasked=("i1 (g, attempt a1, by task refresh)",)),
    "E1": dataclasses.replace(GOOD, task_errors=("task w1 raised KeyError('x')",)),
    # marked for deletion by a process that was deposed since, still running at the end
    "I6.anywhere": dataclasses.replace(GOOD, must_end_anywhere=frozenset({"i1"})),
    # both replicas pass the fence at once
    "I9": dataclasses.replace(GOOD, fence_passers=("a1", "b2")),
    # a's late write of epoch 1 put its own attempt back over b's record of epoch 2
    "I10": dataclasses.replace(GOOD, record_writes=(RecordWrite(
        5, "ml/job", ("u1", "r2-bb", "2"), ("u1", "r1-aa", None), "a1", "allset-a_a1", 1,
        ("allset-b_b2", 2), True, True),)),
    "Q1": dataclasses.replace(GOOD, queue_overruns=(
        "volcano-g1-aa-1 asked for 16 GPUs of volcano queue 'default', which had no room",)),
    "G1": dataclasses.replace(GOOD, gang_kills=("i1 of ml/job's Provisioned gang",)),
    # sent into a block ending at 1000 at 700, with 60 s of boot and a declared runtime
    # of 300 s: its last start was 640
    "I17": dataclasses.replace(
        GOOD, launches=(dataclasses.replace(_launch("r-1", "0.0", ("i1",), request="ml/a"),
                                            request_uid="u1", reservation="cb", at=700.0),),
        ending={"cb": 1000.0}, boot={"g": 60.0}, runtimes={"u1": 300.0}),
    # a refusal for room (Busy) came out of an attempt as a failed part
    "N1": dataclasses.replace(GOOD, room_failures=("a1 (a1): 2 launches in flight",)),
    # a second request Provisioned on a node of the first's standing gang (double booking)
    "I13": dataclasses.replace(
        GOOD,
        instances=(_inst("r1", attempt="r-1", request="ml/a"),),
        launches=(_launch("r-1", "0.0", ("r1",), request="ml/a"),),
        attempt_uid={"r-1": "u1", "r-2": "u2"},
        requests=(RequestSeen("ml/a", "u1", True, False, "ml.a"),
                  RequestSeen("ml/b", "u2", True, False, "ml.b", attempt="r-2",
                              reused=("fake://z/r1",), planned=1)),
        ca=()),
    # a reserved-only request Provisioned on a reused on-demand node its pods cannot use:
    # tainted by someone, relabelled off their nodeSelector
    "I14": dataclasses.replace(GOOD, gang_nodes=(GangNodeSeen(
        "ml/b", "i9", "on-demand", ("reserved",), True,
        (PodSetSeen((("example.com/gpu", "h100"),),
                    (("nvidia.com/gpu", "Exists", "", "NoSchedule"),), 8),),
        (("example.com/gpu", "a100"),), (("maintenance", "drain", "NoSchedule"),), 8),)),
    # a node booked for ml/b while a Pending replacement still consumes ml/a's booking
    "I15": dataclasses.replace(GOOD, bookings=(BookingSeen(
        "i9", "ml/b", "ml.a", ("pod a-w3 (consumes its request)",)),)),
    # a stopped node kept warm; at quiescence one not deleted
    "I16": dataclasses.replace(GOOD, kept=(KeptSeen("i9", False, False, fresh=True),),
                               stopped_warm=("i9",)),
    # two variants of one Kueue workload each hold a live gang
    "V1": dataclasses.replace(
        GOOD,
        instances=(_inst("v1", attempt="r-1", request="ml/a"),
                   _inst("v2", attempt="r-2", request="ml/b")),
        launches=(_launch("r-1", "0.0", ("v1",), request="ml/a"),
                  _launch("r-2", "0.0", ("v2",), request="ml/b")),
        attempt_uid={"r-1": "u1", "r-2": "u2"},
        requests=(RequestSeen("ml/a", "u1", False, False, "ml.a", parent="wl"),
                  RequestSeen("ml/b", "u2", False, False, "ml.b", parent="wl")),
        ca=()),
    # at quiescence nobody acts; or the acting one is not where CA's route goes
    "L1": dataclasses.replace(GOOD, replicas=True),
    "R1": dataclasses.replace(GOOD, replicas=True, acting=(("b2", "b"),), routed="a",
                              acting_for=100.0, retry_period=8.0),
    # a hostile tenant's request left standing at quiescence, neither refused nor deleted
    "H1": dataclasses.replace(GOOD, requests=(
        RequestSeen("ml/hostile-1", "u9", False, False, "ml.hostile-1"),)),
}


def test_the_good_picture_keeps_every_invariant() -> None:
    assert check(GOOD, final=True) == []


# A 2-slot capacity block: one request holds both slots for its window.
HELD = dataclasses.replace(GOOD, reservation_total={"cb": 2}, held=(("ml/a", "cb", 2),))


def test_i5_counts_slots_held_for_a_window_with_those_claimed_and_used() -> None:
    """Finding 1 of issue 32: two requests deciding at once each held both slots of a
    2-slot block (4 promised of 2). Held, claimed and used slots are one sum; an attempt's
    claim and the instances it launched under it are one promise, not two."""
    twice = dataclasses.replace(HELD, held=(("ml/a", "cb", 2), ("ml/b", "cb", 2)))
    [found] = i5_slot_once(twice, False)
    assert "4 slots of cb promised at once, it has 2" in found
    claimed = dataclasses.replace(HELD, held=(("ml/a", "cb", 1),), claims=(("a7", "cb", 2),))
    assert i5_slot_once(claimed, False)
    running = dataclasses.replace(HELD, instances=(_inst("c1", attempt="a7", reservation="cb"),),
                                  held=(("ml/a", "cb", 1),), claims=(("a7", "cb", 1),))
    assert i5_slot_once(running, False) == []
    assert i5_slot_once(dataclasses.replace(running, held=(("ml/a", "cb", 2),)), False)


def test_v1_does_not_hold_a_request_whose_workload_allset_may_not_read() -> None:
    """Seeds 39, 96, 118, 137 and 150 of the merged moves: a variant request made while
    Workloads answered 403 (kueue.forbid) launched beside its sibling. Whether a request's
    Workload is a variant, and of which parent, is said only by that Workload, so allset
    could not know the two were siblings: no broken promise. Two variants allset could
    read still break V1."""
    unread = dataclasses.replace(BROKEN["V1"], workload_unread=frozenset({"u2"}))
    assert v1_one_gang_per_workload(unread, False) == []
    other = dataclasses.replace(BROKEN["V1"], workload_unread=frozenset({"u7"}))
    assert v1_one_gang_per_workload(other, False)


def test_q1_holds_no_gang_to_a_bound_of_a_resource_it_does_not_ask_for() -> None:
    """CI seed 128: a Volcano gang of CPU pods (0 GPUs) was asked for while its queue's
    GPU capability was 0 with 8 GPUs in use. Volcano compares only the dimensions a job
    asks for (Resource.LessEqualWithDimension, both at enqueue and at allocation), KAI
    likewise (isOverLimit skips a resource requested 0 of): the queue admits that gang,
    so no promise was broken. A gang that asks for a GPU there still breaks Q1."""
    full = QueueState(bound=0, used=8, open=True)
    assert full.admits(0)
    assert not full.admits(1)
    assert not QueueState(bound=16, used=8, open=True).admits(9)
    assert not QueueState(bound=None, used=8, open=False).admits(0)


@pytest.mark.parametrize("name", [inv.name for inv in INVARIANTS])
def test_each_invariant_checker_can_fail(name: str) -> None:
    inv = next(i for i in INVARIANTS if i.name == name)
    found = inv.check(BROKEN[name], True)
    assert found, f"{name} ({inv.explanation}) did not see its broken picture"
    assert inv.check(GOOD, True) == []


def test_i14_takes_a_taint_the_pods_tolerate_and_a_request_that_allows_the_type() -> None:
    """The checker is no stricter than the rule: a taint the pods tolerate (the group's
    own GPU taint), a preference, or labels that meet the selector are no break."""
    fine = GangNodeSeen("ml/b", "i9", "spot", ("on-demand", "spot"), True,
                        (PodSetSeen((("example.com/gpu", "h100"),),
                                    (("nvidia.com/gpu", "Exists", "", "NoSchedule"),), 8),),
                        (("example.com/gpu", "h100"),),
                        (("nvidia.com/gpu", "present", "NoSchedule"),
                         ("soon", "x", "PreferNoSchedule")), 8)
    assert check(dataclasses.replace(GOOD, gang_nodes=(fine,)), True) == []


def test_i17_owes_a_gang_that_allows_interruption_its_boot_only() -> None:
    """Seed 52's break (and 164's, 192's): a request that allows interruption was sent into
    the block at 358, 18 s past the last start its declared runtime of 300 s would set
    (block end 700, boot 60). The planner owes such a gang its boot only
    (docs/planning.md "Time"), so the checker records no runtime for it; it still owes
    the boot, and a request that does not allow interruption still owes its runtime."""
    params = {"u1": {"expectedRuntimeSeconds": "300", "allowInterruption": "true"},
              "u2": {"expectedRuntimeSeconds": "300", "allowInterruption": "false"}}
    runtimes = runtimes_to_outlast(params, 1.0)
    assert runtimes == {"u2": 300.0}

    def sent(uid: str, at: float) -> State:
        launch = dataclasses.replace(_launch("r-1", "0.0", ("i1",), request="ml/a"),
                                     request_uid=uid, reservation="cb", at=at)
        return dataclasses.replace(GOOD, launches=(launch,), ending={"cb": 700.0},
                                   boot={"g": 60.0}, runtimes=runtimes)

    assert i17_outlasting_capacity(sent("u1", 358.0), False) == []
    assert i17_outlasting_capacity(sent("u1", 650.0), False)  # past end less boot
    assert i17_outlasting_capacity(sent("u2", 358.0), False)


def test_i16_asks_deletion_of_stopped_nodes_only_while_their_reservation_lasts() -> None:
    """Seed 31's break: a node of r-c kept warm, stopped by the cloud; r-c ended before
    allset's next pass, so the node was no longer the keep policy's (its protection was
    taken off, CA's unready scale-down deletes it as any other). The checker took r-c for
    a reservation without end, as it was before issue 52 gave it one."""
    def reservation(rid: str, ends: float | None) -> FakeReservation:
        return FakeReservation(id=rid, zone="z-a", instance_type="cpu2", count=2,
                               ends_at=None if ends is None
                               else dt.datetime.fromtimestamp(ends, dt.UTC))

    config = [reservation("r-a", None), reservation("r-c", 1000.0),
              reservation("other", None)]
    assert lasting_at(config, 999.0) == {"r-a", "r-c"}
    assert lasting_at(config, 1000.0) == {"r-a"}
