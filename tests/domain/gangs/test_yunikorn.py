"""YuniKorn's gangs as its pods declare them (provider/domain/gangs/yunikorn.py), read from
the examples of YuniKorn's own user guide (yunikorn-site docs/user_guide/gang_scheduling.md:
the Job "gang-scheduling-job-example" and the two Spark task groups)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from provider.domain.gangs import yunikorn

# The guide's Job template, as the pod it makes carries it (labels and annotations).
GUIDE_TASK_GROUPS = """[{
    "name": "task-group-example",
    "minMember": 2,
    "minResource": {
      "cpu": "100m",
      "memory": "50M"
    },
    "nodeSelector": {},
    "tolerations": [],
    "affinity": {},
    "topologySpreadConstraints": []
}]"""


def guide_pod(name: str = "gang-scheduling-job-example-abcde", **notes: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"app": "sleep",
                                    "applicationId": "gang-scheduling-job-example",
                                    "queue": "root.sandbox"},
                         "annotations": {
                             "yunikorn.apache.org/task-group-name": "task-group-example",
                             "yunikorn.apache.org/task-groups": GUIDE_TASK_GROUPS, **notes}},
            "spec": {"schedulerName": "yunikorn", "restartPolicy": "Never",
                     "containers": [{"name": "sleep30", "image": "alpine:latest",
                                     "resources": {"requests": {"cpu": "100m",
                                                                "memory": "50M"}}}]}}


def placeholder(owner: str, **flags: str) -> dict[str, Any]:
    """A placeholder as the k8shim makes it (pkg/cache/placeholder.go): owned by the
    originator pod, flagged by annotation."""
    notes = flags or {"internal.yunikorn.apache.org/placeholder": "true"}
    return {"metadata": {"name": "tg-x-task-group-example-0", "annotations": {
        **notes, "yunikorn.apache.org/task-group-name": "task-group-example"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": owner,
                             "uid": "u1"}]},
        "spec": {"schedulerName": "yunikorn"}}


def test_the_guides_job_pod_declares_one_task_group_of_two() -> None:
    pod = guide_pod()
    (group,) = yunikorn.task_groups(pod)
    assert group == yunikorn.TaskGroup("task-group-example", 2,
                                       {"cpu": "100m", "memory": "50M"})
    assert yunikorn.members(pod) == 2
    assert yunikorn.app_id(pod) == "gang-scheduling-job-example"  # label applicationId
    assert yunikorn.queue_of(pod) == "root.sandbox"  # label queue
    assert not yunikorn.is_placeholder(pod)


def test_the_spark_driver_declares_both_groups_and_the_gang_is_their_sum() -> None:
    """The guide's Spark example: a driver group of 1 and an executor group of 10, keys
    in any case (Go's encoding/json matches them without regard to case)."""
    groups = [{"name": "spark-driver", "minMember": 1,
               "minResource": {"cpu": "1", "memory": "2Gi"}},
              {"Name": "spark-executor", "MINMEMBER": 10,
               "minResource": {"cpu": "1", "memory": "2Gi"},
               "nodeSelector": {"pool": "gpu"},
               "tolerations": [{"key": "gpu", "operator": "Exists"}]}]
    pod = guide_pod(**{"yunikorn.apache.org/task-groups": json.dumps(groups)})
    driver, executor = yunikorn.task_groups(pod)
    assert (driver.name, driver.min_member) == ("spark-driver", 1)
    assert (executor.name, executor.min_member, dict(executor.node_selector)) == (
        "spark-executor", 10, {"pool": "gpu"})
    assert executor.tolerations == ({"key": "gpu", "operator": "Exists"},)
    assert yunikorn.members(pod) == 11


@pytest.mark.parametrize(("text", "why"), [
    ("not json", "not JSON"),
    ('{"name": "a"}', "not a list"),
    ('[{"minMember": 1, "minResource": {}}]', "has no name"),
    ('[{"name": "a", "minMember": 1}]', "has no minResource"),
    ('[{"name": "a", "minMember": 0, "minResource": {}}]', "minMember must be a positive"),
    ('[{"name": "a", "minMember": true, "minResource": {}}]', "minMember must be a positive"),
])
def test_task_groups_yunikorn_refuses_are_no_gang(text: str, why: str) -> None:
    """What GetTaskGroupsFromAnnotation refuses (the app then runs without a gang)."""
    pod = guide_pod(**{"yunikorn.apache.org/task-groups": text})
    with pytest.raises(ValueError, match=why):
        yunikorn.task_groups(pod)
    assert yunikorn.members(pod) is None


def test_a_placeholder_names_its_originator_and_other_pods_name_nothing() -> None:
    assert yunikorn.originator(placeholder("driver-0")) == "driver-0"
    # The flags of releases before 1.7: the annotation, then the label.
    assert yunikorn.originator(placeholder(
        "driver-0", **{"yunikorn.apache.org/placeholder": "True"})) == "driver-0"
    old_label = placeholder("driver-0", x="y")
    old_label["metadata"]["labels"] = {"placeholder": "true"}
    assert yunikorn.originator(old_label) == "driver-0"
    # The first flag that parses decides: an explicit false is no placeholder.
    assert yunikorn.originator(placeholder(
        "driver-0", **{"internal.yunikorn.apache.org/placeholder": "false",
                       "yunikorn.apache.org/placeholder": "true"})) is None
    assert yunikorn.originator(guide_pod()) is None  # a real pod asks nothing of its own


def test_only_pods_of_yunikorn_have_an_application() -> None:
    pod = guide_pod()
    pod["spec"]["schedulerName"] = "default-scheduler"
    assert yunikorn.app_id(pod) is None
    pod = guide_pod()
    pod["metadata"]["labels"]["yunikorn.apache.org/app-id"] = "first"
    assert yunikorn.app_id(pod) == "first"  # the newer label comes before applicationId

