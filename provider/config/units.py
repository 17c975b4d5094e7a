"""Parsing of Kubernetes quantities and Go-style durations found in config and pod specs."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import parse_quantity

_GO_DURATION = re.compile(r"(?P<value>\d+(?:\.\d+)?)(?P<unit>ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def quantity_milli(value: str | int | float) -> int:
    """A Kubernetes quantity ("500m", "1.5", "80Gi", 96) in milli-units, rounded up."""
    try:
        amount: Decimal = parse_quantity(value)
    except (ValueError, InvalidOperation, TypeError) as err:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 8, 64Gi)") from err
    if amount < 0:
        raise ValueError(f"{value!r} must not be negative")
    return math.ceil(amount * 1000)


def duration_seconds(value: str | int | float) -> float:
    """Seconds from a number or a Go duration string ("90s", "10m", "1h30m")."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 10m or 600")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            parts = list(_GO_DURATION.finditer(text))
            if not parts or "".join(p.group(0) for p in parts) != text:
                raise ValueError(f"{value!r} is not a duration (e.g. 90s, 10m, 1h30m or seconds)")
            seconds = sum(float(p.group("value")) * _UNIT_SECONDS[p.group("unit")] for p in parts)
    if seconds < 0:
        raise ValueError(f"{value!r} must not be negative")
    return seconds
