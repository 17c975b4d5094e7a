"""The validation the real API server applies to what we write: the ProvisioningRequest
CRD's schema and CEL rules (kubernetes/autoscaler, apis/config/crd), and the core Event
rules that bite clients. Failures are 422 Invalid with one cause per field."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from tests.fakes.kube import errors
from tests.fakes.kube.errors import Cause
from tests.fakes.kube.resources import EVENTS, PROVISIONING_REQUESTS, Resource

Json = dict[str, Any]

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
CONDITION_TYPE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
IMMUTABLE_SPEC = ("podSets", "provisioningClassName", "parameters")


def _required(path: str) -> Cause:
    return Cause(path, "FieldValueRequired", "Required value")


def _invalid(path: str, value: Any, why: str) -> Cause:
    return Cause(path, "FieldValueInvalid", f"Invalid value: {value!r}: {why}")


def _name_causes(obj: Json) -> list[Cause]:
    name = obj.get("metadata", {}).get("name", "")
    if not name:
        return [_required("metadata.name")]
    if len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        return [_invalid("metadata.name", name, "a lowercase RFC 1123 subdomain must "
                         "consist of lower case alphanumeric characters, '-' or '.'")]
    return []


def _pod_set_causes(pod_sets: Any) -> list[Cause]:
    at = "spec.podSets"
    if pod_sets is None:
        return [_required(at)]
    if not isinstance(pod_sets, list):
        return [_invalid(at, pod_sets, "must be of type array")]
    if not 1 <= len(pod_sets) <= 32:
        return [_invalid(at, len(pod_sets), "must have between 1 and 32 items")]
    causes: list[Cause] = []
    for i, ps in enumerate(pod_sets):
        if not isinstance(ps, dict):
            causes.append(_invalid(f"{at}[{i}]", ps, "must be of type object"))
            continue
        count = ps.get("count")
        if count is None:
            causes.append(_required(f"{at}[{i}].count"))
        elif not isinstance(count, int) or isinstance(count, bool) or count < 1:
            causes.append(_invalid(f"{at}[{i}].count", count, "should be greater than or "
                                   "equal to 1"))
        ref = ps.get("podTemplateRef")
        name = ref.get("name") if isinstance(ref, dict) else None
        if not isinstance(ref, dict):
            causes.append(_required(f"{at}[{i}].podTemplateRef"))
        elif not name:
            causes.append(_required(f"{at}[{i}].podTemplateRef.name"))
        elif not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
            causes.append(_invalid(f"{at}[{i}].podTemplateRef.name", name,
                                   "should match a DNS subdomain"))
    return causes


def _provreq_spec_causes(spec: Any) -> list[Cause]:
    if not isinstance(spec, dict):
        return [_required("spec")]
    causes = _pod_set_causes(spec.get("podSets"))
    klass = spec.get("provisioningClassName")
    if not klass:
        causes.append(_required("spec.provisioningClassName"))
    elif not isinstance(klass, str) or len(klass) > 253 or not DNS_SUBDOMAIN.match(klass):
        causes.append(_invalid("spec.provisioningClassName", klass,
                               "should match a DNS subdomain of at most 253 characters"))
    params = spec.get("parameters")
    if params is not None:
        if not isinstance(params, dict) or len(params) > 100:
            causes.append(_invalid("spec.parameters", params,
                                   "must be a map of at most 100 entries"))
        else:
            causes += [_invalid(f"spec.parameters.{k}", v, "must be a string of at most 255 "
                                "characters") for k, v in params.items()
                       if not isinstance(v, str) or len(v) > 255]
    return causes


def _condition_causes(conditions: Any) -> list[Cause]:
    at = "status.conditions"
    if not isinstance(conditions, list):
        return [_invalid(at, conditions, "must be of type array")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, c in enumerate(conditions):
        if not isinstance(c, dict):
            causes.append(_invalid(f"{at}[{i}]", c, "must be of type object"))
            continue
        for key in ("lastTransitionTime", "message", "reason", "status", "type"):
            if key not in c:
                causes.append(_required(f"{at}[{i}].{key}"))
        ctype, reason, status = c.get("type"), c.get("reason"), c.get("status")
        if isinstance(ctype, str) and not CONDITION_TYPE.match(ctype):
            causes.append(_invalid(f"{at}[{i}].type", ctype, "should be CamelCase"))
        if ctype in seen:
            causes.append(Cause(f"{at}[{i}]", "FieldValueDuplicate",
                                f"Duplicate value: map[string]interface {{}}{{\"type\":"
                                f"\"{ctype}\"}}"))
        seen.add(str(ctype))
        if "reason" in c and (not isinstance(reason, str) or
                              not CONDITION_REASON.match(reason)):
            causes.append(_invalid(f"{at}[{i}].reason", reason, "should be a CamelCase "
                                   "identifier and may not be empty"))
        stamp = c.get("lastTransitionTime")
        if "lastTransitionTime" in c and not _is_date_time(stamp):
            causes.append(_invalid(f"{at}[{i}].lastTransitionTime", stamp,
                                   "must be a date-time (RFC 3339)"))
        if "status" in c and status not in ("True", "False", "Unknown"):
            causes.append(Cause(f"{at}[{i}].status", "FieldValueNotSupported",
                                f'Unsupported value: {status!r}: supported values: "True", '
                                f'"False", "Unknown"'))
    return causes


def _is_date_time(value: Any) -> bool:
    if not isinstance(value, str) or "T" not in value.upper():
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _provreq_status_causes(status: Any) -> list[Cause]:
    if status is None:
        return []
    if not isinstance(status, dict):
        return [_invalid("status", status, "must be of type object")]
    causes: list[Cause] = []
    if "conditions" in status:
        causes += _condition_causes(status["conditions"])
    details = status.get("provisioningClassDetails")
    if details is not None and (not isinstance(details, dict) or len(details) > 64 or any(
            not isinstance(v, str) or len(v) > 32768 for v in details.values())):
        causes.append(_invalid("status.provisioningClassDetails", "...",
                               "must be a map of at most 64 strings of 32768 characters"))
    return causes


def _event_causes(obj: Json) -> list[Cause]:
    involved = obj.get("involvedObject")
    if not isinstance(involved, dict) or not involved:
        return [_required("involvedObject")]
    namespace = obj.get("metadata", {}).get("namespace", "")
    if involved.get("namespace", "") not in ("", namespace):
        return [_invalid("involvedObject.namespace", involved.get("namespace"),
                         "does not match event.namespace")]
    return []


def check_create(resource: Resource, obj: Json) -> None:
    causes = _name_causes(obj)
    if resource is PROVISIONING_REQUESTS:
        causes += _provreq_spec_causes(obj.get("spec"))
        causes += _provreq_status_causes(obj.get("status"))
    elif resource is EVENTS:
        causes += _event_causes(obj)
    _raise(resource, obj, causes)


def check_update(resource: Resource, new: Json, old: Json, *, immutability: bool = True
                 ) -> None:
    causes: list[Cause] = []
    if resource is PROVISIONING_REQUESTS:
        causes += _provreq_spec_causes(new.get("spec"))
        causes += _provreq_status_causes(new.get("status"))
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if immutability:
            causes += [Cause(f"spec.{key}", "FieldValueInvalid",
                             f"Invalid value: {new_spec.get(key)!r}: Value is immutable")
                       for key in IMMUTABLE_SPEC
                       if key in old_spec and new_spec.get(key) != old_spec[key]]
    old_meta, new_meta = old.get("metadata", {}), new.get("metadata", {})
    if old_meta.get("deletionTimestamp"):
        added = set(new_meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
        if added:
            causes.append(Cause("metadata.finalizers", "FieldValueForbidden",
                                f"Forbidden: no new finalizers can be added if the object "
                                f"is being deleted, found new finalizers {sorted(added)}"))
    _raise(resource, new, causes)


def _raise(resource: Resource, obj: Json, causes: list[Cause]) -> None:
    if causes:
        name = obj.get("metadata", {}).get("name", "")
        raise errors.invalid(resource.kind_group, resource.kind, name, causes)
