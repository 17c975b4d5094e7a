"""A gang on GCE whose VM the cloud stops: the controller on our fake Kubernetes API, a
Provider with the real GCP adapter (google-cloud-compute) on the fake Compute API. A
stopped VM (TERMINATED) still exists and bills for its disks until deleted
(tests/fakes/gce/model.py, ``Compute.stop``), so it is a lost node of its gang, and deleted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kubernetes import client

from provider.controller import conditions as c
from provider.controller.controller import Controller
from provider.controller.kube import KubeApi
from provider.controller.requests import Backoff
from tests.fakes.gce import Compute
from tests.fakes.gce.model import InstanceRec
from tests.fakes.kube import FakeKube, objects
from tests.kit.controller import NS, templates
from tests.kit.gcp import Served, gcp, provider_on

NODES_LOST = "NodesLost"


@dataclass
class GceWorld:
    compute: Compute
    served: Served
    kube: FakeKube
    controller: Controller

    def sync(self, rounds: int = 6) -> None:
        for _ in range(rounds):
            self.served.provider.refresh_now()
            self.controller.sync_once()
            self.served.h.clock.advance(1)

    def condition(self, ctype: str) -> c.Condition | None:
        got = self.kube.get("provisioningrequests", "job", NS) or {}
        return c.read((got.get("status") or {}).get("conditions")).get(ctype)

    def gang(self) -> list[InstanceRec]:
        return [i for i in self.compute.live() if i.labels.get("allset-request-uid")]

    def register_nodes(self) -> None:
        for inst in self.compute.live():
            if self.kube.get("nodes", inst.name) is None:
                self.kube.create(objects.node(
                    inst.name, provider_id=f"gce://proj/{inst.zone}/{inst.name}", ready=True))


@contextmanager
def gce_world() -> Iterator[GceWorld]:
    compute = Compute()
    with gcp(compute) as h:
        served = provider_on(h)

        def now() -> dt.datetime:
            return dt.datetime.fromtimestamp(h.clock.now(), dt.UTC)

        with FakeKube(clock=now) as kube, kube.client() as api:
            controller = Controller(served.provider, KubeApi(api), workers=1,
                                    backoff=Backoff(60, 600))
            templates(kube)
            body = objects.provisioning_request(NS, "job", {"workers": 16},
                                                parameters={"bookingDurationSeconds": "900"})
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests", body)
            try:
                yield GceWorld(compute, served, kube, controller)
            finally:
                controller.stop()


def test_a_gang_vm_stopped_before_it_is_provisioned_is_lost_and_the_gang_deleted() -> None:
    with gce_world() as w:
        w.sync()
        gang = w.gang()
        assert len(gang) == 2  # 16 GPUs: two a3-highgpu-8g
        w.register_nodes()
        w.served.h.clock.advance(61)  # past the fleet's listing grace
        w.compute.stop(gang[0].zone, gang[0].name)
        w.sync(3)
        provisioned = w.condition(c.PROVISIONED)
        assert provisioned is not None and not provisioned.true
        assert provisioned.reason == NODES_LOST and gang[0].name in provisioned.message
        # Both deleted: the one still running (no half gang) and the stopped one (it bills).
        assert w.compute.live() == []


def test_a_provisioned_gang_whose_vm_is_stopped_is_revoked_and_the_vm_deleted() -> None:
    with gce_world() as w:
        w.sync()
        w.register_nodes()
        w.sync(3)
        assert (w.condition(c.PROVISIONED) or c.Condition("", "", "", "", "")).true
        stopped, running = sorted(w.gang(), key=lambda i: i.name)
        w.served.h.clock.advance(61)
        w.compute.stop(stopped.zone, stopped.name, suspend=True)
        w.sync(2)
        revoked = w.condition(c.CAPACITY_REVOKED)
        assert revoked is not None and revoked.true and revoked.reason == NODES_LOST
        assert stopped.name in revoked.message
        # The running one may still run the workload's pods until Kueue evicts it: kept.
        assert [i.name for i in w.compute.live()] == [running.name]
