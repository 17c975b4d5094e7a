"""Whether a gang's scheduler would admit it into its queue now (provider/domain/gangs/
queues.py), on the queues of each scheduler's own examples: Volcano's Queue page
(volcano.sh docs, "Queue": a queue ``test`` of weight 1 and ``capability: {cpu: 2}``), KAI
Scheduler's quick start (docs/quickstart/default-queues.yaml: default-parent-queue and
default-queue, quota 0 and limit -1 in cpu, gpu and memory) and YuniKorn's queue guide
(docs/user_guide/queue_config.md: ``namespaces`` with max {memory: 10G, vcore: 100} and
``level1`` under it with max {memory: 5G, vcore: 50})."""

from __future__ import annotations

from typing import Any

import yaml

from provider.domain.gangs import queues as q
from provider.domain.model import Resources

GPU = "nvidia.com/gpu"


def pod(cpu: str = "1", memory: str = "1Gi", gpu: str = "", node: str = "") -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory, **({GPU: gpu} if gpu else {})}
    return {"spec": {"nodeName": node, "containers": [
        {"name": "c", "resources": {"requests": requests}}]}}


def need(*pods: dict[str, Any]) -> Resources:
    return q.total(pods)


# --- Volcano ----------------------------------------------------------------------------------

def volcano_test_queue(allocated: dict[str, str] | None = None, state: str = "Open",
                       parent: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1, "reclaimable": False, "capability": {"cpu": 2}}
    if parent:
        spec["parent"] = parent
    return {"metadata": {"name": "test"}, "spec": spec,
            "status": {"state": state, "allocated": allocated or {}}}


def test_volcano_admits_within_capability_and_not_beyond_it() -> None:
    queues = {"test": volcano_test_queue()}
    assert q.volcano(queues, "test", need(pod(), pod())) is None  # 2 cpus of 2
    refusal = q.volcano(queues, "test", need(pod(), pod(), pod()))
    assert refusal is not None
    assert (refusal.queue, refusal.resource) == ("test", "cpu")
    assert refusal.text() == ("Volcano queue test: cpu: the gang needs 3 and 0 of its "
                              "capability 2 is in use")
    # What the queue has allocated counts: one cpu in use leaves room for one pod.
    held = {"test": volcano_test_queue({"cpu": "1"})}
    assert q.volcano(held, "test", need(pod())) is None
    assert q.volcano(held, "test", need(pod(), pod())) is not None
    # Memory is not capped: any amount is admitted.
    assert q.volcano(queues, "test", need(pod(cpu="500m", memory="1Ti"))) is None


def test_volcano_weighs_min_resources_when_larger_than_the_stuck_pods() -> None:
    queues = {"test": volcano_test_queue()}
    assert q.volcano(queues, "test", need(pod()), q.amounts({"cpu": "3"})) is not None
    assert q.volcano(queues, "test", need(pod()), q.amounts({"cpu": "2"})) is None


def test_volcano_a_closed_missing_or_capped_parent_queue_admits_nothing() -> None:
    refusal = q.volcano({"test": volcano_test_queue(state="Closed")}, "test", need(pod()))
    assert refusal is not None and refusal.resource == "state"
    refusal = q.volcano({"gone": None}, "gone", need(pod()))
    assert refusal is not None and refusal.resource == "existence"
    # Hierarchical queues: the parent's capability binds the child too.
    parent = {"metadata": {"name": "org"}, "spec": {"capability": {GPU: "8"}},
              "status": {"state": "Open", "allocated": {GPU: "8"}}}
    queues = {"test": volcano_test_queue(parent="org"), "org": parent}
    refusal = q.volcano(queues, "test", need(pod(gpu="1")))
    assert refusal is not None and (refusal.queue, refusal.resource) == ("org", GPU)
    # A capability of 0 admits none of that resource (not "unbounded").
    zero = {"test": {"spec": {"capability": {GPU: "0"}}, "status": {"state": "Open"}}}
    assert q.volcano(zero, "test", need(pod(gpu="1"))) is not None


# --- KAI ----------------------------------------------------------------------------------

KAI_QUICKSTART = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: default-parent-queue
spec:
  resources:
    cpu: {limit: -1, overQuotaWeight: 1, quota: 0}
    gpu: {limit: -1, overQuotaWeight: 1, quota: 0}
    memory: {limit: -1, overQuotaWeight: 1, quota: 0}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: default-queue
spec:
  parentQueue: default-parent-queue
  resources:
    cpu: {limit: -1, overQuotaWeight: 1, quota: 0}
    gpu: {limit: -1, overQuotaWeight: 1, quota: 0}
    memory: {limit: -1, overQuotaWeight: 1, quota: 0}
