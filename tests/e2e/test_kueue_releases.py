"""What Kueue 0.19 does on its own, on real Kueue, with allset (issue 55, item 3).

- CleanupProvisioningRequestsOnEviction (beta, on in 0.19): Kueue deletes the requests of
  a Workload it evicts. A request whose nodes run the workload, and one whose nodes never
  registered, are deleted that way: the first's nodes are no longer booked, the second's
  are terminated.
- ConcurrentAdmission (alpha since 0.18, turned on by the harness): a Workload pursues two
  flavors at once, each flavor an allset node group, each variant with a request of its
  own. allset launches one gang; Kueue admits that variant, and the pod runs there.

Kueue 0.17 has neither: there these scenarios are skipped (ALLSET_E2E_RELEASES=previous)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e import kueue
from tests.e2e.conftest import World
from tests.e2e.look import (
    BOOKING_LABEL,
    PROVREQ,
    admitted,
    last_provreq,
    live,
    of_group,
    of_request,
    pods_of,
    provreqs_of,
    reason,
    running,
    workload_of,
)
from tests.e2e.rest import Obj, Rest, is_true, wait_for

NS = "default"
PROVREQ_V1 = f"{PROVREQ}/v1"
PARENT_LABEL = "kueue.x-k8s.io/concurrent-admission-parent"  # Kueue v0.19.2 constants.go
VARIANTS = "variants"


def _needs(world: World, minor: int, what: str) -> None:
    if not world.cluster.parts.kueue_at_least(minor):
        pytest.skip(f"{what} is in Kueue 0.{minor} and later; this run has "
                    f"{world.cluster.parts.versions['kueue']}")


def _gpu_job(name: str, group: str, queue: str = kueue.QUEUE) -> Obj:
    spec = kueue.pod_spec({"allset.dev/node-group": group} if group else {},
                          {"nvidia.com/gpu": "8", "cpu": "16"}, gpu_taint=True)
    job = kueue.job(name, 1, spec)
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = queue
    return job


def _deactivate(rest: Rest, workload: Obj) -> None:
    """What `kubectl patch workload --type=merge -p '{"spec":{"active":false}}'` does: Kueue
    evicts the Workload (reason Deactivated)."""
    rest.merge_patch(kueue.KUEUE, "Workload", workload["metadata"]["name"],
                     {"spec": {"active": False}}, NS)


def test_an_evicted_workloads_request_is_deleted_and_its_nodes_are_not_left_booked(
        world: World) -> None:
    _needs(world, 19, "CleanupProvisioningRequestsOnEviction")
    rest = world.cluster.rest
    rest.create(_gpu_job("evictee", "evict-h100"))
    try:
        workload = wait_for("the Workload of evictee", lambda: workload_of(rest, "evictee"),
                            60, explain=world.logs)
        name = workload["metadata"]["name"]
        request = wait_for("the request to be Provisioned", lambda: (
            lambda r: r if is_true(r, "Provisioned") else None)(last_provreq(rest, name)),
            120, explain=lambda: reason(last_provreq(rest, name), "Provisioned") +
            "\n" + world.logs())
        booking = request["status"]["provisioningClassDetails"]["booking"]
        wait_for("Kueue to admit it", lambda: admitted(workload_of(rest, "evictee")), 60)
        wait_for("its pod to run", lambda: running(pods_of(rest, "evictee"), 1), 120)
        node = pods_of(rest, "evictee")[0]["spec"]["nodeName"]
        _deactivate(rest, workload_of(rest, "evictee") or workload)
        wait_for("Kueue to delete the evicted Workload's requests",
                 lambda: provreqs_of(rest, name) == [], 90, explain=world.logs)

        def unbooked() -> bool:
            labels = rest.get("v1", "Node", node)["metadata"].get("labels") or {}
            return bool(labels.get(BOOKING_LABEL) != booking)

        wait_for(f"node {node} to carry no booking", unbooked, 60, explain=world.logs)
        # Let go, not thrown away: the node is up, for CA to scale down or a gang to book.
        launched = of_request(world.kubelet.instances(), NS, request["metadata"]["name"])
        assert [i.id for i in live(launched)] == [node]
    finally:
        rest.delete("batch/v1", "Job", "evictee", NS)


def test_an_evicted_workload_whose_nodes_never_came_has_them_terminated(
        world: World) -> None:
    _needs(world, 19, "CleanupProvisioningRequestsOnEviction")
    rest = world.cluster.rest
    spec = kueue.pod_spec({"allset.dev/node-group": "evict-nojoin"}, {"cpu": "4"})
    rest.create(kueue.job("stranded", 2, spec))
    try:
        workload = wait_for("the Workload of stranded", lambda: workload_of(rest, "stranded"),
                            60, explain=world.logs)
        name = workload["metadata"]["name"]

        def launched() -> Obj | None:
            found = last_provreq(rest, name)
            if found is None:
                return None
            nodes = live(of_request(world.kubelet.instances(), NS, found["metadata"]["name"]))
            return found if nodes else None

        request = wait_for("allset to launch the gang", launched, 90, explain=world.logs)
        assert not is_true(request, "Provisioned")  # its nodes never register
        _deactivate(rest, workload_of(rest, "stranded") or workload)
        wait_for("Kueue to delete the evicted Workload's requests",
                 lambda: provreqs_of(rest, name) == [], 90, explain=world.logs)
        wait_for("allset to terminate the gang it launched", lambda: live(of_request(
            world.kubelet.instances(), NS, request["metadata"]["name"])) == [], 60,
            explain=world.logs)
        assert live(of_group(world.kubelet.instances(), "evict-nojoin")) == []
    finally:
        rest.delete("batch/v1", "Job", "stranded", NS)


@pytest.fixture(scope="module")
def variants_queue(world: World) -> Iterator[str]:
    """A ClusterQueue whose two flavors are the allset groups variant-a and variant-b
    (their nodes carry allset.dev/node-group), both gated by allset's admission check, with
    ConcurrentAdmission: a Job there becomes a parent Workload and a variant per flavor."""
    _needs(world, 18, "ConcurrentAdmission")
    rest = world.cluster.rest
    for flavor in ("variant-a", "variant-b"):
        rest.apply({"apiVersion": kueue.KUEUE, "kind": "ResourceFlavor",
                    "metadata": {"name": flavor},
                    "spec": {"nodeLabels": {"allset.dev/node-group": flavor}}})
    quota = [{"name": "cpu", "nominalQuota": "1000"}, {"name": "memory", "nominalQuota": "10Ti"},
             {"name": "nvidia.com/gpu", "nominalQuota": "8"}]
    rest.apply({
        "apiVersion": kueue.KUEUE, "kind": "ClusterQueue", "metadata": {"name": VARIANTS},
        "spec": {
            "namespaceSelector": {},
            "admissionChecksStrategy": {"admissionChecks": [{"name": kueue.CHECK}]},
            "concurrentAdmissionPolicy": {"migration": {"mode": "RetainFirstAdmission"}},
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [{"name": f, "resources": quota}
                            for f in ("variant-a", "variant-b")]}]}})
    rest.apply({"apiVersion": kueue.KUEUE, "kind": "LocalQueue",
                "metadata": {"name": VARIANTS, "namespace": NS},
                "spec": {"clusterQueue": VARIANTS}})
    wait_for("the variants ClusterQueue to be active", lambda: any(
        c.get("type") == "Active" and c.get("status") == "True" for c in
        (rest.get(kueue.KUEUE, "ClusterQueue", VARIANTS).get("status") or {})
        .get("conditions") or []), 60,
        explain=lambda: str(rest.get(kueue.KUEUE, "ClusterQueue", VARIANTS).get("status")))
    yield VARIANTS


def _variant_requests(rest: Rest, parent: Obj) -> list[Obj]:
    """The requests of the parent's variants (each owned by a variant Workload)."""
    variants = {w["metadata"]["name"] for w in rest.list(kueue.KUEUE, "Workload", NS)
                if any(o.get("uid") == parent["metadata"]["uid"]
                       for o in w["metadata"].get("ownerReferences") or [])}
    return [r for r in rest.list(PROVREQ_V1, "ProvisioningRequest", NS)
            if any(o.get("name") in variants for o in r["metadata"].get("ownerReferences") or [])]


