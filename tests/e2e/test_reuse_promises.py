"""Issue 50 on the real control plane: reuse keeps every promise. An allset of the test's
own (the kind overlay's RBAC and ServiceAccount, kwok Nodes for its simulated cloud's
instances, a 60 s backoff and one group of two nodes, as the wake's scenario runs it):

- a tainted idle node is not reused: someone (a maintenance drain) tainted the node an
  earlier request left idle, and the next request launches a node of its own instead;
- a bridged gang's replacement pod keeps its node while a second request waits: one pod of
  a running two-node gang (a scheduler-plugins PodGroup the gang bridge asked capacity
  for) fails, and the pod made in its place is Pending (gated, as a controller may hold
  it); the second request, backing off on the group's maxSize, is woken by the node that
  emptied and must not book it. The replacement lands there once ungated; when the gang
  ends, the second request gets a node."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import install_crd
from tests.e2e.conftest import World
from tests.e2e.overlay_allset import overlay_allset, registered
from tests.e2e.procs import Proc
from tests.e2e.rest import ApiError, Obj, Rest, condition, is_true, wait_for
from tests.e2e.test_gangs import COSCHED, COSCHED_LABEL, gang_request, podgroup_crd
from tests.e2e.test_wake import GROUP, NS, REUSED, WORKER, _get, _request, kind_overlay

KEEP = {**GROUP, "id": "keep-a", "maxSize": 2}
BOOKING = "allset.dev/booking"
MAINTENANCE = {"key": "maintenance", "value": "drain", "effect": "NoSchedule"}
GATE = "e2e.allset.dev/hold"


@contextlib.contextmanager
def own_allset(world: World, tmp_path: Path, name: str) -> Iterator[tuple[Rest, Proc,
                                                                         list[Obj]]]:
    """The test's allset (group keep-a, two nodes at most); what the test made is
    deleted after it, newest first."""
    rest = world.cluster.rest
    docs, deployment, config = kind_overlay(tmp_path, KEEP)
    made: list[Obj] = []
    with overlay_allset(world, docs, deployment, config, tmp_path, name) as (proc, _socket):
        try:
            yield rest, proc, made
        finally:
            for doc in reversed(made):
                m = doc["metadata"]
                with contextlib.suppress(ApiError):
                    rest.delete(doc["apiVersion"], doc["kind"], m["name"], m.get("namespace"))


def _provisioned(rest: Rest, proc: Proc, name: str) -> Obj:
    return wait_for(f"{name} to be Provisioned", lambda: (
        found if is_true(found := _get(rest, name), "Provisioned") else None), 120,
        explain=lambda: f"{_get(rest, name).get('status')}; {proc.tail()}")


def _booked_on(rest: Rest, name: str) -> set[str]:
    value = f"{NS}.{name}"
    return {n["metadata"]["name"] for n in rest.list("v1", "Node")
            if (n["metadata"].get("labels") or {}).get(BOOKING) == value}


def test_a_tainted_idle_node_is_not_reused(world: World, tmp_path: Path) -> None:
    with own_allset(world, tmp_path, "allset-taint") as (rest, proc, made):
        for doc in _request("taint-first", booking=5):
            made.append(rest.create(doc))
        _provisioned(rest, proc, "taint-first")
        (node,) = registered(rest)
        wait_for("taint-first's booking to expire (no pod came)", lambda: is_true(
            _get(rest, "taint-first"), "BookingExpired"), 60, explain=proc.tail)
        # A maintenance drain taints the idle node: nothing more is to land there.
        taints = rest.get("v1", "Node", node)["spec"].get("taints") or []
        rest.merge_patch("v1", "Node", node, {"spec": {"taints": [*taints, MAINTENANCE]}})
        for doc in _request("taint-second"):
            made.append(rest.create(doc))
        second = _provisioned(rest, proc, "taint-second")
        details = second["status"].get("provisioningClassDetails") or {}
        assert not details.get(REUSED), details
        (launched,) = set(registered(rest)) - {node}
        assert _booked_on(rest, "taint-second") == {launched}
        print(f"\ntaint: taint-second launched {launched} beside the tainted idle {node}")


def _gang_pod(name: str, gated: bool = False) -> Obj:
    # Held to keep-a's nodes: WORKER selects any H100 node, and in the whole suite an idle
    # H100 node another scenario left took the gang's pods, which then needed no request.
    spec: dict[str, Any] = {**WORKER, "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 0,
                            "nodeSelector": {**WORKER["nodeSelector"],
                                             "allset.dev/node-group": KEEP["id"]}}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {COSCHED_LABEL: "keep"}},
            "spec": spec}


def _phase(rest: Rest, name: str) -> tuple[str | None, str | None]:
    pod = rest.get("v1", "Pod", name, NS)
    return pod["status"].get("phase"), pod["spec"].get("nodeName")


@pytest.fixture
def podgroups(world: World) -> Iterator[None]:
    """scheduler-plugins' PodGroup CRD (our minimal one), served before allset starts."""
    install_crd(world.cluster.rest, podgroup_crd())
    yield


