"""A gang's open request counts only the pods it planned (issue 32, finding 8): a pod that
joins the gang once its request is made waits for the gang's next request, told so once,
while a planned pod and one replacing a planned pod that failed are counted as before.
What a request counts is its own record (issue 53: allset writes no pod); a pod's mark is
what the admission webhook gave it at creation."""

from __future__ import annotations

from typing import Any

from provider.base.clock import ManualClock
from provider.controller import conditions as c
from provider.controller.gang_bridge import REQUEST_ANNOTATION, GangBridge
from provider.controller.gang_objects import PLACES_ANNOTATION
from provider.domain.gangs.sources import SOURCES
from tests.fakes.kube import objects
from tests.kit.gangs import (
    CONSUME,
    COSCHED,
    CPU,
    GPU,
    NS,
    Cluster,
    gang_pod,
    k,
    pod_sets,
    stuck,
    whole_gang,
)

__all__ = ["k"]

WAITING = "WaitingForNextGeneration"  # what a person filters Events by
POD_SET = "allset.dev/gang-pod-set"


def notes(k: Cluster, pod: str) -> dict[str, str]:
    return dict(k.pod(pod)["metadata"].get("annotations") or {})


def place(k: Cluster, request: str, pod: str) -> str | None:
    """The pod set ``request`` counts ``pod`` in; "": it waits for the next; None: neither."""
    return (k.counted(request) or {}).get(pod)


def waiting_events(k: Cluster) -> list[dict[str, Any]]:
    return [e for e in k.kube.list("events", NS) if e["reason"] == WAITING]


def writes(k: Cluster) -> list[tuple[str, str, str]]:
    return [call for call in k.kube.calls if call[1] in ("create", "patch", "update", "delete")]


def template_of(k: Cluster, request: str, requests: dict[str, str]) -> str:
    """The name of ``request``'s pod set whose pods ask for ``requests``."""
    made = k.kube.get("provisioningrequests", request, NS)
    assert made is not None
    for ps in made["spec"]["podSets"]:
        name = str(ps["podTemplateRef"]["name"])
        template = k.kube.get("podtemplates", name, NS)
        assert template is not None
        if template["template"]["spec"]["containers"][0]["resources"]["requests"] == requests:
            return name
    raise AssertionError(f"{request} has no pod set of {requests}")


def join(k: Cluster, pod: str, requests: dict[str, str]) -> None:
    """A pod joins the gang "train" a minute later, and the scheduler finds no room."""
    k.clock.advance(60)
    k.admit(gang_pod(pod, requests))
    stuck(k, pod)


def fail(k: Cluster, pod: str) -> None:
    k.kube.bind_pod(NS, pod, f"node-{pod}")
    k.kube.set_pod_phase(NS, pod, "Failed")


def quiet(k: Cluster, passes: int = 2) -> None:
    """Passes in which nothing changed write nothing: no annotation, no Event."""
    before = k.kube.resource_version
    k.kube.reset_counts()
    for _ in range(passes):
        k.pass_once()
    assert k.kube.resource_version == before
    assert writes(k) == []


def test_a_pod_added_while_the_request_is_open_waits_for_the_next_generation(
        k: Cluster) -> None:
    """It was marked as consuming the open request, which planned no place for it: CA left
    it alone, the request never counted it, and it waited until the booking ended. It now
    waits for the gang's next request, asked for once this one ends, and is told so once."""
    first = whole_gang(k)  # 2 GPU pods + 1 CPU pod, planned
    join(k, "w2", GPU)
    assert notes(k, "w2")[CONSUME] == first  # the webhook's mark: CA leaves it alone
    k.pass_once()
    second = k.request_name("train", 2)
    assert [r["metadata"]["name"] for r in k.requests()] == [first]
    assert place(k, first, "w2") == ""
    for pod in ("w0", "w1", "ps"):
        assert place(k, first, pod)
    (told,) = waiting_events(k)
    assert (told["involvedObject"]["kind"], told["involvedObject"]["name"],
            told["involvedObject"]["uid"], told["type"]) == (
        "Pod", "w2", k.pod("w2")["metadata"]["uid"], "Normal")
    assert f"request {first}" in told["message"] and second in told["message"]
    assert template_of(k, first, GPU) in told["message"]  # the pod set with no place left
    quiet(k)
    assert len(waiting_events(k)) == 1

    # The planned pods land: the booking is consumed, and the next generation asks for w2.
    k.set_request_condition(first, c.PROVISIONED, "True", c.CAPACITY_IS_PROVISIONED)
    for pod in ("w0", "w1", "ps"):
        k.kube.bind_pod(NS, pod, f"node-{pod}")
        k.kube.set_pod_phase(NS, pod, "Running")
    k.set_request_condition(first, c.BOOKING_EXPIRED, "True", c.BOOKING_CONSUMED)
    k.pass_once()
    assert sorted(r["metadata"]["name"] for r in k.requests()) == sorted([first, second])
    made = k.kube.get("provisioningrequests", second, NS)
    assert made is not None and pod_sets(k, made) == [(1, GPU)]
    assert k.counted(second) == {"w2": template_of(k, second, GPU)}
    assert len(waiting_events(k)) == 1


