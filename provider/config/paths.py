"""Where in a YAML document a validation error is, in words a person can follow."""

from __future__ import annotations

from typing import Any

# A pattern's meaning in words, by the pattern: an error shows the words, not the regex.
_PHRASES: dict[str, str] = {}


def phrased(pattern: str, phrase: str) -> str:
    """``pattern`` (returned as it is, for ``Field(pattern=...)``), with the words a
    validation error shows in its place: "'X_1' is not <phrase>"."""
    _PHRASES[pattern] = phrase
    return pattern


def field_path(loc: tuple[int | str, ...], raw: Any) -> str:
    """('nodeGroups', 2, 'gpu') -> 'nodeGroups[2] (id gpu-a).gpu': list items are named by
    their ``id`` (or ``name``) when they have one."""
    text = ""
    node = raw
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(node, dict):
                for key in ("id", "name"):
                    if isinstance(node.get(key), str):
                        text += f" ({key} {node[key]})"
                        break
        elif part == "[key]":
            continue  # pydantic's mark of a mapping's key (not its value) that is wrong
        else:
            text += ("." if text else "") + str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return text


def plain_message(error: Any) -> str:
    """A pydantic error's message without its type prefix."""
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required key is missing"
    if error["type"] == "string_pattern_mismatch":
        phrase = _PHRASES.get(str((error.get("ctx") or {}).get("pattern", "")))
        if phrase:
            return f"{error['input']!r} is not {phrase}"
    return str(error["msg"]).removeprefix("Value error, ")
