"""The one reader of numbers a person or a tenant writes as text (a ProvisioningRequest's
parameters, a count in an object's status): ASCII digits only, each number with an upper
bound its caller states.

`str.isdigit()` is true of "²" and of other scripts' digits, which `int()` then refuses
(or reads: `int("٣")` is 3); and a digit string of any length parses, 255 nines to a float
of infinity. Here a number is `[0-9]+` (and, for a decimal, an optional `.[0-9]+`), no
sign, no spaces inside, no exponent, at most ``most``: anything else is a ValueError whose
text says what was wanted, for the caller to put beside the field it names."""

from __future__ import annotations

import re

_WHOLE = re.compile(r"[0-9]{1,40}")
_DECIMAL = re.compile(r"[0-9]{1,40}(\.[0-9]{1,40})?")


def whole(text: str, most: int, least: int = 0, unit: str = "") -> int:
    """``text`` as a whole number from ``least`` to ``most``; ValueError otherwise."""
    unit = f" {unit}" if unit else ""
    wanted = f"a whole number{unit} from {least:,} to {most:,} (ASCII digits)"
    if not _WHOLE.fullmatch(text):
        raise ValueError(f"{_quoted(text)} is not {wanted}")
    value = int(text)
    if not least <= value <= most:
        raise ValueError(f"{_quoted(text)} is out of range: give {wanted}")
    return value


def decimal(text: str, most: float, unit: str = "") -> float:
    """``text`` as a non-negative decimal at most ``most``; ValueError otherwise."""
    unit = f" {unit}" if unit else ""
    wanted = f"a non-negative number{unit} of at most {most:,g} (ASCII digits, '.')"
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"{_quoted(text)} is not {wanted}")
    value = float(text)
    if value > most:
        raise ValueError(f"{_quoted(text)} is out of range: give {wanted}")
    return value


def _quoted(text: str) -> str:
    """The text as a message quotes it: 255 nines are not repeated whole."""
    return repr(text if len(text) <= 40 else f"{text[:20]}...{text[-8:]}")
