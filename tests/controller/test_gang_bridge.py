"""The gang bridge against our fake API server, through the real client (GangApi): when a
PodGroup's pods become one request, what that request holds, and what happens as the gang
changes (pods added later, partly scheduled, deleted) or the request reports back. What an
open request counts of pods added later: test_gang_generations.py."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from provider.base.clock import ManualClock
from provider.controller import conditions as c
from provider.controller.gang_api import GangApi
from provider.controller.gang_bridge import (
    REQUEST_ANNOTATION,
    STATUS_ANNOTATION,
    GangBridge,
    request_name,
)
from provider.controller.kube import KubeApi
from provider.domain.demand import CLASS_NAME
from provider.domain.gangs.sources import SOURCES, SourceName
from provider.leadership.elector import NotLeader
from tests.fakes.kube import FakeKube, objects
from tests.kit.controller import GPU_TOLERATION, World, live, world
from tests.kit.gangs import (
    CONSUME,
    COSCHED,
    CPU,
    GPU,
    NS,
    VOLCANO,
    Cluster,
    cluster,
    gang_pod,
    k,
    pod_sets,
    stuck,
    whole_gang,
)

__all__ = ["k", "world"]


# --- when a gang is asked for -------------------------------------------------------------


def test_a_whole_stuck_gang_becomes_one_request_owned_by_its_podgroup(k: Cluster) -> None:
    group = k.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    k.admit(gang_pod("w0", GPU))
    k.admit(gang_pod("w1", GPU))
    stuck(k, "w0", "w1")
    k.pass_once()
    assert k.requests() == []  # 2 of its 3 pods exist
    # Not asked for yet, but its pods were marked at creation with the request they will
    # consume (allset's admission webhook): CA's per-pod scale-up leaves them to allset.
    upcoming = k.request_name("train", 1)
    for pod in ("w0", "w1"):
        assert k.pod(pod)["metadata"]["annotations"][CONSUME] == upcoming

    k.admit(gang_pod("ps", CPU))
    k.pass_once()
    assert k.requests() == []  # the scheduler has not tried the third pod yet
    assert k.pod("ps")["metadata"]["annotations"][CONSUME] == upcoming

    stuck(k, "ps")
    k.pass_once()
    (request,) = k.requests()
    name = k.request_name("train", 1)
    assert request["metadata"]["name"] == name
    assert request["spec"]["provisioningClassName"] == CLASS_NAME
    assert request["metadata"]["ownerReferences"] == [{
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "name": "train",
        "uid": group["metadata"]["uid"], "blockOwnerDeletion": False}]
    # PodTemplates cut from the pods: one per shape, with the pods' requests and placement.
    assert pod_sets(k, request) == [(1, CPU), (2, GPU)]
    gpu_ref = next(ps["podTemplateRef"]["name"] for ps in request["spec"]["podSets"]
                   if ps["count"] == 2)
    gpu_template = k.kube.get("podtemplates", gpu_ref, NS)
    assert gpu_template is not None
    spec = gpu_template["template"]["spec"]
    assert spec["nodeSelector"] == {"example.com/gpu": "nvidia-h100-80gb"}
    assert spec["tolerations"] == GPU_TOLERATION
    assert "nodeName" not in spec
    # The pods consume it (CA's own scale-up leaves them alone); the gang names it, and
    # the request records which pods it counts, in which pod set.
    for pod in ("w0", "w1", "ps"):
        assert k.pod(pod)["metadata"]["annotations"][CONSUME] == name
    assert k.podgroup()["metadata"]["annotations"][REQUEST_ANNOTATION] == name
    cpu_ref = next(ps["podTemplateRef"]["name"] for ps in request["spec"]["podSets"]
                   if ps["count"] == 1)
    assert k.counted(name) == {"w0": gpu_ref, "w1": gpu_ref, "ps": cpu_ref}


def test_a_second_pass_changes_nothing(k: Cluster) -> None:
    whole_gang(k)
    before = k.kube.resource_version
    k.kube.reset_counts()
    k.pass_once()
    assert k.kube.resource_version == before  # not one write
    assert not any(verb in ("create", "patch", "update", "delete")
                   for _, verb, _ in k.kube.calls)


def test_a_partly_scheduled_gang_asks_only_for_its_pending_pods(k: Cluster) -> None:
    k.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    for name, req in (("w0", GPU), ("w1", GPU), ("ps", CPU)):
        k.admit(gang_pod(name, req))
    k.kube.bind_pod(NS, "w0", "gpu-node-1")
    k.kube.set_pod_phase(NS, "w0", "Running")
    stuck(k, "w1", "ps")
    k.pass_once()
    (request,) = k.requests()
    assert pod_sets(k, request) == [(1, CPU), (1, GPU)]
    assert set(k.counted(request["metadata"]["name"]) or {}) == {"w1", "ps"}  # not w0


def test_pods_added_after_the_request_ran_its_course_get_a_second_request(k: Cluster
                                                                          ) -> None:
    first = whole_gang(k)
    k.set_request_condition(first, c.PROVISIONED, "True", c.CAPACITY_IS_PROVISIONED)
    for i, pod in enumerate(("w0", "w1", "ps")):
        k.kube.bind_pod(NS, pod, f"node-{i}")
        k.kube.set_pod_phase(NS, pod, "Running")
    k.set_request_condition(first, c.BOOKING_EXPIRED, "True", c.BOOKING_CONSUMED)
    k.pass_once()
    assert len(k.requests()) == 1  # every pod is on a node: nothing to ask

    k.admit(gang_pod("w2", GPU))
    stuck(k, "w2")
    k.pass_once()
    second = k.request_name("train", 2)
    assert sorted(r["metadata"]["name"] for r in k.requests()) == sorted([first, second])
    made = k.kube.get("provisioningrequests", second, NS)
    assert made is not None and pod_sets(k, made) == [(1, GPU)]
    assert k.pod("w2")["metadata"]["annotations"][CONSUME] == second
    assert k.pod("w0")["metadata"]["annotations"][CONSUME] == first
    assert k.podgroup()["metadata"]["annotations"][REQUEST_ANNOTATION] == second


def test_deleting_the_podgroup_deletes_its_request(k: Cluster) -> None:
    whole_gang(k)
    # The fake runs no garbage collector: the bridge's own sweep must do it (as it must
    # after `kubectl delete --cascade=orphan`).
    assert k.kube.delete("podgroups", "train", NS, group=COSCHED.group)
    k.pass_once()
    assert k.requests() == []


def _two_gangs_gone(k: Cluster) -> list[str]:
    """Gangs "train" and "eval" asked for, then both PodGroups deleted (orphaning)."""
    first = whole_gang(k)
    k.kube.create(objects.coscheduling_pod_group(NS, "eval", 1))
    k.admit(gang_pod("e0", GPU, gang="eval"))
    stuck(k, "e0")
    k.pass_once()
    names = sorted(r["metadata"]["name"] for r in k.requests())
    assert len(names) == 2 and first in names
    for gang in ("train", "eval"):
        assert k.kube.delete("podgroups", gang, NS, group=COSCHED.group)
    return names


def test_a_replica_deposed_mid_sweep_ends_its_pass_quietly() -> None:
    """Adversary seed 125171532 (E1): a replica lost the lease while its sweep deleted a
    gone gang's request. The fence's NotLeader ended the bridge's pass with it (and the
    sweep was counted done): the sweep ends, the pass does not raise, and the next pass
    that may act sweeps again."""
    with cluster(sweep_seconds=300.0) as k:
        k.clock.advance(1000.0)
        names = _two_gangs_gone(k)
        k.clock.advance(300.0)  # the sweep is due

        def deposed() -> None:
            raise NotLeader("standby")

        k.bridge.fence_with(deposed)
        k.pass_once()  # raised NotLeader on the old code
        assert sorted(r["metadata"]["name"] for r in k.requests()) == names
        k.bridge.fence_with(lambda: None)
        k.pass_once()  # within 300 s of the cut-short sweep: it is not counted done
        assert k.requests() == []


def test_a_request_the_api_refuses_to_delete_leaves_the_sweep_of_the_rest(k: Cluster
                                                                          ) -> None:
    names = _two_gangs_gone(k)
    real = k.api.delete_request
    refused: list[str] = []

    def refuse_first(namespace: str, name: str, uid: str = "",
                     resource_version: str = "") -> None:
        if not refused:
            refused.append(name)
            raise RuntimeError("the API server is shutting down")
        real(namespace, name, uid, resource_version)

    k.api.delete_request = refuse_first  # type: ignore[method-assign]
    k.pass_once()
    assert [r["metadata"]["name"] for r in k.requests()] == refused
    assert set(names) - set(refused) and refused[0] in names
    k.pass_once()
    assert k.requests() == []


def test_a_request_of_another_gang_is_left_alone_by_the_sweep(k: Cluster) -> None:
    name = whole_gang(k)
    other = objects.provisioning_request(NS, "someone-elses", {"t": 1})
    other["metadata"]["labels"] = {"allset.dev/gang": "true"}  # but no gang annotation
    k.kube.create(other)
    k.pass_once()
    assert sorted(r["metadata"]["name"] for r in k.requests()) == sorted(
        [name, "someone-elses"])


def test_a_gang_api_not_served_is_ignored_and_not_asked_about_again_soon() -> None:
    with cluster(absent_groups=(VOLCANO.group,)) as k:
        k.admit(gang_pod("v0", GPU, gang="vj", source=SourceName.VOLCANO))
        k.admit(gang_pod("v1", GPU, gang="vj", source=SourceName.VOLCANO))
        stuck(k, "v0", "v1")
        k.kube.create(objects.coscheduling_pod_group(NS, "train", 1))
        k.admit(gang_pod("w0", GPU))
        stuck(k, "w0")
        k.kube.reset_counts()  # the webhook's own discovery, when the pods were made
        k.pass_once()
        k.clock.advance(60)
        k.pass_once()
        # The coscheduling gang is asked for; the Volcano pods are not (nor marked).
        assert [r["metadata"]["name"] for r in k.requests()] == [k.request_name("train", 1)]
        assert CONSUME not in (k.pod("v0")["metadata"].get("annotations") or {})
        # One list of the served groups answers for every source, within its TTL once.
        assert k.kube.discoveries("/apis") == 1
        assert sum(k.kube.discoveries(s.api_version) for s in SOURCES.values()) == 0
        assert not any(group == VOLCANO.group for group, _, _ in k.kube.calls)
        k.clock.advance(300)
        k.pass_once()
        assert k.kube.discoveries("/apis") == 2  # and again after it


def test_a_gang_api_installed_later_is_bridged_once_the_groups_are_listed_again() -> None:
    with cluster(absent_groups=(VOLCANO.group,)) as k:
        k.pass_once()
        assert k.kube.discoveries("/apis") == 1
        k.kube.serve_group(VOLCANO.group)  # Volcano's CRDs are installed
        k.kube.create(objects.volcano_queue("default"))  # and its default queue made
        k.kube.create(objects.volcano_pod_group(NS, "vj", 2))
        for name in ("v0", "v1"):
            k.admit(gang_pod(name, GPU, gang="vj", source=SourceName.VOLCANO))
        stuck(k, "v0", "v1")
        k.pass_once()
        assert k.requests() == []  # what the last list said stands for its TTL
        k.clock.advance(300)
        k.pass_once()
        assert [r["metadata"]["name"] for r in k.requests()] == [k.request_name("vj", 1, VOLCANO)]


def test_a_volcano_gang_is_asked_for_where_volcano_is_installed(k: Cluster) -> None:
    k.kube.create(objects.volcano_pod_group(NS, "vj", 2))
    for name in ("v0", "v1"):
        k.admit(gang_pod(name, GPU, gang="vj", source=SourceName.VOLCANO))
    stuck(k, "v0", "v1")
    k.pass_once()
    (request,) = k.requests()
    assert request["metadata"]["ownerReferences"][0]["apiVersion"] == VOLCANO.api_version
    assert pod_sets(k, request) == [(2, GPU)]


def test_a_native_podgroup_gang_is_asked_for(k: Cluster) -> None:
    """The fake serves every version of the native API: the bridge reads the preferred
    one (tests/controller/test_gang_native.py has clusters of one release each)."""
    k.kube.create(objects.native_pod_group(NS, "njob", 2))
    for name in ("n0", "n1"):
        pod = objects.pod(NS, name, requests=GPU)
        pod["spec"]["schedulingGroup"] = {"podGroupName": "njob"}
        k.kube.create(pod)
    stuck(k, "n0", "n1")
    k.pass_once()
    (request,) = k.requests()
    assert request["metadata"]["ownerReferences"][0]["apiVersion"] == \
        "scheduling.k8s.io/v1beta1"
    assert request["spec"]["podSets"][0]["count"] == 2


# --- what the request says, on the gang ---------------------------------------------------


def test_the_requests_reason_appears_on_the_podgroup_once(k: Cluster) -> None:
    name = whole_gang(k)
    why = "no node group has 16 GPUs of nvidia-h100-80gb in one fabric"
    k.set_request_condition(name, c.PROVISIONED, "False", "NoMatchingGroup", why)
    for _ in range(3):
        k.pass_once()
    notes = k.podgroup()["metadata"]["annotations"]
    assert notes[STATUS_ANNOTATION] == f"NoMatchingGroup: {why}"
    events = [e for e in k.kube.list("events", NS) if e["involvedObject"]["name"] == "train"]
    assert [(e["reason"], e["type"], e["involvedObject"]["kind"]) for e in events] == [
        ("NoMatchingGroup", "Warning", "PodGroup")]
    assert why in events[0]["message"]
    # A new reason is a new annotation and a new Event.
    k.set_request_condition(name, c.PROVISIONED, "True", c.CAPACITY_IS_PROVISIONED, "ok")
    k.pass_once()
    k.pass_once()
    assert k.podgroup()["metadata"]["annotations"][STATUS_ANNOTATION] == \
        f"{c.CAPACITY_IS_PROVISIONED}: ok"
    events = [e for e in k.kube.list("events", NS) if e["involvedObject"]["name"] == "train"]
    assert sorted((e["reason"], e["type"]) for e in events) == [
        (c.CAPACITY_IS_PROVISIONED, "Normal"), ("NoMatchingGroup", "Warning")]


# --- crashes ----------------------------------------------------------------------------------


def test_a_crash_between_naming_the_request_and_creating_it_makes_exactly_one(
        k: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    real = k.api.create_request
    crashes = [RuntimeError("the process died here")]

    def create_request(namespace: str, body: Any) -> None:
        if crashes:
            raise crashes.pop()
        real(namespace, body)

    monkeypatch.setattr(k.api, "create_request", create_request)
    k.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    for name, req in (("w0", GPU), ("w1", GPU), ("ps", CPU)):
        k.admit(gang_pod(name, req))
    stuck(k, "w0", "w1", "ps")
    k.pass_once()
    assert k.requests() == []  # the gang names a request that does not exist
    assert k.podgroup()["metadata"]["annotations"][REQUEST_ANNOTATION] == \
        k.request_name("train", 1)
    for _ in range(3):
        k.pass_once()
    (request,) = k.requests()
    assert request["metadata"]["name"] == k.request_name("train", 1)
    assert pod_sets(k, request) == [(1, CPU), (2, GPU)]
    for pod in ("w0", "w1", "ps"):
        assert k.pod(pod)["metadata"]["annotations"][CONSUME] == k.request_name("train", 1)


# --- the whole controller --------------------------------------------------------------------


def test_the_controller_plans_launches_and_books_a_gangs_request(world: World) -> None:
    w = world
    w.controller.gangs = GangBridge(GangApi(w.api, monotonic=w.h.clock.now),
                                    list(SOURCES.values()), w.h.clock, pods=w.controller.pods)
    made = w.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    for name, req in (("w0", GPU), ("w1", GPU), ("ps", CPU)):
        w.kube.create(gang_pod(name, req))
    for name in ("w0", "w1", "ps"):
        w.kube.set_pod_unschedulable(NS, name)
    name = request_name(COSCHED, "train", made["metadata"]["uid"], 1)
    w.sync()
    assert w.request(name) is not None
    w.register_nodes()
    w.sync(3)
    provisioned = w.condition(c.PROVISIONED, name)
    assert provisioned is not None and provisioned.true, provisioned
    instances = live(w, f"{NS}/{name}")
    assert sorted(i.tags.node_group for i in instances) == ["cpu", "gpu", "gpu"]
    assert all(i.tags.committed for i in instances)
    group = w.kube.get("podgroups", "train", NS, group=COSCHED.group)
    assert group is not None
    assert group["metadata"]["annotations"][STATUS_ANNOTATION].startswith(
        c.CAPACITY_IS_PROVISIONED)
    # The scheduler places the pods on the booked nodes; the booking is consumed.
    gpu_nodes = [i.name for i in instances if i.tags.node_group == "gpu"]
    cpu_node = next(i.name for i in instances if i.tags.node_group == "cpu")
    for pod, node in (("w0", gpu_nodes[0]), ("w1", gpu_nodes[1]), ("ps", cpu_node)):
        w.kube.bind_pod(NS, pod, node)
    w.sync(2)
    consumed = w.condition(c.BOOKING_EXPIRED, name)
    assert consumed is not None and consumed.reason == c.BOOKING_CONSUMED
    assert len(w.kube.list("provisioningrequests", NS)) == 1  # nothing asked again


# --- regressions ------------------------------------------------------------------------------


def test_a_long_dotted_gang_name_still_makes_a_valid_request_name(k: Cluster) -> None:
    """PodGroup names are DNS subdomains: cut at 40 characters, one could end in '.',
    and '.-' is no DNS subdomain (the API server refused the request: 422)."""
    gang = "a" * 39 + ".b" + "c" * 20
    k.kube.create(objects.coscheduling_pod_group(NS, gang, 1))
    k.admit(gang_pod("w0", GPU, gang=gang))
    stuck(k, "w0")
    k.pass_once()
    (request,) = k.requests()
    assert request["metadata"]["name"] == k.request_name(gang, 1)
    assert k.pod("w0")["metadata"]["annotations"][CONSUME] == k.request_name(gang, 1)


def test_a_gang_recreated_under_its_name_does_not_inherit_the_old_failed_request(
        k: Cluster) -> None:
    """`kubectl delete --cascade=orphan` (or a garbage collector behind) leaves the old
    gang's request; the new gang of the same name is a new owner (another uid) and must
    get its own request, not wait on the old one's failure."""
    first = whole_gang(k)
    k.set_request_condition(first, c.FAILED, "True", "NoMatchingGroup", "too big")
    k.pass_once()
    assert k.kube.delete("podgroups", "train", NS, group=COSCHED.group)
    for pod in ("w0", "w1", "ps"):
        k.kube.delete("pods", pod, NS)
    new = k.kube.create(objects.coscheduling_pod_group(NS, "train", 1))
    k.admit(gang_pod("x0", CPU))
    stuck(k, "x0")
    for _ in range(3):
        k.pass_once()
    (request,) = k.requests()
    assert request["metadata"]["ownerReferences"][0]["uid"] == new["metadata"]["uid"]
    assert c.read((request.get("status") or {}).get("conditions")) == {}
    assert k.pod("x0")["metadata"]["annotations"][CONSUME] == request["metadata"]["name"]
    assert pod_sets(k, request) == [(1, CPU)]


