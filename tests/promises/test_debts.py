"""A termination owed lives on the instance (issue 31, finding 3; I6, I11): CA is answered
OK only once the deletion mark is in the cloud, so a replica that takes over from one that
died owing terminations finishes them, and shows those nodes as deleting meanwhile. The
first test failed before the fix: the new leader showed the node running and never
terminated it."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import pytest

from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.domain.cloud import (
    CapacityType,
    InstanceState,
    LaunchRequest,
    OutcomeUnknown,
    OwnerTags,
    TransientError,
)
from provider.domain.errors import FailedPrecondition, Unavailable
from provider.domain.fleet import NodeState
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import Harness, ManualPool, Switchable, harness, serving

DELETING = pb.InstanceStatus.instanceDeleting
RUNNING = pb.InstanceStatus.instanceRunning


def states(stub: pb_grpc.CloudProviderStub, group: str) -> dict[str, int]:
    reply = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=group))
    return {i.id: i.status.instanceState for i in reply.instances}


def target(stub: pb_grpc.CloudProviderStub, group: str) -> int:
    size: int = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=group)).targetSize
    return size


def delete(stub: pb_grpc.CloudProviderStub, group: str, provider_id: str) -> None:
    stub.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(
        id=group, nodes=[pb.ExternalGrpcNode(providerID=provider_id, name="n")]))


def two_nodes(h: Harness) -> tuple[str, str]:
    h.provider.scaleups.increase("cpu", 2)
    h.run_workers()
    first, second = sorted(n.provider_id for n in h.provider.fleet.view("cpu").nodes)
    return first, second


def successor(h: Harness) -> tuple[Provider, ManualPool]:
    """A fresh replica on the same cloud: nothing of its predecessor but the cloud (its
    journal was an emptyDir on another node)."""
    pool = ManualPool()
    provider = Provider(h.provider.config, h.cloud, h.clock, pool=pool, runner=inline_runner)
    provider.refresh_now()
    return provider, pool


def live_ids(h: Harness) -> set[str]:
    return {i.provider_id for i in h.live("cpu")}


def test_a_fresh_replica_finishes_a_termination_its_predecessor_owed() -> None:
    h = harness()
    doomed, kept = two_nodes(h)
    h.cloud.inject("terminate", TransientError("RequestLimitExceeded"), times=10**6)
    with serving(h.provider) as a:
        delete(a, "cpu", doomed)  # answered OK: CA takes the node for gone
        h.run_workers()  # replica A's terminate is throttled, its backlog owes it
        assert states(a, "cpu") == {doomed: DELETING, kept: RUNNING}
    # Replica A dies here, its backlog and journal with it.

    b, _ = successor(h)
    with serving(b) as stub:
        # The cloud still throttles: the node is still there, and CA sees it leaving.
        assert live_ids(h) == {doomed, kept}
        assert states(stub, "cpu") == {doomed: DELETING, kept: RUNNING}
        assert target(stub, "cpu") == 1
        h.cloud.clear_faults()
        h.clock.advance(b.executor.terminator.retry_seconds)  # the backlog's own backoff
        b.refresh_now()
        assert live_ids(h) == {kept}
        b.refresh_now()
        assert states(stub, "cpu") == {kept: RUNNING}
        assert target(stub, "cpu") == 1
    assert b.executor.terminator.owing() == set()


def test_a_deletion_whose_mark_fails_is_refused_and_changes_nothing() -> None:
    h = harness()
    doomed, kept = two_nodes(h)
    h.cloud.inject("mark_deleting", TransientError("RequestLimitExceeded"), times=10**6)
    with serving(h.provider) as stub:
        with pytest.raises(grpc.RpcError) as info:
            delete(stub, "cpu", doomed)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "nothing was deleted" in (info.value.details() or "")
        h.run_workers()
        h.provider.refresh_now()
        assert states(stub, "cpu") == {doomed: RUNNING, kept: RUNNING}
        assert target(stub, "cpu") == 2
        assert h.cloud.calls["terminate"] == 0 and live_ids(h) == {doomed, kept}
        assert h.provider.journal.owed() == [] and h.provider.executor.terminator.owing() == set()
        h.cloud.clear_faults()
        delete(stub, "cpu", doomed)  # CA asks again
        h.run_workers()
        assert live_ids(h) == {kept}
        assert target(stub, "cpu") == 1


def test_a_mark_that_landed_unanswered_is_finished_by_reconcile() -> None:
    """The mark's answer is lost (a timeout): CA is refused, but the cloud carries the
    debt, so the node is shown leaving and terminated as soon as a listing shows it."""
    h = harness()
    doomed, kept = two_nodes(h)
    h.cloud.inject("mark_deleting", OutcomeUnknown("read timeout"), after=True)
    with serving(h.provider) as stub:
        with pytest.raises(grpc.RpcError) as info:
            delete(stub, "cpu", doomed)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        h.provider.refresh_now()
        assert live_ids(h) == {kept}
        assert states(stub, "cpu") == {doomed: DELETING, kept: RUNNING}
        assert target(stub, "cpu") == 1


def test_marks_that_landed_before_their_owner_died_are_paid_and_never_adopted() -> None:
    """A dies after writing the marks (of CA's deletion, and of a rollback of an attempt
    that never committed), before its terminate call. B never counts them as members nor
    holds room for them, does not wait out the orphan grace, and terminates them."""
    h = harness()
    doomed, kept = two_nodes(h)
    victim = next(i for i in h.live("cpu") if i.provider_id == doomed)
    (stray,) = h.cloud.launch(LaunchRequest("a-dead/0.0", "cpu", "us-east-1a", "m7i.large",
                                            1, OwnerTags("test", "cpu", "a-dead", "0.0",
                                                         CapacityType.ON_DEMAND)))
    h.cloud.mark_deleting([victim.id, stray.id], h.clock.now())  # then A died
    h.cloud.inject("terminate", TransientError("RequestLimitExceeded"), times=10**6)
    b, _ = successor(h)
    assert b.acting()
    assert [(n.provider_id, n.state) for n in b.fleet.view("cpu").nodes] == [
        (kept, NodeState.RUNNING), (doomed, NodeState.DELETING)]
    assert b.fleet.view("cpu").target_size == 1
    assert b.fleet.occupied()["cpu"] == 1  # no room held by nodes on their way out
    assert b.reconciler.suspects() == []  # nothing for a request to wait for
    assert b.executor.terminator.owing() == {victim.id, stray.id}
    h.cloud.clear_faults()
    h.clock.advance(b.executor.terminator.retry_seconds)
    b.refresh_now()
    assert {i.provider_id for i in h.live()} == {kept}


def test_every_termination_marks_its_instances_first() -> None:
    """Rollbacks, surpluses and CA's deletions alike: no terminate call reaches an
    instance whose debt is not written on it; a mark that fails holds the terminate back
    for the backlog, which marks again before it terminates."""
    h = harness()
    doomed, _ = two_nodes(h)
    h.cloud.inject("mark_deleting", TransientError("throttled"), times=10**6)
    victim = next(i for i in h.live("cpu") if i.provider_id == doomed)
    terminator = h.provider.executor.terminator
    assert terminator.terminate([victim.id], h.provider.executor.retrying()) is False
    assert h.cloud.calls["terminate"] == 0 and victim.id in terminator.owing()
    h.cloud.clear_faults()
    h.clock.advance(terminator.retry_seconds)
    h.provider.refresh_now()
    (gone,) = [i for i in h.cloud.all_instances() if i.id == victim.id]
    assert gone.state is InstanceState.TERMINATED and gone.marked_deleting
    assert terminator.owing() == set()


def test_a_standby_shows_a_debt_and_pays_it_only_once_it_leads() -> None:
    h = harness()
    doomed, kept = two_nodes(h)
    victim = next(i for i in h.live("cpu") if i.provider_id == doomed)
    h.cloud.mark_deleting([victim.id], h.clock.now())  # the leader marked it, then died
    leadership = Switchable(h.clock)
    b = Provider(h.provider.config, h.cloud, h.clock, pool=ManualPool(), runner=inline_runner,
                 leadership=leadership)
    b.refresh_now()
    assert not b.acting()
    assert {(n.provider_id, n.state) for n in b.fleet.view("cpu").nodes} == {
        (doomed, NodeState.DELETING), (kept, NodeState.RUNNING)}
    assert h.cloud.calls["terminate"] == 0 and b.executor.terminator.owing() == set()
    leadership.leading = True
    b.leadership_changed()
    b.refresh_now()
    assert live_ids(h) == {kept}


def test_a_deletion_whose_marks_are_being_written_counts_against_min_size() -> None:
    """Deletions are not serialized across their marks (CA sends several at once, and a
    GCP mark takes a second): one checked while another's marks are being written counts
    that one's nodes gone, so the two cannot take the group under minSize together; one
    whose marks failed holds nothing."""
    h = harness()
    h.provider.scaleups.increase("gpu-b", 2)  # minSize 1
    h.run_workers()
    first, second = sorted(n.provider_id for n in h.provider.fleet.view("gpu-b").nodes)
    real = h.cloud.mark_deleting
    refused: list[str] = []

    def meanwhile(instance_ids: Sequence[str], at: float) -> None:
        h.cloud.mark_deleting = real  # type: ignore[method-assign]
        try:
            h.provider.delete_nodes("gpu-b", [second])
        except FailedPrecondition as err:
            refused.append(str(err))
        real(instance_ids, at)

    h.cloud.mark_deleting = meanwhile  # type: ignore[method-assign]
    h.provider.delete_nodes("gpu-b", [first])
    assert len(refused) == 1 and "min size reached" in refused[0]
    h.run_workers()
    assert {i.provider_id for i in h.live("gpu-b")} == {second}

    h.provider.scaleups.increase("gpu-b", 1)
    h.run_workers()
    third = next(n.provider_id for n in h.provider.fleet.view("gpu-b").nodes
                 if n.provider_id != second)
    h.cloud.inject("mark_deleting", TransientError("throttled"), times=10**6)
    with pytest.raises(Unavailable):
        h.provider.delete_nodes("gpu-b", [third])
    h.cloud.clear_faults()
    h.provider.delete_nodes("gpu-b", [second])  # the refused deletion holds nothing back
    h.run_workers()
    assert {i.provider_id for i in h.live("gpu-b")} == {third}


def test_a_replica_deposed_before_it_terminates_what_ca_deleted_leaves_it_owed() -> None:
    """Adversary seed 763347279 (E1): CA's DeleteNodes was answered (the mark is on the
    instance), then the replica lost the lease before its worker terminated the node. The
    fence's NotLeader ended the worker's task; the termination must stay owed, here and on
    the instance, and be paid once this replica (or another) leads."""
    h = harness()
    doomed, kept = two_nodes(h)
    leadership = Switchable(h.clock)
    leadership.leading = True
    pool = ManualPool()
    a = Provider(h.provider.config, h.cloud, h.clock, pool=pool, runner=inline_runner,
                 leadership=leadership)
    a.refresh_now()
    a.delete_nodes("cpu", [doomed])
    leadership.leading = False  # deposed before the worker runs
    (future, _, _), = pool.queue
    pool.run_all()
    assert future.exception() is None
    assert live_ids(h) == {doomed, kept} and h.cloud.calls["terminate"] == 0
    victim = next(i for i in h.live("cpu") if i.provider_id == doomed)
    assert victim.id in a.executor.terminator.owing()
    assert victim.marked_deleting
    leadership.leading = True
    a.leadership_changed()
    h.clock.advance(a.executor.terminator.retry_seconds)
    a.refresh_now()
    assert live_ids(h) == {kept}
