"""Issue 59, item 2: what each team's capacity costs, after a scripted run through the
controller on our fake Kubernetes API and the simulated cloud: two namespaces, reserved and
on-demand nodes, one idle reserved node charged to its reservation's owner. The figures are
computed by hand below from the config's prices."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from provider.config.errors import ConfigError
from provider.config.load import load_config_text
from provider.controller import conditions as c
from provider.service.status import render, status
from tests.fakes.kube import objects
from tests.kit.controller import GPU_TOLERATION, World, create, kueue_request, running
from tests.kit.helpers import BASE_CONFIG

ON_DEMAND, RESERVED = 98.32, 40.0  # USD per node-hour: the config's price and price.reserved
CONFIG = BASE_CONFIG.replace("    price: {onDemand: 98.32}\n    labels: {team: research}\n",
                             f"    price: {{onDemand: {ON_DEMAND}, reserved: {RESERVED}}}\n"
                             "    labels: {team: research}\n") + \
    "costs: {reservationOwners: {r-gpu: ml}}\n"


@pytest.fixture
def w() -> Iterator[World]:
    assert "reserved: 40.0" in CONFIG
    yield from running(CONFIG)


def team(w: World) -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """(namespace, queue, source, use) -> (nodes, USD per hour), as the metrics endpoint
    says."""
    out: dict[tuple[str, str, str, str], list[float]] = {}
    for family in w.h.provider.metrics.registry.collect():
        for s in family.samples:
            if s.name in ("allset_team_nodes", "allset_team_spend_usd_per_hour"):
                key = (s.labels["namespace"], s.labels["queue"], s.labels["source"],
                       s.labels["use"])
                out.setdefault(key, [0.0, 0.0])[s.name == "allset_team_spend_usd_per_hour"] \
                    = s.value
    return {k: (v[0], round(v[1], 6)) for k, v in out.items()}


def request_in(w: World, namespace: str, name: str, workers: int) -> None:
    gpu = objects.pod_template(namespace, "workers", {"cpu": "8", "memory": "64Gi",
                                                      "nvidia.com/gpu": "1"},
                               {"example.com/gpu": "nvidia-h100-80gb"})
    gpu["template"]["spec"]["tolerations"] = GPU_TOLERATION
    w.kube.create(gpu)
    body = objects.provisioning_request(namespace, name, {"workers": workers})
    client.CustomObjectsApi(w.api).create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", namespace, "provisioningrequests", body)


def test_spend_by_team_source_and_use_equals_the_hand_computed_figures(w: World) -> None:
    # Team ml: one node, from r-gpu's three slots, booked for 60 s.
    create(w, pod_sets={"workers": 8}, bookingDurationSeconds="60")
    w.provision()
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]
    # Team vision: three nodes, the two slots left and one bought on demand.
    request_in(w, "vision", "cv", 24)
    w.sync(3)
    assert team(w) == {
        ("ml", "", "reserved", "booked"): (1, RESERVED),
        ("vision", "", "reserved", "booked"): (2, 2 * RESERVED),
        ("vision", "", "on-demand", "booked"): (1, ON_DEMAND),
    }
    # ml's booking ends and its node goes idle: r-gpu's owner, ml, is charged for it.
    w.h.clock.advance(70)
    w.sync(2)
    assert w.condition(c.BOOKING_EXPIRED).true  # type: ignore[union-attr]
    assert team(w) == {
        ("ml", "", "reserved", "idle"): (1, RESERVED),
        ("vision", "", "reserved", "booked"): (2, 2 * RESERVED),
        ("vision", "", "on-demand", "booked"): (1, ON_DEMAND),
    }
    text = render(status(w.h.provider))
    assert f"{'':<15}{'ml':<20}  {1:>5}  {RESERVED:>8,.2f}  {RESERVED:>10,.2f}" in text, text
    assert f"{'':<15}{'vision':<20}  {3:>5}  {2 * RESERVED + ON_DEMAND:>8,.2f}  " \
        f"{0:>10,.2f}" in text, text
    found = status(w.h.provider)["teamSpendPerHour"]
    assert {"namespace": "ml", "queue": "", "source": "reserved", "use": "idle", "nodes": 1,
            "usd": RESERVED} in found
    assert sum(t["usd"] for t in found) == round(4 * RESERVED - RESERVED + ON_DEMAND, 2)


def test_an_idle_node_of_a_reservation_without_owner_is_charged_to_nobody() -> None:
    for w in running(CONFIG.replace("costs: {reservationOwners: {r-gpu: ml}}\n", "")):
        create(w, pod_sets={"workers": 8}, bookingDurationSeconds="60")
        w.provision()
        w.h.clock.advance(70)
        w.sync(2)
        assert team(w) == {("", "", "reserved", "idle"): (1, RESERVED)}


def test_a_kueue_workloads_nodes_are_charged_to_its_queue(w: World) -> None:
    """A request Kueue's admission check made for a Workload of LocalQueue ml/gpu: its
    two nodes (r-gpu's slots) are charged to ml and that queue."""
    kueue_request(w, "wl", None, queue="gpu")
    w.provision()
    assert w.condition(c.PROVISIONED, "wl").true  # type: ignore[union-attr]
    assert team(w) == {("ml", "ml/gpu", "reserved", "booked"): (2, 2 * RESERVED)}


def test_a_reservation_owner_that_is_no_namespace_name_is_a_config_error() -> None:
    bad = CONFIG.replace("{r-gpu: ml}", "{r-gpu: ML_Team}")
    with pytest.raises(ConfigError) as info:
        load_config_text(bad, "costs.yaml")
    ((where, message),) = info.value.problems
    assert str(info.value).startswith("costs.yaml: ")
    assert where == "costs.reservationOwners.r-gpu" and "namespace name" in message
