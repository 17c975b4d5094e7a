"""Two `allset serve` replicas electing a leader on a real Lease (issue 14): the leader
SIGKILLed in the middle of a two-part attempt, then the new leader cut off from the API
server. Each time the other replica takes over, CA is served again soon after the lease
runs out, and no gang is launched twice or left behind. Then a partition with a write in
flight (issue 31): the leader's attempt record is held at a proxy until the other replica
has Provisioned the gang, then sent; it is refused and the gang lives on. The replicas
share one simulated cloud (fake.shared), as replicas share a real one, and each has its
own state directory (an emptyDir per pod). Last, the documented inspection path (issue 35)
on both replicas: the admin socket in each pod and the operator certificate on the port."""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from provider.controller.gang import ATTEMPT_DETAIL, PLANNED_DETAIL
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.e2e import kueue
from tests.e2e.allset import ROOT, Allset
from tests.e2e.conftest import ALLSET_USER, World
from tests.e2e.holding_proxy import HoldingProxy
from tests.e2e.look import (
    PROVREQ,
    admitted,
    live,
    of_group,
    of_request,
    pods_of,
    scale_in,
    workload_of,
)
from tests.e2e.proxy import Relay
from tests.e2e.rest import wait_for
from tests.e2e.test_kueue_path import _placed_on_booked_nodes, _provisioned

LEASE_SECONDS, RENEW_DEADLINE = 15.0, 10.0
ELECTION = (f"leaderElection: {{mode: on, namespace: allset, name: allset, "
            f"leaseDuration: {LEASE_SECONDS:.0f}s, renewDeadline: {RENEW_DEADLINE:.0f}s, "
            f"retryPeriod: 2s}}\n")


class Replicas:
    def __init__(self, world: World) -> None:
        self.world = world
        self.made: list[tuple[Allset, Relay | HoldingProxy]] = []

    def new(self, name: str) -> tuple[Allset, Relay]:
        """A replica named allset-<name>, reaching the API server through its own relay."""
        cluster = self.world.cluster
        relay = Relay(cluster.api_port)
        kubeconfig = cluster.client_kubeconfig(f"allset-{name}",
                                               f"https://127.0.0.1:{relay.port}", ALLSET_USER)
        return self._replica(name, kubeconfig, relay), relay

    def held(self, name: str) -> tuple[Allset, HoldingProxy]:
        """A replica named allset-<name>, reaching the API server through a holding proxy
        that presents its certificate (allset's ServiceAccount, deploy's RBAC)."""
        cluster = self.world.cluster
        proxy = HoldingProxy(cluster.api_port, cluster.pki.ca,
                             cluster.pki.issue(f"allset-{name}", ALLSET_USER))
        kubeconfig = proxy.kubeconfig(cluster.dir / f"allset-{name}.kubeconfig")
        return self._replica(name, kubeconfig, proxy), proxy

    def _replica(self, name: str, kubeconfig: Path, door: Relay | HoldingProxy) -> Allset:
        replica = Allset(self.world.allset.dir.parent / f"replica-{name}", kubeconfig,
                         state=self.world.allset.state, extra=ELECTION,
                         env={"POD_NAME": f"allset-{name}"})
        self.made.append((replica, door))
        return replica

    def holder(self) -> str:
        lease = self.world.cluster.rest.find("coordination.k8s.io/v1", "Lease", "allset",
                                             "allset")
        return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


@pytest.fixture
def replicas(world: World) -> Iterator[Replicas]:
    """The suite's own allset stops for these tests (it would act on the same requests),
    once CA has scaled in what an earlier scenario left in the group: each scenario here
    must see its gang launched."""
    scale_in(world.allset.stub(), world.kubelet.instances, "failover")
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
    wait_for("failover's pods to go", lambda: not pods_of(rest, "failover"), 60)
    scale_in(b.stub(), world.kubelet.instances, "failover")
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


