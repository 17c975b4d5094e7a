"""Topology from the gang schedulers' PodGroups (provider/domain/gangs/topology.py): KAI's
topologyConstraint with the levels of KAI's topology guide (docs/topology/README.md:
block, rack and hostname labels of cluster-topology), Volcano's networkTopology as its
network-topology-aware scheduling guide writes it (mode hard, highestTierAllowed 2)."""

from __future__ import annotations

import pytest

from provider.domain.gangs.topology import (
    NetworkTopology,
    TopologyMode,
    kai_levels,
    volcano_network,
)
from provider.domain.provreq import (
    NETWORK_TOPOLOGY_ANNOTATION,
    PREFERRED_TOPOLOGY_ANNOTATION,
    BadRequest,
    demand_from,
)
from tests.domain.devices.test_shape_table import request_docs

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"


def test_kai_required_and_preferred_levels() -> None:
    group = {"spec": {"minMember": 3, "queue": "team-a", "topologyConstraint": {
        "topology": "cluster-topology", "requiredTopologyLevel": BLOCK,
        "preferredTopologyLevel": RACK}}}
    assert kai_levels(group) == (BLOCK, RACK)
    assert kai_levels({"spec": {"topologyConstraint": {"preferredTopologyLevel": RACK}}}) == (
        None, RACK)
    assert kai_levels({"spec": {"minMember": 3}}) == (None, None)
    assert kai_levels({"spec": {"topologyConstraint": "rack"}}) == (None, None)


def test_volcano_network_topology_round_trips_through_the_request() -> None:
    found = volcano_network({"spec": {"networkTopology": {"mode": "hard",
                                                          "highestTierAllowed": 2}}})
    assert found == NetworkTopology(TopologyMode.HARD, 2)
    assert found.render() == "mode=hard,highestTierAllowed=2"
    assert NetworkTopology.parse(found.render()) == found
    soft = volcano_network({"spec": {"networkTopology": {"mode": "soft",
                                                         "highestTierName": "spine"}}})
    assert soft == NetworkTopology(TopologyMode.SOFT, None, "spine")
    assert soft is not None and NetworkTopology.parse(soft.render()) == soft
    # A mode alone bounds nothing; a negative tier is no tier.
    assert volcano_network({"spec": {"networkTopology": {"mode": "hard"}}}) is None
    assert volcano_network({"spec": {"networkTopology": {"highestTierAllowed": -1}}}) is None


@pytest.mark.parametrize(("text", "why"), [
    ("mode=firm", "mode must be hard or soft"),
    ("highestTierAllowed=two", "must be a number"),
    ("tier=2", "unknown keys tier"),
    ("mode", "is not key=value"),
])
def test_a_bad_network_topology_on_a_request_says_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        NetworkTopology.parse(text)


def test_the_topology_a_gang_bridge_carries_reaches_the_demand() -> None:
    request, templates = request_docs({"containers": [{"name": "c", "image": "x"}]}, 1)
    demand = demand_from(request, templates)[0]
    assert (demand.preferred_topology_keys, demand.network_topology) == ((), None)
    request["metadata"]["annotations"] = {PREFERRED_TOPOLOGY_ANNOTATION: RACK,
                                          NETWORK_TOPOLOGY_ANNOTATION: "mode=soft,"
                                          "highestTierAllowed=1"}
    demand = demand_from(request, templates)[0]
    assert demand.preferred_topology_keys == (RACK,)
    assert demand.network_topology == NetworkTopology(TopologyMode.SOFT, 1)
    request["metadata"]["annotations"] = {NETWORK_TOPOLOGY_ANNOTATION: "mode=firm"}
    with pytest.raises(BadRequest) as info:
        demand_from(request, templates)
    ((field, message),) = info.value.problems
    assert field == f"metadata.annotations[{NETWORK_TOPOLOGY_ANNOTATION}]"
    assert "mode must be hard or soft" in message