def test_planned_pods_and_a_replacement_of_a_failed_one_are_still_counted(
        k: Cluster) -> None:
    """As before: the planned pods consume the request, and a pod created after it that
    replaces a planned pod that failed takes its place, told nothing."""
    first = whole_gang(k)
    assert [notes(k, p)[CONSUME] for p in ("w0", "w1", "ps")] == [first] * 3
    fail(k, "w1")
    join(k, "w1-again", GPU)  # the Job's replacement
    k.pass_once()
    assert notes(k, "w1-again")[CONSUME] == first
    assert place(k, first, "w1-again") == template_of(k, first, GPU)
    assert waiting_events(k) == []
    assert [r["metadata"]["name"] for r in k.requests()] == [first]


def test_the_request_records_the_pod_set_that_counted_each_pod(k: Cluster) -> None:
    first = whole_gang(k)
    gpu, cpu = template_of(k, first, GPU), template_of(k, first, CPU)
    assert k.counted(first) == {"w0": gpu, "w1": gpu, "ps": cpu}
    fail(k, "w1")
    join(k, "w1-again", GPU)
    k.pass_once()
    # The failed pod is no longer live: it leaves the record, its replacement takes its place.
    assert k.counted(first) == {"w0": gpu, "w1-again": gpu, "ps": cpu}
    assert POD_SET not in notes(k, "w1-again")  # no pod is written
    quiet(k)


def test_a_place_is_of_its_pod_sets_shape_and_a_pod_on_a_node_holds_its_own(
        k: Cluster) -> None:
    """The CPU pod fails and a GPU pod joins: the place free is a CPU pod's, so the GPU pod
    waits (the GPU places are held, one by a pod already on a node), and the CPU pod's
    replacement takes it."""
    first = whole_gang(k)
    k.kube.bind_pod(NS, "w0", "gpu-node-0")  # landed: the pod cache keeps a slim copy
    k.kube.set_pod_phase(NS, "w0", "Running")
    fail(k, "ps")
    join(k, "w2", GPU)
    join(k, "ps-again", CPU)
    k.pass_once()
    assert place(k, first, "ps-again") == template_of(k, first, CPU)
    assert place(k, first, "w2") == ""
    assert [e["involvedObject"]["name"] for e in waiting_events(k)] == ["w2"]
    quiet(k)


def test_a_pod_of_a_shape_the_request_did_not_plan_waits(k: Cluster) -> None:
    first = whole_gang(k)
    fail(k, "w1")  # a GPU place is free, but not for a pod of another shape
    join(k, "big", {"cpu": "32", "memory": "128Gi"})
    k.pass_once()
    assert place(k, first, "big") == ""
    (told,) = waiting_events(k)
    assert "planned no pod of its shape" in told["message"]
    assert first in told["message"]


def test_a_restarted_or_skewed_allset_counts_the_same_pods_and_tells_nothing_again(
        k: Cluster) -> None:
    """What counted whom is read from the request's record alone: a process that starts
    afresh (or takes over) with its clock an hour off the API server's writes nothing."""
    whole_gang(k)
    join(k, "w2", GPU)
    k.pass_once()
    assert len(waiting_events(k)) == 1
    skewed = ManualClock(start=k.clock.now() - 3600.0)
    k.bridge = GangBridge(k.api, list(SOURCES.values()), skewed, pods=k.cache)
    quiet(k)
    assert len(waiting_events(k)) == 1


def test_an_event_the_api_refused_is_told_on_a_later_pass_once(k: Cluster) -> None:
    first = whole_gang(k)
    join(k, "w2", GPU)
    k.kube.fail("create", "events")
    k.pass_once()
    assert place(k, first, "w2") == ""
    assert waiting_events(k) == []
    k.pass_once()
    assert [e["involvedObject"]["name"] for e in waiting_events(k)] == ["w2"]
    quiet(k)