def test_a_deposed_leaders_late_attempt_record_leaves_the_provisioned_gang(
        world: World, replicas: Replicas) -> None:
    """Issue 31, finding 1 on the real parts (tests/controller/test_fenced_writes.py is the
    same on the fake API server). allset-a's status write that records its attempt, the
    request's first (it carries Accepted too, and goes before the attempt's first cloud
    call), is held at its proxy, and allset-a is cut off the API server as it arrives.
    allset-b takes over and Provisions the gang; then the held write is sent. The API
    server must refuse it (its resourceVersion is stale), and the gang must live on."""
    rest = world.cluster.rest
    a, door = replicas.held("a")
    a.start()
    wait_for("allset-a to lead", lambda: replicas.holder().startswith("allset-a"), 30)
    b, _ = replicas.new("b")
    b.start(standby=True)
    job = "partition"
    held = door.hold("PUT", rf"/provisioningrequests/job-{job}-[^/?]+/status(\?|$)", cut=True)
    spec = kueue.pod_spec({"allset.dev/node-group": "failover"}, {"nvidia.com/gpu": "8"})
    rest.create(kueue.job(job, 2, spec))
    try:
        assert held.arrived.wait(90), f"allset-a's log:\n{a.log()}"
        stale = _details(held.body)[ATTEMPT_DETAIL]
        wait_for("allset-a to stop acting", lambda: not serves_ca(a)(), 30, explain=a.log)
        stopped = time.monotonic() - held.at
        wait_for("allset-b to serve CA", serves_ca(b), 60, explain=b.log)
        took_over = time.monotonic() - held.at
        assert replicas.holder().startswith("allset-b")

        _, request = _provisioned(world, job)
        provisioned = time.monotonic() - held.at
        meta, details = request["metadata"], request["status"]["provisioningClassDetails"]
        gang = live(of_request(world.kubelet.instances(), meta["namespace"], meta["name"]))
        ids = {i.id for i in gang}
        assert len(gang) == 2 and all(i.tags.committed for i in gang), gang
        assert {i.tags.attempt for i in gang} == {details[ATTEMPT_DETAIL]}
        assert epoch_of(details[ATTEMPT_DETAIL]) > epoch_of(stale), (details, stale)
        assert details[PLANNED_DETAIL] == "2"
        # allset-a's attempt never reached the cloud: its record was never written.
        assert not [i for i in world.kubelet.instances() if i.tags.attempt == stale]

        # allset-a reconnects, and its write, held until now, reaches the API server.
        door.restore()
        door.release()
        assert held.status == 409, (held.status, held.answer[:500])

        def recorded() -> dict[str, str]:
            now = rest.get(f"{PROVREQ}/v1", "ProvisioningRequest", meta["name"],
                           meta["namespace"])
            return dict(now["status"]["provisioningClassDetails"])

        assert recorded() == details
        # Two renew deadlines: allset-b's passes over the request and its gang go on, and
        # allset-a, reconnected, is the standby.
        until = time.monotonic() + 2 * RENEW_DEADLINE
        while time.monotonic() < until:
            now = {i.id for i in live(of_request(world.kubelet.instances(),
                                                 meta["namespace"], meta["name"]))}
            assert now == ids, f"{ids - now} terminated; allset-b's log:\n{b.log()}"
            time.sleep(1)
        assert recorded() == details
        wait_for("allset-a to be the standby", lambda: "standby" in _refusal(a), 30,
                 explain=a.log)
        assert replicas.holder().startswith("allset-b")

        wait_for(f"Kueue to admit {job}", lambda: admitted(workload_of(rest, job)), 60,
                 explain=b.log)
        placed = _placed_on_booked_nodes(world, job, request, 2)
        assert {p["spec"]["nodeName"] for p in placed} == ids
        print(f"\npartition: allset-a's attempt record held at its proxy and allset-a cut "
              f"off; it stopped acting {stopped:.1f}s later, allset-b served CA after "
              f"{took_over:.1f}s and Provisioned the gang after {provisioned:.1f}s "
              f"(epoch {epoch_of(stale)} -> {epoch_of(details[ATTEMPT_DETAIL])}); the held "
              f"write, released then, was answered {held.status}, and the gang of "
              f"{len(ids)} lived on for {2 * RENEW_DEADLINE:.0f}s and runs the Job's pods")
    finally:
        rest.delete("batch/v1", "Job", job, "default")


def _details(body: bytes) -> dict[str, str]:
    """The class details a status write carries."""
    return dict(json.loads(body)["status"]["provisioningClassDetails"])


def _refusal(replica: Allset) -> str:
    try:
        replica.stub().NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="failover"),
                                           timeout=1)
        return ""
    except grpc.RpcError as err:
        return str(err.details() or "")


def _deployed_identities() -> dict[str, str]:
    """What deploy/ gives each client: the commonNames of its Certificates and the flags
    the Deployment serves with (so this test follows the manifests, not a copy of them)."""
    base = ROOT / "deploy" / "kubernetes" / "base"
    names = {doc["metadata"]["name"]: doc["spec"]["commonName"]
             for doc in yaml.safe_load_all((base / "certificates.yaml").read_text())
             if doc and doc.get("kind") == "Certificate" and "commonName" in doc["spec"]}
    deployment = yaml.safe_load((base / "deployment.yaml").read_text())
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in args if "=" in a)
    assert flags["autoscaler-cn"] == names["allset-client"]
    assert flags["operator-cn"] == names["allset-operator"]
    return {"ca": names["allset-client"], "operator": names["allset-operator"],
            "socket": Path(flags["admin-socket"]).name}