@pytest.mark.parametrize("cached", [True, False], ids=["pod-cache", "listed"])
def test_a_gang_recreated_over_its_pods_deletes_the_old_request_before_asking_again(
        cached: bool) -> None:
    """Adversary seed 696423963 (B1): the PodGroup is deleted with --cascade=orphan and made
    again while its pods stay pending. The old request still stands (the sweep runs every
    300 s in a service) and counts those pods: asking for them again beside it would buy
    two gangs of nodes for one. The old one is deleted first."""
    with cluster(cached=cached, sweep_seconds=300.0) as k:
        k.clock.advance(1000.0)  # the first pass sweeps; later ones within 300 s do not
        first = whole_gang(k)
        assert k.kube.delete("podgroups", "train", NS, group=COSCHED.group)
        new = k.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
        k.clock.advance(1.0)
        k.pass_once()
        (request,) = k.requests()
        assert request["metadata"]["name"] != first
        assert request["metadata"]["ownerReferences"][0]["uid"] == new["metadata"]["uid"]
        assert pod_sets(k, request) == [(1, CPU), (2, GPU)]
        assert set(k.counted(request["metadata"]["name"]) or {}) == {"w0", "w1", "ps"}


# --- only the acting leader bridges gangs -------------------------------------------------


def test_a_bridge_that_may_not_act_writes_nothing(k: Cluster) -> None:
    """A standby neither asks nor marks: the gang's pods were marked when they were
    created (the webhook runs on every replica), so no pod depends on which one leads."""
    acting = {"now": False}
    k.bridge.act_while(lambda: acting["now"])
    k.kube.create(objects.coscheduling_pod_group(NS, "train", 3))
    for name, req in (("w0", GPU), ("w1", GPU), ("ps", CPU)):
        k.admit(gang_pod(name, req))
    stuck(k, "w0", "w1", "ps")
    before = k.kube.resource_version
    k.pass_once()
    assert k.kube.resource_version == before  # whole and stuck: the leader's to ask for
    for pod in ("w0", "w1", "ps"):
        assert k.pod(pod)["metadata"]["annotations"][CONSUME] == k.request_name("train", 1)
    acting["now"] = True
    k.pass_once()
    (made,) = k.requests()
    assert made["metadata"]["name"] == k.request_name("train", 1)
    assert k.podgroup()["metadata"]["annotations"][REQUEST_ANNOTATION] == \
        k.request_name("train", 1)


