"""Apache YuniKorn's gangs, as its pods declare them (pure).

Facts from github.com/apache/yunikorn-k8shim v1.8.0 and yunikorn-core v1.8.0:

- A pod of YuniKorn (``spec.schedulerName: yunikorn``) belongs to an application, named by
  the first of: label ``yunikorn.apache.org/app-id``, annotation ``yunikorn.apache.org/app-id``,
  label ``applicationId``, label ``spark-app-selector`` (pkg/common/utils/utils.go,
  GetApplicationIDFromPod); and to a queue, named by label ``yunikorn.apache.org/queue``,
  annotation ``yunikorn.apache.org/queue`` or label ``queue`` (GetQueueNameFromPod).
- The application's gang is its task groups: annotation ``yunikorn.apache.org/task-groups``,
  a JSON list of objects with ``name``, ``minMember``, ``minResource``, ``nodeSelector``,
  ``tolerations``, ``affinity``, ``topologySpreadConstraints``, ``labels`` and
  ``annotations`` (pkg/cache/amprotocol.go, TaskGroup, decoded by Go's encoding/json, which
  matches keys without regard to case). The list is refused when a group has no name, no
  minResource, or a minMember that is not positive (pkg/cache/utils.go,
  GetTaskGroupsFromAnnotation). A pod names its own group in
  ``yunikorn.apache.org/task-group-name``.
- For each group YuniKorn creates ``minMember`` placeholder pods (pkg/cache/placeholder.go):
  annotation ``internal.yunikorn.apache.org/placeholder: "true"`` (until 1.7 also the
  annotation ``yunikorn.apache.org/placeholder`` or the label ``placeholder``:
  GetPlaceholderFlagFromPodSpec), owned by the application's originator pod (the first pod
  of the application it saw), requesting ``minResource`` with the group's nodeSelector,
  tolerations, affinity and topology spread. The placeholders are what YuniKorn asks the
  autoscaler for: a real pod that can replace a placeholder of its group is neither
  allocated on its own nor counted for scale-up (yunikorn-core
  pkg/scheduler/objects/application.go, canReplace), and a pod held back by its queue's
  quota gets ``PodScheduled=False`` with reason ``SchedulingSkipped``, not
  ``Unschedulable`` (k8shim pkg/cache/context.go, HandleContainerStateUpdate).

So allset reads a YuniKorn gang as: its members are the placeholders, named by their owner,
the originator pod, which is the gang object and holds the task groups."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DOMAIN = "yunikorn.apache.org/"
SCHEDULER_NAME = "yunikorn"
APP_ID_LABEL = DOMAIN + "app-id"
APP_ID_ANNOTATION = DOMAIN + "app-id"
OLD_APP_ID_LABELS = ("applicationId", "spark-app-selector")
QUEUE_LABEL = DOMAIN + "queue"
QUEUE_ANNOTATION = DOMAIN + "queue"
OLD_QUEUE_LABEL = "queue"
TASK_GROUPS_ANNOTATION = DOMAIN + "task-groups"
TASK_GROUP_NAME_ANNOTATION = DOMAIN + "task-group-name"
PLACEHOLDER_ANNOTATION = "internal.yunikorn.apache.org/placeholder"
OLD_PLACEHOLDER_ANNOTATION = DOMAIN + "placeholder"
OLD_PLACEHOLDER_LABEL = "placeholder"


@dataclass(frozen=True, slots=True)
class TaskGroup:
    name: str
    min_member: int
    min_resource: Mapping[str, str]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


def _meta(pod: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    found = (pod.get("metadata") or {}).get(key)
    return found if isinstance(found, Mapping) else {}


def _truthy(value: Any) -> bool | None:
    """Go's strconv.ParseBool: None when the text is not a boolean."""
    text = str(value) if isinstance(value, str) else None
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def is_placeholder(pod: Mapping[str, Any]) -> bool:
    """The first of the three flags that parses as a boolean decides."""
    notes, labels = _meta(pod, "annotations"), _meta(pod, "labels")
    for value in (notes.get(PLACEHOLDER_ANNOTATION), notes.get(OLD_PLACEHOLDER_ANNOTATION),
                  labels.get(OLD_PLACEHOLDER_LABEL)):
        flag = _truthy(value)
        if flag is not None:
            return flag
    return False


