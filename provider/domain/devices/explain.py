"""Failing selector terms in the words an operator reads first (pure).

"memory 80Gi >= 96Gi is false" says more than the CEL text it came from. Terms of the
shapes DRA examples use are rendered that way; any other term is quoted with the device
values it reads."""

from __future__ import annotations

import re

from provider.domain.devices.model import AttrValue, Device, Version
from provider.domain.devices.quantity import format_quantity

_REF = r'device\.(?P<kind>attributes|capacity)\["(?P<domain>[^"]+)"\]\.(?P<name>\w+)'
_LITERAL = r'(?:quantity|semver)\("(?P<lit>[^"]+)"\)'
_COMPARE_TO = re.compile(
    rf"^{_REF}\.compareTo\({_LITERAL}\)\s*(?P<op>>=|<=|==|!=|>|<)\s*0$")
_METHOD = re.compile(rf"^{_REF}\.(?P<method>isGreaterThan|isLessThan)\({_LITERAL}\)$")
_EQUALS = re.compile(rf'^{_REF}\s*(?P<op>==|!=)\s*(?P<lit>"[^"]*"|\d+|true|false)$')
_DRIVER = re.compile(r'^device\.driver\s*(?P<op>==|!=)\s*"(?P<lit>[^"]*)"$')
_ANY_REF = re.compile(_REF)
_SYMBOL = {">=": "≥", "<=": "≤", "==": "=", "!=": "≠", ">": ">", "<": "<"}


def _value(kind: str, domain: str, name: str, device: Device) -> str | None:
    qualified = f"{domain}/{name}"
    if kind == "capacity":
        amount = device.capacity_of(qualified)
        return None if amount is None else format_quantity(amount)
    value = device.attribute(qualified)
    return None if value is None else _attr_text(value)


def _attr_text(value: AttrValue) -> str:
    if isinstance(value, Version):
        return value.text
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def term_summary(term: str, verdict: bool | str, driver: str, device: Device) -> str:
    failed = "is false" if verdict is False else f"fails: {verdict}"
    m = _COMPARE_TO.match(term) or _METHOD.match(term)
    if m:
        have = _value(m["kind"], m["domain"], m["name"], device)
        op = m.groupdict().get("op") or (">" if m.groupdict().get("method") ==
                                         "isGreaterThan" else "<")
        if have is None:
            return f"{m['name']}: the device has no {m['domain']}/{m['name']}"
        return f"{m['name']} {have} {_SYMBOL[op]} {m['lit']} {failed}"
    m = _EQUALS.match(term)
    if m:
        have = _value(m["kind"], m["domain"], m["name"], device)
        if have is None:
            return f"{m['name']}: the device has no {m['domain']}/{m['name']}"
        return f"{m['name']} {have} {_SYMBOL[m['op']]} {m['lit']} {failed}"
    m = _DRIVER.match(term)
    if m:
        return f'driver "{driver}" {_SYMBOL[m["op"]]} "{m["lit"]}" {failed}'
    values = []
    for ref in _ANY_REF.finditer(term):
        have = _value(ref["kind"], ref["domain"], ref["name"], device)
        values.append(f"{ref['name']}={have if have is not None else '(none)'}")
    seen = ", ".join(dict.fromkeys(values))
    return f"{term} {failed}" + (f" ({seen})" if seen else "")