def test_a_bridged_gangs_replacement_keeps_its_node_while_a_second_request_waits(
        world: World, tmp_path: Path, podgroups: None) -> None:
    with own_allset(world, tmp_path, "allset-keep") as (rest, proc, made):
        made.append(rest.create({"apiVersion": COSCHED, "kind": "PodGroup",
                                 "metadata": {"name": "keep", "namespace": NS},
                                 "spec": {"minMember": 2}}))
        for i in range(2):
            made.append(rest.create(_gang_pod(f"keep-{i}")))
        request = wait_for("the gang's request", lambda: gang_request(
            rest, "coscheduling", "keep"), 90, explain=proc.tail)
        rname = request["metadata"]["name"]
        _provisioned(rest, proc, rname)
        wait_for("the gang's pods to run", lambda: all(
            _phase(rest, f"keep-{i}")[0] == "Running" for i in range(2)), 120,
            explain=proc.tail)
        wait_for(f"{rname}'s booking to be consumed", lambda: is_true(
            _get(rest, rname), "BookingExpired"), 60, explain=proc.tail)

        for doc in _request("keep-second"):
            made.append(rest.create(doc))

        def backing_off() -> bool:
            found = condition(_get(rest, "keep-second"), "Provisioned")
            return found is not None and found.get("reason") == "MaxSizeReached"

        wait_for("keep-second to back off on the group's maxSize", backing_off, 60,
                 explain=proc.tail)
        # One pod of the gang fails; the pod made in its place is held Pending.
        _, freed = _phase(rest, "keep-0")
        rest.delete("v1", "Pod", "keep-0", NS)
        made.append(rest.create(_gang_pod("keep-0b", gated=True)))
        emptied = time.monotonic()
        while time.monotonic() - emptied < 20:  # the wake looks every 5 s for 30 s
            assert not is_true(_get(rest, "keep-second"), "Provisioned"), proc.tail()
            assert _booked_on(rest, "keep-second") == set()
            time.sleep(1)
        # Ungated, the replacement lands on the node its gang kept.
        rest.merge_patch("v1", "Pod", "keep-0b", {"spec": {"schedulingGates": []}}, NS)
        wait_for("the replacement to run on the freed node", lambda: _phase(
            rest, "keep-0b") == ("Running", freed), 60,
            explain=lambda: f"{_phase(rest, 'keep-0b')} (freed {freed}); {proc.tail()}")
        assert not is_true(_get(rest, "keep-second"), "Provisioned")
        # The gang ends: the second request gets a node (woken, or at its retry).
        for name in ("keep-1", "keep-0b"):
            rest.delete("v1", "Pod", name, NS)
        second = _provisioned(rest, proc, "keep-second")
        assert (second["status"].get("provisioningClassDetails") or {}).get(REUSED)
        print(f"\nkeep: the replacement held {freed} for 20 s against a woken request; "
              f"keep-second reused a node once the gang ended")
