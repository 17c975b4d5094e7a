"""Reading plain dicts (as YAML or the API gives them) field by field: a field of the
wrong kind is a problem named by its path, never an AttributeError further on. The API
server's schemas keep most of this from its objects; a file handed to `allset plan`, or
to the admin Plan call, has no such guard."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Problems = list[tuple[str, str]]


def mapping(raw: Any, field: str, problems: Problems) -> Mapping[str, Any]:
    """``raw`` as an object; absent (None) is empty, anything else but an object is a
    problem (and empty)."""
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return raw
    problems.append((field, f"must be an object, not {_kind(raw)}"))
    return {}


def items(raw: Any, field: str, problems: Problems) -> list[Any]:
    """``raw`` as a list; absent (None) is empty, anything else but a list is a problem
    (and empty)."""
    if raw is None:
        return []
    if isinstance(raw, list):
        return raw
    problems.append((field, f"must be a list, not {_kind(raw)}"))
    return []


def text(raw: Any, field: str, problems: Problems) -> str:
    """``raw`` as a string (a number is written as one); absent is empty."""
    if raw is None:
        return ""
    if isinstance(raw, str | int | float) and not isinstance(raw, bool):
        return str(raw)
    problems.append((field, f"must be a string, not {_kind(raw)}"))
    return ""


def _kind(raw: Any) -> str:
    if isinstance(raw, bool):
        return "a boolean"
    if isinstance(raw, int | float):
        return "a number"
    if isinstance(raw, str):
        return "a string"
    if isinstance(raw, list):
        return "a list"
    if isinstance(raw, Mapping):
        return "an object"
    return f"a {type(raw).__name__}"
