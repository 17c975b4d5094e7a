"""Issue 31, finding 1: a deposed leader's late write must not change what the cloud does.

Two replicas as deploy/ runs them: each a Provider with the real elector on a Lease of one
fake API server, its own Controller and Kubernetes client, one simulated cloud. The
leader's status write that records its attempt is held at the API server (a partition, a
slow proxy); it is deposed, the other replica takes over, launches, commits and
Provisions the gang; then the held write lands. The gang must survive it."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.attempts.ids import attempt_id, epoch_of, later_epoch
from provider.base.clock import ManualClock
from provider.controller import conditions as c
from provider.controller.controller import Controller
from provider.controller.gang import ATTEMPT_DETAIL, PLANNED_DETAIL
from provider.controller.kube import KubeApi, unsent_only, write_timeout_for
from provider.controller.requests import Backoff
from provider.controller.writes import Writer, _may_record
from provider.leadership.elector import LeaderElector, NotLeader, Timing
from provider.leadership.kube import KubeLeaseStore
from tests.fakes.kube import FakeKube, objects
from tests.kit.controller import NS, templates
from tests.kit.helpers import ManualPool, config

TIMING = Timing(15.0, 10.0, 2.0)  # client-go's defaults, as deploy/ runs them


@dataclass
class Replica:
    provider: Provider
    elector: LeaderElector
    controller: Controller


@dataclass
class Two:
    kube: FakeKube
    cloud: FakeCloud
    clock: ManualClock
    a: Replica
    b: Replica

    def details(self, name: str = "job") -> dict[str, str]:
        got = self.kube.get("provisioningrequests", name, NS) or {}
        return dict((got.get("status") or {}).get("provisioningClassDetails") or {})

    def provisioned(self, name: str = "job") -> bool:
        got = self.kube.get("provisioningrequests", name, NS) or {}
        cond = c.read((got.get("status") or {}).get("conditions")).get(c.PROVISIONED)
        return cond is not None and cond.true

    def register_nodes(self) -> None:
        for inst in self.cloud.live_instances():
            if self.kube.get("nodes", inst.name) is None:
                self.kube.create(objects.node(inst.name, provider_id=inst.provider_id))

    def lead(self, r: Replica, rounds: int = 10) -> None:
        """The replica renews and acts a second at a time."""
        for _ in range(rounds):
            r.elector.step()
            r.provider.refresh_now()
            r.controller.sync_once()
            self.clock.advance(1)


def replica(name: str, api: client.ApiClient, cloud: FakeCloud, clock: ManualClock
            ) -> Replica:
    box: list[Provider] = []
    elector = LeaderElector(KubeLeaseStore(api, "kube-system", "allset"), name, clock, TIMING,
                            on_change=lambda _: box[0].leadership_changed() if box else None)
    provider = Provider(config(), cloud, clock, pool=ManualPool(), runner=inline_runner,
                        leadership=elector)
    box.append(provider)
    kube = KubeApi(api, write_timeout=write_timeout_for(15.0, 10.0, 2.0))
    return Replica(provider, elector, Controller(provider, kube, workers=1,
                                                 backoff=Backoff(60, 600)))


@pytest.fixture
def two() -> Iterator[Two]:
    clock = ManualClock()
    cloud = create_adapter(config(), clock)
    assert isinstance(cloud, FakeCloud)

    def now() -> dt.datetime:
        return dt.datetime.fromtimestamp(clock.now(), dt.UTC)

    with FakeKube(clock=now) as kube, kube.client(unsent_only()) as api_a, \
            kube.client(unsent_only()) as api_b:
        a, b = replica("pod-a", api_a, cloud, clock), replica("pod-b", api_b, cloud, clock)
        assert a.elector.step() and not b.elector.step()
        for r in (a, b):
            r.provider.refresh_now()
        assert a.provider.acting()
        yield Two(kube, cloud, clock, a, b)
        for r in (a, b):
            r.controller.stop()
            r.provider.stop()


def create_request(kube: FakeKube, name: str = "job") -> None:
    templates(kube)
    kube.create(objects.provisioning_request(NS, name, {"ps": 2, "workers": 16}))


def test_a_deposed_leaders_late_attempt_record_leaves_the_provisioned_gang(two: Two) -> None:
    a, b, clock = two.a, two.b, two.clock
    create_request(two.kube)
    held = two.kube.hold("update", "provisioningrequests/status", "job")
    # a plans its attempt and writes its record; the write is stuck at the API server.
    worker = threading.Thread(target=a.controller.sync_once, daemon=True)
    worker.start()
    assert held.arrived.wait(10)
    assert two.cloud.live_instances() == []

    # a renews no more; b takes the lease once it has run out, lists, and acts.
    clock.advance(TIMING.lease_duration + 1)
    assert b.elector.step() and not a.provider.acting()
    two.lead(b, 4)
    assert b.provider.acting()
    two.lead(b, 10)
    two.register_nodes()
    two.lead(b, 5)
    assert two.provisioned()
    gang = {i.id for i in two.cloud.live_instances()}
    assert len(gang) == 4  # 16 GPUs on 2 nodes, 2 parameter servers
    recorded = two.details()
    assert epoch_of(recorded[ATTEMPT_DETAIL]) == b.elector.epoch == 1
    assert recorded[PLANNED_DETAIL] == "4"

    # The held write lands now; a's client re-reads on the Conflict and must write nothing.
    held.release()
    assert held.answered.wait(10)
    worker.join(30)
    assert not worker.is_alive()
    assert two.details() == recorded

    # b's next passes: its own committed gang, never taken for an earlier attempt's strays.
    two.lead(b, 20)
    assert {i.id for i in two.cloud.live_instances()} == gang
    assert two.details() == recorded and two.provisioned()


def test_a_conflict_re_read_after_deposition_is_not_written_again(two: Two) -> None:
    """The fence is asked before every try, not once per pass: the lease passes while
    the first try conflicts, and the re-read is not written again."""
    a, clock = two.a, two.clock
    create_request(two.kube)
    two.lead(a, 1)  # a records its attempt and launches
    stored = two.kube.get("provisioningrequests", "job", NS)
    assert stored is not None and a.provider.acting()

    def another_writer_then_the_lease_passes(obj: dict[str, Any]) -> None:
        obj.setdefault("metadata", {}).setdefault("labels", {})["touched"] = "yes"
        clock.advance(TIMING.lease_duration + 1)

    two.kube.race("provisioningrequests", "job", another_writer_then_the_lease_passes, NS)
    writer = Writer(a.controller._kube, clock)
    with pytest.raises(NotLeader):
        writer.update(stored, [(c.ACCEPTED, True, "Accepted", "late")],
                      details={ATTEMPT_DETAIL: attempt_id("r", 0)})
    after = two.kube.get("provisioningrequests", "job", NS) or {}
    assert after["metadata"]["labels"]["touched"] == "yes"  # the conflict happened
    assert after["status"] == stored["status"]  # nothing of the late write
    assert not a.provider.acting()


def test_a_record_of_an_older_epoch_never_replaces_a_later_one() -> None:
    old, new = attempt_id("r", 3), attempt_id("r", 4)
    assert later_epoch(new, old) and not later_epoch(old, new)
    assert not _may_record("ml/job", {ATTEMPT_DETAIL: new}, {ATTEMPT_DETAIL: old})
    assert _may_record("ml/job", {ATTEMPT_DETAIL: old}, {ATTEMPT_DETAIL: new})
    assert _may_record("ml/job", {ATTEMPT_DETAIL: new}, {ATTEMPT_DETAIL: new})
    assert _may_record("ml/job", {ATTEMPT_DETAIL: new}, {ATTEMPT_DETAIL: None})  # a rollback
    # An id of an older release carries no epoch: it cannot be ordered, so it is not refused.
    assert _may_record("ml/job", {ATTEMPT_DETAIL: "r-5f0c2a9e41b7"}, {ATTEMPT_DETAIL: old})
    assert epoch_of("r-5f0c2a9e41b7") is None and epoch_of(old) == 3


def test_every_call_is_bounded_below_the_renew_deadline() -> None:
    # The whole try must end before a successor may act: lease - renew deadline.
    assert write_timeout_for(15.0, 10.0, 2.0) == 2.0
    assert write_timeout_for(15.0, 14.5, 2.0) == 1.0  # never below a second
    retry = unsent_only()
    assert retry.read == 0 and retry.status == 0 and retry.other == 0 and retry.connect == 3


def test_each_write_carries_its_timeout(two: Two) -> None:
    seen: list[Any] = []
    kube = two.a.controller._kube
    custom = kube._custom
    real = custom.replace_namespaced_custom_object_status

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("_request_timeout"))
        return real(*args, **kwargs)

    custom.replace_namespaced_custom_object_status = spy
    create_request(two.kube)
    two.lead(two.a, 3)
    assert seen and all(t == 2.0 for t in seen)