def test_concurrent_admission_launches_one_gang(world: World, variants_queue: str) -> None:
    rest = world.cluster.rest
    rest.create(_gpu_job("flavors", "", queue=variants_queue))
    seen: dict[str, set[str]] = {}
    try:
        parent = wait_for("the parent Workload", lambda: (
            lambda w: w if w and (w["metadata"].get("labels") or {}).get(PARENT_LABEL)
            == "true" else None)(workload_of(rest, "flavors")), 60, explain=world.logs)

        def admitted_and_running() -> bool:
            for r in _variant_requests(rest, parent):  # what each request went through
                cond = next((c for c in (r.get("status") or {}).get("conditions") or []
                             if c["type"] == "Provisioned"), None)
                seen.setdefault(r["metadata"]["name"], set()).add(
                    f"{cond['status']}/{cond['reason']}" if cond else "-")
            return admitted(workload_of(rest, "flavors")) and \
                running(pods_of(rest, "flavors"), 1)

        wait_for("Kueue to admit a variant and the pod to run", admitted_and_running, 180,
                 explain=lambda: f"{seen}\n{world.logs()}")
        print(f"variant requests and the Provisioned states seen: {seen}")
        everything = world.kubelet.instances()
        ever = of_group(everything, "variant-a") + of_group(everything, "variant-b")
        # Exactly one gang: every node either flavor's group ever had is one request's.
        assert len({i.tags.request for i in ever}) == 1, ever
        assert len(ever) == 1, ever
        pod = pods_of(rest, "flavors")[0]
        assert pod["spec"]["nodeName"] == ever[0].id
        provisioned = [n for n, states in seen.items()
                       if any(s.startswith("True/") for s in states)]
        assert len(provisioned) == 1, seen
    finally:
        rest.delete("batch/v1", "Job", "flavors", NS)