def originator(pod: Mapping[str, Any]) -> str | None:
    """The originator pod a placeholder belongs to (its owner reference of kind Pod); None
    for any other pod."""
    if not is_placeholder(pod):
        return None
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Pod" and \
                str(ref.get("apiVersion") or "v1") == "v1" and \
                isinstance(ref.get("name"), str) and ref["name"]:
            return str(ref["name"])
    return None


def app_id(pod: Mapping[str, Any]) -> str | None:
    """The application a pod of YuniKorn's belongs to, in YuniKorn's order of places."""
    if (pod.get("spec") or {}).get("schedulerName") != SCHEDULER_NAME:
        return None
    labels, notes = _meta(pod, "labels"), _meta(pod, "annotations")
    for value in (labels.get(APP_ID_LABEL), notes.get(APP_ID_ANNOTATION),
                  *(labels.get(k) for k in OLD_APP_ID_LABELS)):
        if isinstance(value, str) and value:
            return value
    return None


def queue_of(pod: Mapping[str, Any]) -> str | None:
    """The queue a pod names (as written: a full path ``root.a.b`` or a leaf name)."""
    labels, notes = _meta(pod, "labels"), _meta(pod, "annotations")
    for value in (labels.get(QUEUE_LABEL), notes.get(QUEUE_ANNOTATION),
                  labels.get(OLD_QUEUE_LABEL)):
        if isinstance(value, str) and value:
            return value
    return None


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """A JSON key as encoding/json matches it into a Go field: exactly, else ignoring case."""
    if name in obj:
        return obj[name]
    return next((v for k, v in obj.items() if isinstance(k, str) and k.lower() == name.lower()),
                None)


def task_groups(obj: Mapping[str, Any]) -> tuple[TaskGroup, ...]:
    """The task groups an originator pod declares; ValueError saying what is wrong (YuniKorn
    then schedules the application without a gang, with a TaskGroupsError Event)."""
    text = _meta(obj, "annotations").get(TASK_GROUPS_ANNOTATION)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"no {TASK_GROUPS_ANNOTATION} annotation")
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise ValueError(f"{TASK_GROUPS_ANNOTATION} is not JSON: {err}") from err
    if not isinstance(raw, list):
        raise ValueError(f"{TASK_GROUPS_ANNOTATION} is not a list of task groups")
    return tuple(_task_group(g, i) for i, g in enumerate(raw))


def _task_group(raw: Any, index: int) -> TaskGroup:
    where = f"{TASK_GROUPS_ANNOTATION}[{index}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} is not an object")
    name, members = _field(raw, "name"), _field(raw, "minMember")
    resource = _field(raw, "minResource")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where} has no name")
    if not isinstance(resource, Mapping):
        raise ValueError(f"{where} ({name}) has no minResource")
    if isinstance(members, bool) or not isinstance(members, int) or members <= 0:
        raise ValueError(f"{where} ({name}): minMember must be a positive number")
    selector = _field(raw, "nodeSelector")
    tolerations = _field(raw, "tolerations")
    return TaskGroup(
        name=name, min_member=members,
        min_resource={str(k): str(v) for k, v in resource.items()},
        node_selector={str(k): str(v) for k, v in selector.items()}
        if isinstance(selector, Mapping) else {},
        tolerations=tuple(t for t in tolerations if isinstance(t, Mapping))
        if isinstance(tolerations, Sequence) and not isinstance(tolerations, str) else ())


def members(obj: Mapping[str, Any]) -> int | None:
    """The gang's size: every task group's minMember, summed; None when the pod declares no
    usable task groups (then it is no gang)."""
    try:
        groups = task_groups(obj)
    except ValueError:
        return None
    return sum(g.min_member for g in groups) or None