def test_pods_the_old_bridge_counted_past_the_plan_wait_after_an_upgrade(k: Cluster) -> None:
    """The bridge before this change marked a pod added later as consuming the open request
    and wrote no pod set: the planned pods (made first) keep their places, recorded now,
    and the pod added later waits for the next generation."""
    first = whole_gang(k)
    join(k, "w2", GPU)

    def as_the_old_bridge_marked(obj: dict[str, Any]) -> None:
        found = obj["metadata"].setdefault("annotations", {})
        found[CONSUME] = first
        found.pop(POD_SET, None)

    for pod in ("w0", "w1", "ps", "w2"):
        k.kube.modify("pods", pod, as_the_old_bridge_marked, NS)
    # (A request of that bridge has no record of its own: what its pods say is read.)
    k.kube.modify("provisioningrequests", first,
                  lambda obj: obj["metadata"]["annotations"].pop(PLACES_ANNOTATION), NS)
    k.pass_once()
    assert k.counted(first) == {"w0": template_of(k, first, GPU),
                                "w1": template_of(k, first, GPU),
                                "ps": template_of(k, first, CPU), "w2": ""}
    assert [e["involvedObject"]["name"] for e in waiting_events(k)] == ["w2"]
    quiet(k)


def test_a_standby_records_nothing_of_an_asked_gang(k: Cluster) -> None:
    """Later generations are the leader's: a standby leaves a pod that joined alone."""
    first = whole_gang(k)
    k.bridge.act_while(lambda: False)
    join(k, "w2", GPU)
    k.pass_once()
    assert place(k, first, "w2") is None
    assert waiting_events(k) == []


def test_a_pod_of_a_gang_not_yet_whole_is_marked_at_creation(k: Cluster) -> None:
    k.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    k.admit(gang_pod("w0", GPU))
    assert notes(k, "w0")[CONSUME] == k.request_name("train", 1)
    stuck(k, "w0")
    before = k.kube.resource_version
    k.pass_once()
    assert k.kube.resource_version == before  # nothing to ask for yet, nothing to write
    assert POD_SET not in notes(k, "w0")


def test_templates_named_otherwise_are_read_before_a_pod_is_left_to_wait(k: Cluster) -> None:
    """The bridge's first version numbered a request's templates: their names say nothing of
    their shape, so the pass that would leave a pod waiting reads them first, and the pods
    the request planned keep their places."""
    group = k.kube.create(objects.coscheduling_pod_group(NS, "train", 2))
    for pod in ("w0", "w1"):
        k.kube.create(gang_pod(pod, GPU))
    stuck(k, "w0", "w1")
    name = f"gang-train-{group['metadata']['uid'][:6]}-1"
    k.kube.create({"apiVersion": "v1", "kind": "PodTemplate",
                   "metadata": {"name": f"{name}-0", "namespace": NS},
                   "template": {"spec": k.pod("w0")["spec"]}})
    request = objects.provisioning_request(NS, name, {f"{name}-0": 2})
    request["metadata"]["ownerReferences"] = [{
        "apiVersion": COSCHED.api_version, "kind": "PodGroup", "name": "train",
        "uid": group["metadata"]["uid"]}]
    k.kube.create(request)
    k.kube.modify("podgroups", "train", lambda obj: obj["metadata"].setdefault(
        "annotations", {}).update({REQUEST_ANNOTATION: name}), NS, group=COSCHED.group)
    for pod in ("w0", "w1"):
        k.kube.modify("pods", pod, lambda obj: obj["metadata"].setdefault(
            "annotations", {}).update({CONSUME: name}), NS)
    join(k, "w2", GPU)
    k.kube.reset_counts()
    k.pass_once()
    assert k.kube.count("get", "podtemplates") == 1
    assert k.counted(name) == {"w0": f"{name}-0", "w1": f"{name}-0", "w2": ""}
    k.kube.reset_counts()
    quiet(k)
    assert k.kube.count("get", "podtemplates") == 0


def test_a_request_deleted_while_a_pod_waits_is_made_again_without_it(k: Cluster) -> None:
    """The gang still names it, so the next pass makes it again, for every pod not on a
    node: the record of the one told it waits for the next request went with the request
    (before issue 53 that pod's annotation kept it out)."""
    first = whole_gang(k)
    join(k, "w2", GPU)
    k.pass_once()
    assert place(k, first, "w2") == ""
    assert k.kube.delete("provisioningrequests", first, NS)
    k.pass_once()
    (again,) = k.requests()
    assert again["metadata"]["name"] == first
    assert pod_sets(k, again) == [(1, CPU), (3, GPU)]
    assert set(k.counted(first) or {}) == {"w0", "w1", "ps", "w2"}
    quiet(k)