def test_the_controller_bridges_gangs_only_while_its_replica_leads() -> None:
    """Two replicas: the standby's bridge annotated the gang and created its request
    beside the leader's. It asks for gangs from the moment it leads, woken at once rather
    than at its next resync."""
    from adapters.fake import FakeCloud
    from adapters.registry import create_adapter
    from provider.app import Provider
    from provider.attempts.executor import inline_runner
    from provider.controller.controller import Controller
    from provider.leadership.elector import LeaderElector, Timing
    from provider.leadership.kube import KubeLeaseStore
    from tests.kit.helpers import BASE_CONFIG, ManualPool, config

    clock = ManualClock()

    def now() -> dt.datetime:
        return dt.datetime.fromtimestamp(clock.now(), dt.UTC)

    with FakeKube(clock=now) as kube, kube.client() as api:
        store = KubeLeaseStore(api, "kube-system", "allset")
        holder = LeaderElector(store, "pod-a", clock, Timing(15.0, 10.0, 2.0))
        assert holder.step()
        box: list[Provider] = []
        standby = LeaderElector(store, "pod-b", clock, Timing(15.0, 10.0, 2.0),
                                on_change=lambda _: box[0].leadership_changed())
        assert not standby.step()
        cfg = config(BASE_CONFIG)
        cloud = create_adapter(cfg, clock)
        assert isinstance(cloud, FakeCloud)
        provider = Provider(cfg, cloud, clock, pool=ManualPool(), runner=inline_runner,
                            leadership=standby)
        box.append(provider)
        provider.refresh_now()
        bridge = GangBridge(GangApi(api, monotonic=clock.now), list(SOURCES.values()), clock)
        controller = Controller(provider, KubeApi(api), workers=1, gangs=bridge)
        try:
            group = kube.create(objects.coscheduling_pod_group(NS, "train", 3))
            for name, req in (("w0", GPU), ("w1", GPU), ("ps", CPU)):
                kube.create(gang_pod(name, req))
            for name in ("w0", "w1", "ps"):
                kube.set_pod_unschedulable(NS, name)
            controller.sync_once()
            assert kube.list("provisioningrequests", NS) == []
            assert kube.count("create", "podtemplates") == 0
            assert kube.count("patch", "podgroups") == 0  # the gang is not annotated
            assert not bridge._wake.is_set()

            clock.advance(16)  # pod-a stopped renewing: pod-b takes the lease over
            assert standby.step()
            clock.advance(provider.config.listing_settle_seconds)
            provider.refresh_now()  # a listing from after it took over: it acts now
            assert provider.acting() and bridge._wake.is_set()
            controller.sync_once()
            (made,) = kube.list("provisioningrequests", NS)
            assert made["metadata"]["name"] == request_name(
                COSCHED, "train", group["metadata"]["uid"], 1)
        finally:
            controller.stop()
            provider.stop()
