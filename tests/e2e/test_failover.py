"""Two `allset serve` replicas electing a leader on a real Lease (issue 14): the leader
SIGKILLed in the middle of a two-part attempt, then the new leader cut off from the API
server. Each time the other replica takes over, CA is served again soon after the lease
runs out, and no gang is launched twice or left behind. The replicas share one simulated
cloud (fake.shared), as replicas share a real one, and each has its own state directory
(an emptyDir per pod)."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from provider.wire import externalgrpc_pb2 as pb
from tests.e2e import kueue
from tests.e2e.allset import Allset
from tests.e2e.conftest import ALLSET_USER, World
from tests.e2e.look import admitted, live, of_group, of_request, workload_of
from tests.e2e.proxy import Relay
from tests.e2e.rest import wait_for
from tests.e2e.test_kueue_path import _placed_on_booked_nodes, _provisioned

LEASE_SECONDS, RENEW_DEADLINE = 15.0, 10.0
ELECTION = (f"leaderElection: {{mode: on, namespace: kube-system, name: allset, "
            f"leaseDuration: {LEASE_SECONDS:.0f}s, renewDeadline: {RENEW_DEADLINE:.0f}s, "
            f"retryPeriod: 2s}}\n")


class Replicas:
    def __init__(self, world: World) -> None:
        self.world = world
        self.made: list[tuple[Allset, Relay]] = []

    def new(self, name: str) -> tuple[Allset, Relay]:
        """A replica named allset-<name>, reaching the API server through its own relay."""
        cluster = self.world.cluster
        relay = Relay(cluster.api_port)
        kubeconfig = cluster.client_kubeconfig(f"allset-{name}",
                                               f"https://127.0.0.1:{relay.port}", ALLSET_USER)
        replica = Allset(self.world.allset.dir.parent / f"replica-{name}", kubeconfig,
                         state=self.world.allset.state, extra=ELECTION,
                         env={"POD_NAME": f"allset-{name}"})
        self.made.append((replica, relay))
        return replica, relay

    def holder(self) -> str:
        lease = self.world.cluster.rest.find("coordination.k8s.io/v1", "Lease", "allset",
                                             "kube-system")
        return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


@pytest.fixture
def replicas(world: World) -> Iterator[Replicas]:
    """The suite's own allset stops for these tests (it would act on the same requests)."""
    world.allset.stop()
    made = Replicas(world)
    try:
        yield made
    finally:
        for replica, relay in made.made:
            replica.stop()
            relay.close()
        world.allset.start()


def serves_ca(replica: Allset) -> Callable[[], bool]:
    stub = replica.stub()

    def probe() -> bool:
        try:
            stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="failover"), timeout=1)
            return True
        except grpc.RpcError:
            return False

    return probe


def epoch_of(attempt: str) -> int:
    found = re.match(r"^[ar](\d+)-", attempt)
    assert found, attempt
    return int(found.group(1))


def test_leader_killed_mid_attempt_then_the_standby_takes_over(world: World,
                                                             replicas: Replicas) -> None:
    rest = world.cluster.rest
    a, _ = replicas.new("a")
    # Two parts (the one reserved H100 of r-failover, then one on demand): die after one.
    a.start(failpoints="executor.part-launched=kill@1")
    wait_for("allset-a to lead", lambda: replicas.holder().startswith("allset-a"), 30)
    b, _ = replicas.new("b")
    b.start(standby=True)
    assert not serves_ca(b)(), "the standby must refuse CA while allset-a leads"
    spec = kueue.pod_spec({"allset.dev/node-group": "failover"}, {"nvidia.com/gpu": "8"})
    rest.create(kueue.job("failover", 2, spec))
    try:
        assert a.proc is not None and a.proc.popen is not None
        popen = a.proc.popen
        wait_for("allset-a to die at the failpoint", lambda: popen.poll() is not None, 90,
                 explain=a.log)
        killed = time.monotonic()
        assert popen.returncode == -signal.SIGKILL, a.log()
        half = live(of_group(world.kubelet.instances(), "failover"))
        assert half and not any(i.tags.committed for i in half), half

        wait_for("allset-b to serve CA", serves_ca(b), 60, explain=b.log)
        gap = time.monotonic() - killed
        print(f"\nfailover: CA served by the new leader {gap:.1f}s after the leader was "
              f"SIGKILLed (leaseDuration {LEASE_SECONDS:.0f}s)")
        assert gap <= LEASE_SECONDS + 8, f"{gap:.1f}s; allset-b's log:\n{b.log()}"
        assert replicas.holder().startswith("allset-b")

        _, request = _provisioned(world, "failover")
        wait_for("Kueue to admit failover", lambda: admitted(workload_of(rest, "failover")),
                 60, explain=b.log)
        placed = _placed_on_booked_nodes(world, "failover", request, 2)
        on = {p["spec"]["nodeName"] for p in placed}
        # allset-a's half gang is rolled back once its attempt's deadline has passed.
        wait_for("allset-a's half gang to be rolled back", lambda: {
            i.id for i in live(of_group(world.kubelet.instances(), "failover"))} == on, 90,
            explain=lambda: str(live(of_group(world.kubelet.instances(), "failover"))))
        gang = live(of_group(world.kubelet.instances(), "failover"))
        assert len({i.tags.attempt for i in gang}) == 1 and all(i.tags.committed for i in gang)
        assert epoch_of(gang[0].tags.attempt) > epoch_of(half[0].tags.attempt)
    finally:
        rest.delete("batch/v1", "Job", "failover", "default")

    # --- then the new leader is cut off from the API server -----------------------------
    a2, _ = replicas.new("a2")
    a2.start(standby=True)
    b_relay = replicas.made[1][1]
    before = {i.id for i in world.kubelet.instances()}
    b_relay.cut()
    cut = time.monotonic()
    wait_for("allset-b to stop acting", lambda: not serves_ca(b)(), 30, explain=b.log)
    stopped = time.monotonic() - cut
    wait_for("allset-a2 to take over", serves_ca(a2), 60, explain=a2.log)
    took_over = time.monotonic() - cut
    print(f"cut-off: allset-b stopped acting {stopped:.1f}s after losing the API server "
          f"(renewDeadline {RENEW_DEADLINE:.0f}s); allset-a2 served CA after {took_over:.1f}s")
    assert stopped <= RENEW_DEADLINE + 3 and stopped < took_over, \
        f"allset-b's log:\n{b.log()}\nallset-a2's log:\n{a2.log()}"
    spec = kueue.pod_spec({"allset.dev/node-group": "failover"}, {"nvidia.com/gpu": "8"})
    rest.create(kueue.job("failover-2", 1, spec))
    try:
        _, request = _provisioned(world, "failover-2")
        meta = request["metadata"]
        mine = live(of_request(world.kubelet.instances(), meta["namespace"], meta["name"]))
        assert len(mine) == 1 and mine[0].id not in before
        new = [i for i in world.kubelet.instances() if i.id not in before]
        # Nothing launched by the cut-off leader, and the one gang launched once.
        assert {i.tags.attempt for i in new} == {mine[0].tags.attempt}, new
        assert epoch_of(mine[0].tags.attempt) > epoch_of(gang[0].tags.attempt)
        b_relay.restore()
        wait_for("allset-b to be the standby again", lambda: "standby" in _refusal(b), 30,
                 explain=b.log)
    finally:
        rest.delete("batch/v1", "Job", "failover-2", "default")


def _refusal(replica: Allset) -> str:
    try:
        replica.stub().NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="failover"),
                                           timeout=1)
        return ""
    except grpc.RpcError as err:
        return str(err.details() or "")
