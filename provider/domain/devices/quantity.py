"""Kubernetes quantities in milli-units: inside CEL selectors (`quantity("80Gi")`) and in
the pod templates of a ProvisioningRequest.

The config edge parses quantities with the kubernetes client's parser; the domain may not
import that client, so it uses this one, and a test holds the two to the same answers (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/)."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_FORM = re.compile(r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>[A-Za-z]*|[eE][+-]?\d+)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
            "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}


def parse_milli(text: str) -> int:
    """"80Gi" -> 85899345920000; rounded up to a whole milli-unit, as the API does."""
    m = _FORM.match(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    try:
        number = Decimal(m["number"])
    except InvalidOperation as err:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from err
    suffix = m["suffix"]
    if suffix in _BINARY:
        scale = Decimal(_BINARY[suffix])
    elif suffix in _DECIMAL:
        scale = _DECIMAL[suffix]
    elif suffix[:1] in ("e", "E"):
        scale = Decimal(10) ** int(suffix[1:])
    else:
        raise ValueError(f"{text!r}: unknown suffix {suffix!r}")
    return math.ceil(number * scale * 1000)


def quantity_milli(value: str | int | float) -> int:
    """A quantity as it comes in a pod spec ("500m", "1.5", "80Gi", 96) in milli-units,
    rounded up; the errors read as the config edge's do."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 8, 64Gi)")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 8, 64Gi)")
        milli = math.ceil(Decimal(value) * 1000)
    else:
        try:
            milli = parse_milli(value)
        except ValueError as err:
            raise ValueError(
                f"{value!r} is not a Kubernetes quantity (e.g. 500m, 8, 64Gi)") from err
    if milli < 0:
        raise ValueError(f"{value!r} must not be negative")
    return milli


def format_quantity(milli: int) -> str:
    """Milli-units as a person writes the quantity: 85899345920000 -> 80Gi."""
    if milli % 1000:
        return f"{milli}m"
    units = milli // 1000
    # The shortest exact form, binary or decimal: 80Gi, 400G, 141Gi, 3.
    forms = [str(units)]
    for suffix, size in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30),
                         ("Mi", 2**20), ("Ki", 2**10), ("E", 10**18), ("P", 10**15),
                         ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if units and units % size == 0:
            forms.append(f"{units // size}{suffix}")
    return min(forms, key=len)
