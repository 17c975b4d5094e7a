"""The Pod cache: reads answered from indexes kept right through lists and watch events
(a request's placed consumers, pending pods, a namespace's pods), and a request woken
when one of its pods changes."""

from __future__ import annotations

import threading
from typing import Any

from provider.controller.kube import KubeApi
from provider.controller.pod_cache import PodCache
from tests.fakes.kube import FakeKube, objects

CONSUME = {"autoscaling.x-k8s.io/consume-provisioning-request": "job"}


def test_reads_follow_lists_and_watch_events() -> None:
    with FakeKube() as kube, kube.client() as api:
        kube.create(objects.pod("ml", "a", CONSUME, node_name="n1"))
        kube.create(objects.pod("ml", "b", CONSUME))
        kube.create(objects.pod("other", "c", CONSUME, node_name="n2"))
        woken: list[str] = []
        cache = PodCache(KubeApi(api), woken.append, watch_seconds=1)
        cache.relist()
        assert cache.scheduled_consumers("ml", "job") == 1
        assert cache.scheduled_consumers("other", "job") == 1
        assert [p["metadata"]["name"] for p in cache.pending()] == ["b"]
        assert sorted(p["metadata"]["name"] for p in cache.in_namespace("ml")) == ["a", "b"]
        assert sorted(woken) == ["ml/job", "other/job"]

        woken.clear()
        stop = threading.Event()
        runner = threading.Thread(target=cache.run, args=(stop,), daemon=True)
        runner.start()
        kube.wait_for_watchers(1, "pods")

        def bind(obj: dict[str, Any]) -> None:
            obj["spec"]["nodeName"] = "n3"
            obj["status"]["phase"] = "Running"

        kube.modify("pods", "b", bind, "ml")
        kube.delete("pods", "c", "other")
        deadline = threading.Event()
        for _ in range(100):
            if cache.scheduled_consumers("ml", "job") == 2 and \
                    cache.scheduled_consumers("other", "job") == 0:
                break
            deadline.wait(0.05)
        stop.set()
        kube.stop()
        runner.join(5)
        assert cache.scheduled_consumers("ml", "job") == 2
        assert cache.scheduled_consumers("other", "job") == 0
        assert cache.pending() == []
        assert "ml/job" in woken and "other/job" in woken
        # A placed pod is kept slim: what allset reads, not the whole object.
        placed = next(p for p in cache.in_namespace("ml") if p["metadata"]["name"] == "b")
        assert placed["spec"] == {"nodeName": "n3"} and "containers" not in placed["spec"]


def _pod(name: str, node: str, phase: str = "Running", *, daemon: bool = False
         ) -> dict[str, Any]:
    pod = objects.pod("ml", name, node_name=node)
    pod["status"] = {"phase": phase}
    if daemon:
        pod["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "dcgm"}]
    return pod


def test_a_node_is_told_emptied_when_its_last_pod_but_daemons_goes() -> None:
    """Issue 34: requests waiting out a backoff look at once at a Node that emptied. By
    watch event (a pod finished, or deleted) and by a relist that finds it so."""
    with FakeKube() as kube, kube.client() as api:
        emptied: list[str] = []
        cache = PodCache(KubeApi(api), on_emptied=emptied.append)
        for pod in (_pod("a", "n1"), _pod("b", "n1"), _pod("c", "n2"),
                    _pod("dcgm-n1", "n1", daemon=True)):
            cache.apply("ADDED", pod)
        cache.apply("DELETED", _pod("a", "n1"))
        assert emptied == []  # b is still on n1
        cache.apply("MODIFIED", _pod("b", "n1", "Succeeded"))
        assert emptied == ["n1"]  # the DaemonSet's pod does not count
        cache.apply("MODIFIED", _pod("b", "n1", "Succeeded"))  # no news
        cache.apply("DELETED", _pod("dcgm-n1", "n1", daemon=True))
        assert emptied == ["n1"]

        kube.create(_pod("c", "n2"))
        cache.relist()  # n2 is still occupied, n1 was empty already: nothing new
        assert emptied == ["n1"]
        emptied.clear()
        kube.delete("pods", "c", "ml")
        cache.relist()
        assert emptied == ["n2"]
