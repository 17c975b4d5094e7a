"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the part of
strategic merge patch that is the same as a merge patch (maps; no lists, no directives)."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.fakes.kube import errors

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

CUSTOM_TYPES = (JSON_PATCH, MERGE, APPLY)
CORE_TYPES = (JSON_PATCH, MERGE, STRATEGIC, APPLY)


def apply(content_type: str, body: bytes, target: dict[str, Any], *, custom: bool
          ) -> dict[str, Any]:
    """The patched copy of ``target``. Raises ApiError as the API server would: 415 for a
    content type the resource does not accept, 400 for a body that does not parse, 422 for
    a JSON patch that does not apply."""
    media = content_type.split(";")[0].strip().lower()
    accepted = CUSTOM_TYPES if custom else CORE_TYPES
    if media not in accepted:
        raise errors.unsupported_media_type(media, accepted)
    if media == APPLY:
        raise errors.not_modelled("server-side apply (application/apply-patch+yaml)")
    try:
        patch = json.loads(body or b"null")
    except ValueError as err:
        raise errors.bad_request(f"error decoding patch: {err}") from err
    if media == JSON_PATCH:
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise errors.bad_request("a merge patch must be a JSON object")
    if media == STRATEGIC:
        _check_strategic(patch, "")
    merged = merge_patch(target, patch)
    assert isinstance(merged, dict)
    return merged


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes a key, anything else
    (lists included) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _check_strategic(patch: dict[str, Any], at: str) -> None:
    for key, value in patch.items():
        where = f"{at}.{key}" if at else key
        if key.startswith("$"):
            raise errors.not_modelled(f"strategic merge directive {where}")
        if isinstance(value, list):
            raise errors.not_modelled(
                f"strategic merge of lists ({where}); send a JSON merge patch or JSON patch")
        if isinstance(value, dict):
            _check_strategic(value, where)


# --- RFC 6902 ------------------------------------------------------------------------------


def json_patch(target: dict[str, Any], ops: Any) -> dict[str, Any]:
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise errors.bad_request("a JSON patch must be a list of operations")
    doc: Any = copy.deepcopy(target)
    for op in ops:
        doc = _apply_op(doc, op)
    if not isinstance(doc, dict):
        raise _failed("the patched document is not an object")
    return doc


def _failed(message: str) -> errors.ApiError:
    return errors.ApiError(422, "Invalid", message)


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise errors.bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _index(container: list[Any], token: str, *, insert: bool) -> int:
    if insert and token == "-":
        return len(container)
    if not token.isdigit():
        raise _failed(f"invalid array index {token!r}")
    i = int(token)
    if i > len(container) or (i == len(container) and not insert):
        raise _failed(f"array index {i} out of bounds")
    return i


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, insert=False)]
        else:
            raise _failed(f"path /{'/'.join(tokens)} does not exist")
    return node


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _failed(f"path /{'/'.join(tokens)} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, insert=False)]
    raise _failed(f"path /{'/'.join(tokens)} does not exist")


def _remove(doc: Any, tokens: list[str]) -> Any:
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, insert=False))
    raise _failed(f"cannot remove /{'/'.join(tokens)}: it does not exist")


def _add(doc: Any, tokens: list[str], value: Any, *, replace: bool) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise _failed(f"cannot replace /{'/'.join(tokens)}: it does not exist")
        parent[last] = value
    elif isinstance(parent, list):
        i = _index(parent, last, insert=not replace)
        if replace:
            parent[i] = value
        else:
            parent.insert(i, value)
    else:
        raise _failed(f"path /{'/'.join(tokens)} does not exist")
    return doc


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    tokens = _pointer(op.get("path"))
    if kind in ("add", "replace", "test") and "value" not in op:
        raise errors.bad_request(f"{kind} operation needs a value")
    if kind == "add":
        return _add(doc, tokens, copy.deepcopy(op["value"]), replace=False)
    if kind == "replace":
        return _add(doc, tokens, copy.deepcopy(op["value"]), replace=True)
    if kind == "remove":
        _remove(doc, tokens)
        return doc
    if kind == "test":
        if _get(doc, tokens) != op["value"]:
            raise _failed(f"testing value /{'/'.join(tokens)} failed")
        return doc
    if kind in ("move", "copy"):
        source = _pointer(op.get("from"))
        value = _remove(doc, source) if kind == "move" else copy.deepcopy(_get(doc, source))
        return _add(doc, tokens, value, replace=False)
    raise errors.bad_request(f"unknown JSON patch operation {kind!r}")
