"""The simulated cloud keeps the CloudAdapter promises (outcomes, not call sequences)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.fake import FakeCloud, FakeSettings, Stockout
from adapters.fake.store import FakeStore
from provider.base.clock import ManualClock
from provider.domain.cloud import (
    CapacityType,
    CloudAdapter,
    InstanceState,
    InsufficientCapacity,
    InvalidRequest,
    LaunchRequest,
    OwnerTags,
    Quota,
    QuotaExceeded,
    Reservation,
    ReservationKind,
    Shape,
    TransientError,
)

NOW = 1_800_000_000.0


def settings(**kw: object) -> FakeSettings:
    base: dict[str, object] = {
        "reservations": [
            Reservation("r1", "z1", "p5", total=4, free=4),
            Reservation("cb", "z1", "p5", total=2, free=2, kind=ReservationKind.CAPACITY_BLOCK,
                        starts_at=NOW + 3600, ends_at=NOW + 7200, targeted=True),
        ],
        "shapes": {"p5": Shape("p5", vcpus=192, memory_mib=2**21, gpu_type="h100", gpu_count=8)},
    }
    base.update(kw)
    return FakeSettings(**base)  # type: ignore[arg-type]


def req(token: str, count: int, source: CapacityType = CapacityType.ON_DEMAND,
        reservation: str | None = None, itype: str = "p5", zone: str = "z1") -> LaunchRequest:
    tags = OwnerTags("c", "g", token.split("/")[0], "0.0", source, reservation)
    return LaunchRequest(token, "g", zone, itype, count, tags)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def test_it_is_a_cloud_adapter(clock: ManualClock) -> None:
    assert isinstance(FakeCloud(settings(), clock), CloudAdapter)


def test_reserved_launch_consumes_free_slots_all_or_nothing(clock: ManualClock) -> None:
    cloud = FakeCloud(settings(), clock)
    got = cloud.launch(req("a/1", 3, CapacityType.RESERVED, "r1"))
    assert len(got) == 3 and all(i.tags.reservation == "r1" for i in got)
    with pytest.raises(InsufficientCapacity) as info:
        cloud.launch(req("a/2", 2, CapacityType.RESERVED, "r1"))
    assert info.value.cloud_code == "ReservationCapacityExceeded"
    assert len(cloud.live_instances()) == 3  # the failed launch created nothing
    (r1,) = [r for r in cloud.snapshot("c").reservations if r.id == "r1"]
    assert r1.free == 1


def test_a_stopped_instance_gives_its_reservation_slot_back(clock: ManualClock) -> None:
    """Issue 50, finding 7: as GCE documents ("About reservations"), a stopped VM no
    longer counts toward the reservation; it stays (and bills) until deleted."""
    cloud = FakeCloud(settings(), clock)
    got = cloud.launch(req("a/1", 4, CapacityType.RESERVED, "r1"))
    cloud.stop(got[0].id)
    (r1,) = [r for r in cloud.snapshot("c").reservations if r.id == "r1"]
    assert r1.free == 1
    assert len(cloud.live_instances()) == 4
    assert len(cloud.launch(req("a/2", 1, CapacityType.RESERVED, "r1"))) == 1


def test_on_demand_launch_consumes_no_reservation(clock: ManualClock) -> None:
    cloud = FakeCloud(settings(), clock)
    cloud.launch(req("a/1", 2))
    assert {r.id: r.free for r in cloud.snapshot("c").reservations} == {"r1": 4, "cb": 2}


def test_capacity_block_only_inside_its_window(clock: ManualClock) -> None:
    cloud = FakeCloud(settings(), clock)
    with pytest.raises(InsufficientCapacity):
        cloud.launch(req("a/1", 1, CapacityType.RESERVED, "cb"))
    clock.advance(3600)
    assert len(cloud.launch(req("a/2", 2, CapacityType.RESERVED, "cb"))) == 2
    clock.advance(3600)
    with pytest.raises(InsufficientCapacity):
        cloud.launch(req("a/3", 1, CapacityType.RESERVED, "cb"))


def test_a_blocks_end_ends_its_instances_and_an_odcrs_leaves_them_running(
        clock: ManualClock, tmp_path: Path) -> None:
    """Issue 52, item 1: capacity whose end ends its instances (a block) ends them at its
    end, on every read; an ODCR's end ends only launches into it (ends_instances False)."""
    odcr = Reservation("odcr", "z1", "p5", total=2, free=2, ends_at=NOW + 7200,
                       ends_instances=False)
    cloud = FakeCloud(settings(reservations=[*settings().reservations, odcr],
                               state_path=str(tmp_path / "cloud.db")), clock)
    clock.advance(3600)
    in_block = cloud.launch(req("a/1", 2, CapacityType.RESERVED, "cb"))
    in_odcr = cloud.launch(req("b/1", 2, CapacityType.RESERVED, "odcr"))
    clock.advance(3600)  # both end now
    states = {i.id: i.state for i in cloud.all_instances()}
    assert {states[i.id] for i in in_block} == {InstanceState.TERMINATED}
    assert {states[i.id] for i in in_odcr} == {InstanceState.RUNNING}
    assert {i.tags.reservation for i in cloud.snapshot("c").instances} == {"odcr"}
    with pytest.raises(InsufficientCapacity):  # nothing launches into it any more
        cloud.launch(req("b/2", 1, CapacityType.RESERVED, "odcr"))
    # A process reading the same state later sees the same.
    again = FakeCloud(settings(reservations=[*settings().reservations, odcr],
                               state_path=str(tmp_path / "cloud.db")), clock)
    assert {i.tags.reservation for i in again.live_instances()} == {"odcr"}


