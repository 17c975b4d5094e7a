"""The adversary's by-name watch (election.py's ``_Watched``) keeps a real watch's promise:
it runs from the version its list read, so a write that lands while the list's answer is
still on its way is delivered (watch.py watches from the list's resourceVersion; the
Kubernetes API sends every change after a watch's resourceVersion). Found by seed
989619518: a watch that started from the version current when a held list came back missed
the leader's own withdrawal, and its cache went on saying the slice named the leader."""

from __future__ import annotations

import random
import types
from typing import Any

from tests.adversary.election import _Watched
from tests.adversary.sched import Scheduler
from tests.fakes.kube import FakeKube

NS = "allset-system"


def _slice(addresses: list[str]) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "allset-leader", "namespace": NS},
            "addressType": "IPv4",
            "endpoints": [{"addresses": addresses}] if addresses else []}


def test_a_write_landing_while_the_list_answers_is_delivered() -> None:
    kube = FakeKube()
    kube.create(_slice(["10.0.0.2"]))
    link: Any = types.SimpleNamespace(partition=None)
    watched = _Watched(kube, "endpointslices", "allset-leader", NS, link)

    def late_list() -> dict[str, Any] | None:
        read = kube.get("endpointslices", "allset-leader", NS)
        # The withdrawal lands after the server read the slice, before the answer arrives.
        kube.modify("endpointslices", "allset-leader", lambda o: o.update(endpoints=[]), NS)
        return read

    follow = watched.follow(late_list, lambda o: o, lambda o: str(
        o["metadata"]["resourceVersion"]) if o is not None else "")
    seen: list[Any] = []

    def watch() -> None:
        for obj in follow():
            seen.append(obj)
            if len(seen) == 2:
                return

    sched = Scheduler(random.Random(0))
    task = sched.spawn("watch", watch)
    for _ in range(10):
        if task.done:
            break
        sched.step(task)
    assert task.done and task.error is None
    assert [o["endpoints"] for o in seen] == [[{"addresses": ["10.0.0.2"]}], []]
