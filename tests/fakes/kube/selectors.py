"""``labelSelector`` and ``fieldSelector`` query parameters of list and watch."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.fakes.kube import errors
from tests.fakes.kube.resources import Resource

Json = dict[str, Any]
Predicate = Callable[[Json], bool]

# Field labels each resource supports (the real server answers 400 for any other).
FIELDS: dict[str, tuple[str, ...]] = {
    "pods": ("spec.nodeName", "status.phase", "spec.schedulerName"),
    "nodes": ("spec.unschedulable",),
    "events": ("involvedObject.kind", "involvedObject.name", "involvedObject.namespace",
               "involvedObject.uid", "reason", "type"),
}

_REQUIREMENT = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<absent>[^\s,!=()]+)"
    r"|(?P<key>[^\s,!=()]+)\s*(?:(?P<op>==|!=|=)\s*(?P<value>[^\s,!=()]*)"
    r"|\s+(?P<set_op>in|notin)\s*\((?P<values>[^)]*)\))?)\s*(?:,|$)")


def _lookup(obj: Json, dotted: str) -> Any:
    node: Any = obj
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _as_field_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def labels(selector: str) -> Predicate:
    """Equality (``a=b``, ``a!=b``), set (``a in (x,y)``, ``a notin (x)``) and existence
    (``a``, ``!a``) requirements, all of which must hold."""
    checks: list[Predicate] = []
    pos = 0
    while pos < len(selector):
        m = _REQUIREMENT.match(selector, pos)
        if m is None or m.end() == pos:
            raise errors.bad_request(f"unable to parse requirement: {selector[pos:]!r}")
        pos = m.end()
        checks.append(_label_check(m))

    def ok(obj: Json) -> bool:
        found = obj.get("metadata", {}).get("labels") or {}
        return all(check(found) for check in checks)

    return ok


def _label_check(m: re.Match[str]) -> Predicate:
    if m["absent"]:
        absent = m["absent"]
        return lambda found: absent not in found
    key, op = m["key"], m["op"] or m["set_op"]
    if op is None:
        return lambda found: key in found
    if op in ("=", "=="):
        value = m["value"]
        return lambda found: found.get(key) == value
    if op == "!=":
        value = m["value"]
        return lambda found: found.get(key) != value
    values = {v.strip() for v in m["values"].split(",") if v.strip()}
    if op == "in":
        return lambda found: found.get(key) in values
    return lambda found: found.get(key) not in values


def fields(resource: Resource, selector: str) -> Predicate:
    """``field=value`` / ``field!=value`` terms on metadata.name, metadata.namespace and
    the resource's own field labels."""
    allowed = ("metadata.name", "metadata.namespace", *FIELDS.get(resource.plural, ()))
    checks: list[Predicate] = []
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        m = re.fullmatch(r"([^!=]+?)\s*(==|!=|=)\s*(.*)", term)
        if m is None:
            raise errors.bad_request(f"invalid field selector: {term!r}")
        name, op, value = m.group(1), m.group(2), m.group(3)
        if name not in allowed:
            raise errors.bad_request(f"field label not supported: {name}")
        checks.append(_field_check(name, value, negate=op == "!="))
    return lambda obj: all(check(obj) for check in checks)


def _field_check(name: str, value: str, *, negate: bool) -> Predicate:
    return lambda obj: (_as_field_value(_lookup(obj, name)) == value) != negate


def predicate(resource: Resource, label_selector: str | None, field_selector: str | None
              ) -> Predicate:
    checks = []
    if label_selector:
        checks.append(labels(label_selector))
    if field_selector:
        checks.append(fields(resource, field_selector))
    return lambda obj: all(check(obj) for check in checks)
