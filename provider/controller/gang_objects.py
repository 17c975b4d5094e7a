"""What the gang bridge reads of pods and requests (provider/controller/gang_bridge.py):
a pod as a gang's member, the shape that puts it in a pod set, a request's state and the
pod sets it planned."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from provider.controller import conditions as c
from provider.domain.gangs.decide import Member, PodSet, RequestPhase, RequestState

# On a pod consuming a gang's request: the pod set (PodTemplate) that counted it. Recorded,
# not recomputed, so a pod whose shape changed since (a toleration added) keeps its place.
# Written by allset before issue 53, which patched pods; read for requests made then.
POD_SET_ANNOTATION = "allset.dev/gang-pod-set"
# On a request the bridge made: which of the gang's pods it counted, and in which pod set
# (JSON: pod name -> PodTemplate name; "" for a pod it has no place for, which waits for
# the gang's next request). The bridge's own record: it never writes pods (issue 53).
PLACES_ANNOTATION = "allset.dev/gang-places"
_PLANNED_FIELDS = ("nodeSelector", "affinity", "tolerations", "resourceClaims", "overhead",
                   "resources", "priorityClassName", "runtimeClassName")


def template_name(request: str, gang_uid: str, shape: str) -> str:
    """A request's PodTemplate of one shape: named for the gang's uid and the shape, so a
    template that exists already is this one, made by an earlier pass (never one of a gang
    deleted and recreated under its name, which may hold other pods)."""
    digest = hashlib.sha256(f"{gang_uid}/{shape}".encode()).hexdigest()[:10]
    return f"{request}-{digest}"


def planned_spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What of a pod decides where it fits: containers' resources and the placement
    rules. Nothing that names this pod or its node."""
    spec = pod.get("spec") or {}

    def containers(key: str) -> list[dict[str, Any]]:
        return [{k: v for k, v in ct.items() if k in ("name", "image", "resources",
                                                       "restartPolicy")}
                for ct in spec.get(key) or []]

    out: dict[str, Any] = {"containers": containers("containers")}
    if spec.get("initContainers"):
        out["initContainers"] = containers("initContainers")
    out.update({k: spec[k] for k in _PLANNED_FIELDS if spec.get(k)})
    return out


def shape_of(pod: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(planned_spec(pod), sort_keys=True).encode()
                          ).hexdigest()[:16]


def scheduled(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def unschedulable(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and \
                cond.get("reason") in ("Unschedulable", "SchedulerError"):
            return True
    return False


def member(pod: Mapping[str, Any]) -> Member:
    meta = pod.get("metadata") or {}
    notes = meta.get("annotations") or {}
    return Member(
        name=str(meta.get("name")),
        scheduled=scheduled(pod),
        unschedulable=unschedulable(pod),
        consuming=notes.get(c.CONSUME_ANNOTATIONS[0]),
        shape=shape_of(pod),
        counted_in=notes.get(POD_SET_ANNOTATION),
        created=str(meta.get("creationTimestamp") or ""),
    )


def pod_sets(request: Mapping[str, Any], gang_uid: str, shapes: Iterable[str]
             ) -> tuple[PodSet, ...]:
    """What ``request`` planned, each pod set with its shape where one of ``shapes`` (the
    gang's pods') names its template as the bridge names templates; None where none does
    (no pod of the gang has that shape now, or a template named otherwise: see
    ``template_shape``)."""
    name = str((request.get("metadata") or {}).get("name"))
    by_template = {template_name(name, gang_uid, s): s for s in shapes}
    out = []
    for ps in (request.get("spec") or {}).get("podSets") or []:
        ref = str((ps.get("podTemplateRef") or {}).get("name") or "")
        count = ps.get("count")
        out.append(PodSet(ref, by_template.get(ref), count if isinstance(count, int) else 0))
    return tuple(out)


def live(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return not meta.get("deletionTimestamp") and phase in (None, "Pending", "Running")


def request_state(obj: Mapping[str, Any], generation: int) -> RequestState:
    conds = c.read((obj.get("status") or {}).get("conditions"))
    name = str((obj.get("metadata") or {}).get("name"))
    failed = conds.get(c.FAILED)
    if failed is not None and failed.status == "True":
        return RequestState(name, generation, RequestPhase.FAILED, failed.reason,
                            failed.message)
    expired = conds.get(c.BOOKING_EXPIRED)
    if expired is not None and expired.status == "True":
        return RequestState(name, generation, RequestPhase.DONE, expired.reason,
                            expired.message)
    prov = conds.get(c.PROVISIONED)
    if prov is not None:
        return RequestState(name, generation, RequestPhase.OPEN, prov.reason, prov.message)
    return RequestState(name, generation, RequestPhase.OPEN)


def template_shape(template: Mapping[str, Any] | None) -> str | None:
    """The shape of a PodTemplate's pods, as ``shape_of`` tells a pod's (None: no template)."""
    if template is None:
        return None
    return shape_of({"spec": (template.get("template") or {}).get("spec") or {}})


def places(request: Mapping[str, Any]) -> dict[str, str] | None:
    """The bridge's record of what ``request`` counted (None: a request with no record, made
    before issue 53, whose pods carry it; or one the bridge did not make)."""
    text = ((request.get("metadata") or {}).get("annotations") or {}).get(PLACES_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    return {str(k): str(v) for k, v in found.items() if isinstance(v, str)}


def places_text(counted: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(counted.items())), separators=(",", ":"))