"""


def kai_quickstart() -> dict[str, dict[str, Any] | None]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(KAI_QUICKSTART)}


def test_kai_quickstart_queues_admit_a_preemptible_gang_and_not_a_non_preemptible_one() -> None:
    """Limit -1 is unlimited; quota 0 holds no non-preemptible gang (quota_check.go)."""
    queues = kai_quickstart()
    gang = need(pod(gpu="8"), pod(gpu="8"), pod())
    assert q.kai(queues, "default-queue", gang, preemptible=True) is None
    refusal = q.kai(queues, "default-queue", gang, preemptible=False)
    assert refusal is not None and refusal.queue == "default-queue"
    assert refusal.resource == GPU and "quota (the gang is non-preemptible)" in refusal.message


def test_kai_a_gpu_limit_holds_the_gang_at_the_queue_or_its_parent() -> None:
    queues = kai_quickstart()
    child = queues["default-queue"]
    assert child is not None
    child["spec"]["resources"]["gpu"] = {"quota": 16, "limit": 16, "overQuotaWeight": 1}
    child["status"] = {"allocated": {GPU: "8"}}
    gang = need(pod(gpu="8"), pod(gpu="8"), pod())
    refusal = q.kai(queues, "default-queue", gang, preemptible=True)
    assert refusal is not None and (refusal.queue, refusal.resource) == ("default-queue", GPU)
    assert refusal.text() == ("KAI queue default-queue: nvidia.com/gpu: the gang needs 16 "
                              "and 8 of its limit 16 is in use")
    child["status"] = {}
    assert q.kai(queues, "default-queue", gang, preemptible=True) is None
    parent = queues["default-parent-queue"]
    assert parent is not None
    parent["spec"]["resources"]["cpu"] = {"quota": 0, "limit": 8000, "overQuotaWeight": 1}
    parent["status"] = {"allocated": {"cpu": "7"}}  # millicpus: 7000 of 8000 held
    refusal = q.kai(queues, "default-queue", gang, preemptible=True)
    assert refusal is not None and (refusal.queue, refusal.resource) == (
        "default-parent-queue", "cpu")


def test_kai_a_missing_queue_admits_nothing_and_preemptibility_follows_priority() -> None:
    refusal = q.kai({"team-a": None}, "team-a", need(pod()), preemptible=True)
    assert refusal is not None and refusal.resource == "existence"
    group: dict[str, Any] = {"spec": {"minMember": 3, "queue": "team-a"}}
    assert q.kai_preemptible(group, None)  # KAI's default priority, 50
    assert q.kai_preemptible(group, 99) and not q.kai_preemptible(group, 100)
    group["spec"]["preemptibility"] = "preemptible"
    assert q.kai_preemptible(group, 1000)
    group["spec"]["preemptibility"] = "non-preemptible"
    assert not q.kai_preemptible(group, 1)


# --- YuniKorn -------------------------------------------------------------------------------

YUNIKORN_GUIDE = """
partitions:
  - name: default
    queues:
      - name: namespaces
        parent: true
        maxapplications: 12
        resources:
          guaranteed:
            {memory: 1G, vcore: 10}
          max:
            {memory: 10G, vcore: 100}
        queues:
          - name: level1
            maxapplications: 8
            resources:
              guaranteed:
                {memory: 500M, vcore: 5}
              max:
                {memory: 5G, vcore: 50}
"""


def test_yunikorn_reads_the_guides_tree_under_the_root_it_inserts() -> None:
    tree = q.yunikorn_queues(yaml.safe_load(YUNIKORN_GUIDE))
    assert set(tree.max) == {"root", "root.namespaces", "root.namespaces.level1"}
    assert tree.max["root.namespaces.level1"] == {"memory": 5 * 10**12, "vcore": 50_000}
    assert q.yunikorn_path(tree, "namespaces.level1") == "root.namespaces.level1"
    assert q.yunikorn_path(tree, "root.Namespaces.Level1") == "root.namespaces.level1"
    assert q.yunikorn_path(tree, "elsewhere") == "root.default"  # no placement rules
    rooted = q.yunikorn_queues({"partitions": [{"name": "default", "queues": [
        {"name": "root", "queues": [{"name": "a"}]}]}]})
    assert set(rooted.max) == {"root", "root.a"}


def test_yunikorn_admits_within_the_max_of_the_queue_and_every_parent() -> None:
    tree = q.yunikorn_queues(yaml.safe_load(YUNIKORN_GUIDE))
    leaf = "root.namespaces.level1"
    assert q.yunikorn(tree, leaf, {}, need(*[pod(cpu="10", memory="1G")] * 5)) is None
    refusal = q.yunikorn(tree, leaf, {}, need(*[pod(cpu="10", memory="500M")] * 6))
    assert refusal is not None and (refusal.queue, refusal.resource) == (leaf, "vcore")
    refusal = q.yunikorn(tree, leaf, {}, need(*[pod(cpu="1", memory="1G")] * 6))
    assert refusal is not None and refusal.text() == (
        "YuniKorn queue root.namespaces.level1: memory: the gang needs 6G and 0 of its max "
        "5G is in use")
    # The parent's max counts what its other children hold.
    usage = {"root.namespaces.other": Resources.of({"vcore": 60_000})}
    refusal = q.yunikorn(tree, leaf, usage, need(*[pod(cpu="10", memory="1G")] * 5))
    assert refusal is not None and refusal.queue == "root.namespaces"
    assert "the gang needs 50 and 60 of its max 100 is in use" in refusal.message


def test_yunikorn_without_the_partition_is_an_error() -> None:
    try:
        q.yunikorn_queues({"partitions": [{"name": "other", "queues": []}]})
    except ValueError as err:
        assert "no partition 'default'" in str(err)
    else:
        raise AssertionError("no error")