def _allset(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script, as an operator runs it (in the pod, or at a workstation)."""
    return subprocess.run([sys.executable, "-m", "provider.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


def test_the_documented_inspection_path_on_both_replicas(world: World,
                                                         replicas: Replicas) -> None:
    """Issue 35, items 1 and 2, on the real Lease: `kubectl exec <pod> -- allset status
    --server unix:/run/allset/admin.sock` answers on each replica with no certificate (the
    standby saying who leads), and on the mTLS port the operator certificate deploy/ issues
    reads status where CA's is refused, and may not change the cloud."""
    deployed = _deployed_identities()
    pki = world.cluster.pki
    server = pki.issue("allset-serving", "allset.allset.svc", server=True)
    ca_client = pki.issue("allset-ca-client", deployed["ca"])
    operator = pki.issue("allset-operator", deployed["operator"])
    made: list[Allset] = []
    for name in ("a", "b"):
        replica, _ = replicas.new(name)
        replica.tls_args = ["--tls-cert", str(server.cert), "--tls-key", str(server.key),
                            "--tls-client-ca", str(pki.ca),
                            f"--autoscaler-cn={deployed['ca']}",
                            f"--operator-cn={deployed['operator']}"]
        replica.credentials = grpc.ssl_channel_credentials(
            pki.ca.read_bytes(), ca_client.key.read_bytes(), ca_client.cert.read_bytes())
        replica.admin_socket = replica.dir / deployed["socket"]
        made.append(replica)
    a, b = made
    a.start()
    wait_for("allset-a to lead", lambda: replicas.holder().startswith("allset-a"), 30)
    b.start(standby=True)

    # Inside each pod: the Unix socket, no certificate, 0600.
    seen = {}
    for replica in made:
        assert replica.admin_socket is not None
        assert stat.S_IMODE(replica.admin_socket.stat().st_mode) == 0o600
        out = _allset("status", "--server", f"unix:{replica.admin_socket}", "--output", "json")
        assert out.returncode == 0, out.stderr
        seen[replica] = json.loads(out.stdout)
    leader, standby = seen[a], seen[b]
    # The Lease holder is the pod's name and a per-process suffix.
    assert leader["acting"] and leader["replica"].startswith("allset-a_"), leader
    assert leader["leader"] == leader["replica"] == replicas.holder()
    assert not standby["acting"] and standby["replica"].startswith("allset-b_"), standby
    assert standby["leader"] == leader["replica"] in standby["notActingBecause"], standby
    text = _allset("status", "--server", f"unix:{b.admin_socket}")
    assert text.returncode == 0, text.stderr
    assert f"replica: {standby['replica']}, leader: {leader['replica']}" in text.stdout, \
        text.stdout

    # At a workstation (kubectl port-forward to a pod): the mTLS port, by identity.
    tls = ["--server", a.address, "--server-name", "localhost", "--cacert", str(pki.ca)]
    as_operator = _allset("status", *tls, "--cert", str(operator.cert),
                          "--key", str(operator.key), "--output", "json")
    assert as_operator.returncode == 0, as_operator.stderr
    assert json.loads(as_operator.stdout)["acting"] is True
    as_ca = _allset("status", *tls, "--cert", str(ca_client.cert), "--key", str(ca_client.key))
    assert as_ca.returncode == 1 and as_ca.stderr.count("\n") == 1, as_ca.stderr
    assert "PERMISSION_DENIED" in as_ca.stderr and f"CN={deployed['ca']}" in as_ca.stderr
    # CA's certificate still serves CA; the operator's may not scale a group.
    assert a.stub().NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
    operator_stub = pb_grpc.CloudProviderStub(grpc.secure_channel(
        a.address, grpc.ssl_channel_credentials(pki.ca.read_bytes(), operator.key.read_bytes(),
                                                operator.cert.read_bytes()),
        options=[("grpc.ssl_target_name_override", "localhost")]))
    with pytest.raises(grpc.RpcError) as refused:
        operator_stub.NodeGroupIncreaseSize(
            pb.NodeGroupIncreaseSizeRequest(id="failover", delta=1), timeout=5)
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert f"CN={deployed['operator']}" in (refused.value.details() or "")
