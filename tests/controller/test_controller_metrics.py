"""Issue 34, item 4: what an operator tracks, as metrics (names, labels, values) and in
`allset status`, after a scripted run through the controller on our fake Kubernetes API and
the simulated cloud; issue 35, item 8: attempts by reason and idle nodes reused by group,
zone and source."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.fake import Stockout
from provider.controller import conditions as c
from provider.domain.cloud import CapacityType
from provider.service.status import render, status
from tests.fakes.kube import objects
from tests.kit.controller import GPU_TOLERATION, NS, World, create, live, running
from tests.kit.helpers import BASE_CONFIG

# The GPU group without its own 20 min unneeded time: the GPU default (30 s) applies.
CONFIG = BASE_CONFIG.replace("    options:\n      scaleDownUnneededTime: 20m\n"
                             "      scaleDownGpuUtilizationThreshold: 0.3\n", "")
PRICE = 98.32


@pytest.fixture
def w() -> Iterator[World]:
    assert CONFIG != BASE_CONFIG
    yield from running(CONFIG)


def value(w: World, name: str, **labels: str) -> float:
    found = w.h.provider.metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_the_figures_after_a_scripted_run(w: World) -> None:
    create(w, pod_sets={"workers": 32}, bookingDurationSeconds="60")  # 4 GPU nodes
    w.provision()
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    gang = live(w)
    reserved = [i for i in gang if i.tags.source is CapacityType.RESERVED]
    (bought,) = [i for i in gang if i.tags.source is CapacityType.ON_DEMAND]
    assert len(reserved) == 3 and bought.tags.node_group == "gpu"
    zone = "us-east-1a"
    # r-gpu's 3 slots of 8 GPUs are paid, up and busy (booked); r-cpu's have no GPUs.
    assert value(w, "allset_reserved_gpus", state="paid", zone=zone) == 24
    assert value(w, "allset_reserved_gpus", state="up", zone=zone) == 24
    assert value(w, "allset_reserved_gpus", state="busy", zone=zone) == 24
    assert value(w, "allset_spend_usd_per_hour", source="on-demand", group="gpu") == PRICE
    assert value(w, "allset_request_provisioned_seconds_count") == 1
    took = value(w, "allset_request_provisioned_seconds_sum")
    assert 1 <= took <= 20, took  # the simulated clock: a second per controller round

    # A request nothing can serve now: pending, and why.
    for z in ("us-east-1a", "us-east-1b"):
        w.h.cloud.set_stockout(Stockout(z, "p5.48xlarge", CapacityType.ON_DEMAND))
    # Its pods ask for us-east-1b, so the us-east-1a nodes the first booking leaves idle
    # below are no use to it (a request in backoff books idle nodes it can use at once).
    zone_b = objects.pod_template(NS, "bworkers", {"cpu": "8", "memory": "64Gi",
                                                   "nvidia.com/gpu": "1"},
                                  {"example.com/gpu": "nvidia-h100-80gb",
                                   "topology.kubernetes.io/zone": "us-east-1b"})
    zone_b["template"]["spec"]["tolerations"] = GPU_TOLERATION
    w.kube.create(zone_b)
    create(w, "big", pod_sets={"bworkers": 16})
    w.sync(3)
    w.controller._count_states()  # the resync loop's count
    assert value(w, "allset_pending_requests", reason="CapacityUnavailable") == 1
    assert value(w, "allset_pending_requests", reason="QuotaExceeded") == 0
    # Its attempts fell short for the reason its condition gives.
    counted = {(s.labels["outcome"], s.labels["reason"]): s.value
               for m in w.h.provider.metrics.registry.collect() for s in m.samples
               if s.name == "allset_attempts_total" and s.value}
    assert counted == {("succeeded", ""): 1, ("failed", "CapacityUnavailable"): 1}
    assert value(w, "allset_provisioning_requests", state="pending") == 1
    assert value(w, "allset_provisioning_requests", state="provisioned") == 1

    # The booking ends and the nodes go idle: the reserved ones stay up, not busy.
    w.h.clock.advance(70)
    w.sync(2)
    assert w.condition(c.BOOKING_EXPIRED).true  # type: ignore[union-attr]
    assert value(w, "allset_reserved_gpus", state="up", zone=zone) == 24
    assert value(w, "allset_reserved_gpus", state="busy", zone=zone) == 0

    # CA, whose --scale-down-unneeded-time is 10 min, deletes the idle on-demand node after
    # the GPU group's 30 s: 570 s of an H100 node saved.
    w.h.provider.note_ca_unneeded("gpu", 600.0)
    w.h.provider.delete_nodes("gpu", [bought.provider_id])
    assert value(w, "allset_scale_in_saved_usd_total", group="gpu") == \
        pytest.approx(570 / 3600 * PRICE)
    assert value(w, "allset_spend_usd_per_hour", source="on-demand", group="gpu") == 0
    w.h.provider.delete_nodes("cpu", [])  # a group with nothing to save: nothing counted
    assert value(w, "allset_scale_in_saved_usd_total", group="cpu") == 0

    # The next gang of three books the idle reserved nodes.
    create(w, "again", pod_sets={"workers": 24})
    w.sync(3)
    assert w.condition(c.PROVISIONED, "again").true  # type: ignore[union-attr]
    # By where they ran and what they were: no request's name in a label.
    assert value(w, "allset_nodes_reused_total", group="gpu", zone=zone,
                 source="reserved") == 3
    assert value(w, "allset_nodes_reused_total", group="gpu", zone=zone,
                 source="on-demand") == 0
    assert value(w, "allset_reserved_gpus", state="busy", zone=zone) == 24

    w.controller._count_states()
    found = status(w.h.provider)
    assert {"zone": zone, "paid": 24, "up": 24, "busy": 24} in found["reservedGpus"]
    assert found["pendingByReason"] == {"CapacityUnavailable": 1}
    assert found["nodesReused"] == 3
    assert found["scaleInSavedUsd"] == round(570 / 3600 * PRICE, 2)
    text = render(found)
    assert f"{zone:<12}    24    24    24  100%" in text, text
    assert "PENDING REQUESTS: CapacityUnavailable 1" in text
    assert "IDLE NODES REUSED: 3; SCALE-IN SAVED (estimate): USD 15.57" in text