def test_bad_reservation_requests_are_invalid(clock: ManualClock) -> None:
    cloud = FakeCloud(settings(), clock)
    with pytest.raises(InvalidRequest, match="does not exist"):
        cloud.launch(req("a/1", 1, CapacityType.RESERVED, "nope"))
    with pytest.raises(InvalidRequest, match="holds p5 in z1"):
        cloud.launch(req("a/2", 1, CapacityType.RESERVED, "r1", zone="z2"))


def test_stockouts_and_quotas(clock: ManualClock) -> None:
    quota = Quota("gpus-on-demand", "gpus", limit=24, used=0)
    cloud = FakeCloud(settings(stockouts=[Stockout("z2", "p5")], quotas=[quota]), clock)
    with pytest.raises(InsufficientCapacity):
        cloud.launch(req("a/1", 1, zone="z2"))
    cloud.launch(req("a/2", 2))
    with pytest.raises(QuotaExceeded, match="16 of 24 gpus used, 16 more"):
        cloud.launch(req("a/3", 2))
    assert cloud.snapshot("c").quotas[0].used == 16
    cloud.launch(req("a/4", 2, CapacityType.RESERVED, "r1"))  # reserved is outside the quota
    cloud.set_stockout(Stockout("z2", "p5"), active=False)
    assert len(cloud.launch(req("a/5", 1, zone="z2"))) == 1


def test_same_token_launches_once(clock: ManualClock) -> None:
    cloud = FakeCloud(settings(), clock)
    first = cloud.launch(req("a/1", 2))
    again = cloud.launch(req("a/1", 2))
    assert [i.id for i in first] == [i.id for i in again]
    assert len(cloud.live_instances()) == 2


def test_boot_time_terminate_commit(clock: ManualClock) -> None:
    cloud = FakeCloud(settings(boot_seconds=30), clock)
    ids = [i.id for i in cloud.launch(req("a/1", 2))]
    assert {i.state for i in cloud.snapshot("c").instances} == {InstanceState.PENDING}
    clock.advance(30)
    assert {i.state for i in cloud.snapshot("c").instances} == {InstanceState.RUNNING}
    cloud.commit(ids, "b")  # another attempt's commit does not touch them
    assert not any(i.tags.committed for i in cloud.live_instances())
    cloud.commit(ids, "a")
    assert all(i.tags.committed for i in cloud.live_instances())
    cloud.terminate([ids[0], "never-existed"])
    cloud.terminate([ids[0]])  # idempotent
    assert [i.id for i in cloud.snapshot("c").instances] == [ids[1]]
    assert cloud.snapshot("other-cluster").instances == []


def test_injected_faults(clock: ManualClock) -> None:
    cloud = FakeCloud(settings(), clock)
    cloud.inject("terminate", TransientError("throttled"), times=2)
    ids = [i.id for i in cloud.launch(req("a/1", 1))]
    for _ in range(2):
        with pytest.raises(TransientError):
            cloud.terminate(ids)
    cloud.terminate(ids)
    assert cloud.live_instances() == []
    cloud.inject("launch", TransientError("timeout"), after=True)
    with pytest.raises(TransientError):
        cloud.launch(req("b/1", 1))
    assert len(cloud.live_instances()) == 1  # it happened anyway


