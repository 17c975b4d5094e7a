"""Crash safety: the service, as a subprocess on the simulated cloud, is killed with
SIGKILL at every step boundary of a multi-part attempt, then restarted. Whatever the
crash point, and whether or not its --state-dir survived: no orphan instance, nothing
launched twice, and target sizes equal to what exists."""

from __future__ import annotations

import shutil
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from adapters.fake.store import FakeStore
from provider.domain.cloud import InstanceState
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import wait_until
from tests.kit.serve_process import ServeProcess

CONFIG = """\
cluster: crash
refreshInterval: 1s
reconcile: {{orphanGrace: 1s}}
cloud:
  provider: fake
  fake:
    statePath: {state}
    launchLatencySeconds: 0.05
    reservations:
      - {{id: r-a, zone: us-east-1a, instanceType: p5.48xlarge, count: 2}}
      - {{id: r-b, zone: us-east-1a, instanceType: p5.48xlarge, count: 1}}
    stockouts: {stockouts}
nodeGroups:
  - id: gpu
    zone: us-east-1a
    instanceType: p5.48xlarge
    gpu: {{type: nvidia-h100-80gb, count: 8}}
    cpu: 191
    memory: 1900Gi
    maxSize: 8
    price: {{onDemand: 98.32}}
"""
STOCKOUT = "[{zone: us-east-1a, instanceType: p5.48xlarge, capacityType: on-demand}]"


@dataclass(frozen=True)
class Scenario:
    point: str  # the failpoint armed, ALLSET_FAILPOINTS syntax
    fails: bool  # on-demand stocked out: the attempt rolls back
    committed: bool  # the crash came after the commit tag


# One scale-up of 5 nodes = three parts: r-b (1), r-a (2) and on-demand (2).
SCENARIOS = [
    Scenario("executor.recorded=kill@1", fails=False, committed=False),
    Scenario("executor.part-launched=kill@1", fails=False, committed=False),
    Scenario("executor.part-launched=kill@2", fails=False, committed=False),
    Scenario("executor.before-commit=kill@1", fails=False, committed=False),
    Scenario("executor.committed=kill@1", fails=False, committed=True),
    Scenario("executor.rollback-started=kill@1", fails=True, committed=False),
    Scenario("executor.part-rolled-back=kill@1", fails=True, committed=False),
]
COVERED: list[str] = []


def stub_for(address: str) -> pb_grpc.CloudProviderStub:
    return pb_grpc.CloudProviderStub(grpc.insecure_channel(address))


# Two children and their waits, each bounded (tests.kit.serve_process) so that a child that
# hangs fails with its stacks and log before pytest's own timeout would cut it short.
@pytest.mark.timeout(240)
@pytest.mark.parametrize("wipe_state", [False, True], ids=["state-kept", "state-wiped"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.point for s in SCENARIOS])
def test_crash_at_every_step(tmp_path: Path, scenario: Scenario, wipe_state: bool) -> None:
    cloud_db = tmp_path / "cloud.db"
    config = tmp_path / "allset.yaml"
    config.write_text(CONFIG.format(state=cloud_db,
                                    stockouts=STOCKOUT if scenario.fails else "[]"))
    state_dir = tmp_path / "state"
    service = ServeProcess(tmp_path, config, state_dir)

    proc, address = service.start(scenario.point)
    try:
        stub_for(address).NodeGroupIncreaseSize(
            pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=5), timeout=30)
    except grpc.RpcError as err:
        # The attempt runs after the call is accepted; a kill at its first steps can land
        # before the reply is written (CA then sees UNAVAILABLE and asks again). Anything
        # else is a failure; the process must still have died at the failpoint.
        assert err.code() is grpc.StatusCode.UNAVAILABLE, err
    assert service.wait(proc) == -signal.SIGKILL, "the failpoint was never reached"
    launched_before = cloud_instances(cloud_db)
    running_before = [i for i in launched_before if i.state is not InstanceState.TERMINATED]
    if scenario.point.startswith(("executor.part-launched", "executor.before-commit",
                                  "executor.part-rolled-back")):
        # The crash left uncommitted nodes running: the restart must find them.
        assert running_before and not any(i.tags.committed for i in running_before)
    if scenario.committed:
        assert len(running_before) == 5 and all(i.tags.committed for i in running_before)
    if wipe_state:
        shutil.rmtree(state_dir)

    proc, address = service.start()  # no failpoint: reconcile runs before serving
    try:
        # Uncommitted nodes are rolled back once seen so for the grace period (1s here).
        wait_until(lambda: all(i.tags.committed for i in cloud_instances(cloud_db)
                               if i.state is not InstanceState.TERMINATED), timeout=30)
        stub = stub_for(address)
        target = stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="gpu")).targetSize
        listed = {i.id for i in stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id="gpu")).instances}
    finally:
        code = service.stop(proc)
    assert code == 0, f"allset serve did not stop in order (status {code}):\n" \
        f"{service.log_tail()}"

    after = cloud_instances(cloud_db)
    live = [i for i in after if i.state is not InstanceState.TERMINATED]
    # No orphan: whatever is still running is committed and CA sees it.
    assert all(i.tags.committed for i in live), [i.id for i in live if not i.tags.committed]
    assert {i.provider_id for i in live} == listed
    assert target == len(live)
    # All or nothing: the whole gang of 5, or none of it.
    assert len(live) == (5 if scenario.committed else 0)
    # Nothing launched twice: the restart launched nothing, and no part has extra nodes.
    assert {i.id for i in after} == {i.id for i in launched_before}
    per_part = Counter((i.tags.attempt, i.tags.part) for i in after)
    sizes = {"0.0": 1, "0.1": 2, "0.2": 2}
    assert all(n == sizes[part] for (_, part), n in per_part.items()), per_part
    COVERED.append(f"{scenario.point} ({'state wiped' if wipe_state else 'state kept'})")


def cloud_instances(path: Path) -> list:  # type: ignore[type-arg]
    store = FakeStore(path)
    try:
        instances, _ = store.load()
    finally:
        store.close()
    return instances