def test_state_survives_restart(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "cloud.db"
    cloud = FakeCloud(settings(state_path=str(path)), clock)
    launched = cloud.launch(req("a/1", 2, CapacityType.RESERVED, "r1"))
    cloud.commit([launched[0].id], "a")
    cloud.terminate([launched[1].id])
    cloud.close()
    again = FakeCloud(settings(state_path=str(path)), clock)
    (survivor,) = again.live_instances()
    assert survivor.id == launched[0].id and survivor.tags.committed
    assert {r.id: r.free for r in again.snapshot("c").reservations}["r1"] == 3
    assert [i.id for i in again.launch(req("a/1", 2, CapacityType.RESERVED, "r1"))] == [
        i.id for i in launched
    ]  # the token is remembered across the restart


def test_the_deletion_mark_survives_a_restart_and_keeps_its_first_time(
        tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "cloud.db"
    cloud = FakeCloud(settings(state_path=str(path)), clock)
    launched = cloud.launch(req("a/1", 2))
    cloud.commit([i.id for i in launched], "a")
    cloud.mark_deleting([launched[0].id, "never-existed"], NOW + 1)
    cloud.mark_deleting([launched[0].id], NOW + 99)  # marked already: the first time stays
    cloud.terminate([launched[1].id])
    cloud.mark_deleting([launched[1].id], NOW + 2)  # gone already: nothing to mark
    cloud.close()
    again = FakeCloud(settings(state_path=str(path)), clock)
    by_id = {i.id: i for i in again.all_instances()}
    assert by_id[launched[0].id].tags.deleting_since == NOW + 1
    assert by_id[launched[0].id].tags.committed  # nothing else changed
    assert by_id[launched[1].id].tags.deleting_since is None


def test_processes_sharing_the_store_see_each_others_calls(tmp_path: Path,
                                                          clock: ManualClock) -> None:
    """Two allset replicas on one simulated cloud (fake.shared): what one launches, the
    other lists and cannot launch again under the same token; slots are counted once."""
    path = str(tmp_path / "cloud.db")
    a = FakeCloud(settings(state_path=path, shared=True), clock)
    b = FakeCloud(settings(state_path=path, shared=True), clock)
    launched = a.launch(req("x/1", 3, CapacityType.RESERVED, "r1"))
    assert {i.id for i in b.snapshot("c").instances} == {i.id for i in launched}
    assert [i.id for i in b.launch(req("x/1", 3, CapacityType.RESERVED, "r1"))] == [
        i.id for i in launched]
    with pytest.raises(InsufficientCapacity):  # r1 has 4 slots, 3 are taken through a
        b.launch(req("y/1", 2, CapacityType.RESERVED, "r1"))
    b.commit([launched[0].id], "x")
    b.terminate([launched[1].id])
    mine = {i.id: i for i in a.snapshot("c").instances}
    assert mine[launched[0].id].tags.committed and launched[1].id not in mine
    # Not shared: each process keeps what it read at start (a restart's view).
    c = FakeCloud(settings(state_path=path), clock)
    a.launch(req("z/1", 1))
    assert len(c.snapshot("c").instances) == 2


def test_a_reclaimed_instance_is_gone_whatever_faults_are_armed(clock: ManualClock) -> None:
    """A Spot interruption is the cloud's own act: injected API faults do not apply."""
    cloud = FakeCloud(settings(), clock)
    [inst] = cloud.launch(req("t1", 1, CapacityType.RESERVED, "r1"))
    cloud.inject("terminate", TransientError("throttled"))
    cloud.reclaim(inst.id)
    assert [i.state for i in cloud.all_instances()] == [InstanceState.TERMINATED]
    assert next(r for r in cloud.snapshot("c").reservations if r.id == "r1").free == 4
    with pytest.raises(TransientError):  # the armed fault still waits for an API call
        cloud.terminate([inst.id])


def test_cleared_faults_no_longer_fire(clock: ManualClock) -> None:
    cloud = FakeCloud(settings(), clock)
    cloud.inject("launch", TransientError("throttled"), times=3)
    cloud.inject("snapshot", TransientError("throttled"))
    cloud.clear_faults()
    cloud.snapshot("c")
    assert len(cloud.launch(req("t1", 2))) == 2


def test_a_shared_cloud_needs_its_file_and_no_shutdown_timing() -> None:
    from provider.config import ConfigError
    from tests.kit.helpers import BASE_CONFIG, config

    with pytest.raises(ConfigError, match="statePath"):
        config(BASE_CONFIG.replace("  fake:\n", "  fake:\n    shared: true\n", 1))
    with pytest.raises(ConfigError, match="terminateSeconds"):
        config(BASE_CONFIG.replace("  fake:\n", "  fake:\n    shared: true\n    statePath: "
                                   "c.db\n    terminateSeconds: 5\n", 1))


def test_a_reader_of_the_store_can_read_only_what_is_new(tmp_path: Path,
                                                         clock: ManualClock) -> None:
    """bench/scale's kubelets poll the store for instances to register: the ids of those
    running, then in full only the ones not seen (1,200 here: more than one query's worth of
    bound parameters)."""
    path = tmp_path / "cloud.db"
    cloud = FakeCloud(settings(state_path=str(path), quotas={}), clock)
    launched = cloud.launch(req("a/1", 1200))
    cloud.commit([i.id for i in launched], "a")  # stored as running from here
    cloud.terminate([launched[0].id])
    store = FakeStore(path)
    try:
        running = store.ids(InstanceState.RUNNING)
        assert running == {i.id for i in launched[1:]}
        fresh = sorted(running)[:700]
        read = store.instances([*fresh, "i-unknown"])
        assert sorted(i.id for i in read) == fresh
        assert {i.tags.attempt for i in read} == {launched[1].tags.attempt}
        assert {(i.id, i.tags) for i in read} == {
            (i.id, i.tags) for i in store.load()[0] if i.id in set(fresh)}
    finally:
        store.close()
