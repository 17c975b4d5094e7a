"""Partial responses: the ``fields`` system parameter (here from the X-Goog-FieldMask
header), in the syntax Compute documents: ``a,b/c,d(e,f/g)``, with ``*`` for every key of
a map, e.g. ``nextPageToken,items/*/instances(name,labels)``."""

from __future__ import annotations

from typing import Any

Tree = dict[str, "Tree | None"]  # None: the whole value


def parse(text: str) -> Tree:
    tree, rest = _selection(text.replace(" ", ""), 0)
    if rest != len(text.replace(" ", "")):
        raise ValueError(f"bad field selection {text!r}")
    return tree


def _selection(text: str, pos: int) -> tuple[Tree, int]:
    tree: Tree = {}
    while True:
        path: list[str] = []
        start = pos
        while pos < len(text) and text[pos] not in ",()":
            pos += 1
        path = text[start:pos].split("/")
        if not all(path):
            raise ValueError(f"bad field selection near {text[start:]!r}")
        sub: Tree | None = None
        if pos < len(text) and text[pos] == "(":
            sub, pos = _selection(text, pos + 1)
            if pos >= len(text) or text[pos] != ")":
                raise ValueError("unbalanced parentheses in field selection")
            pos += 1
        _merge(tree, path, sub)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        return tree, pos


def _merge(tree: Tree, path: list[str], sub: Tree | None) -> None:
    head, *rest = path
    if not rest:
        if head in tree and tree[head] is not None and sub is not None:
            tree[head].update(sub)  # type: ignore[union-attr]
        else:
            tree[head] = None if (head in tree and tree[head] is None) else sub
        return
    child = tree.get(head)
    if child is None:
        child = {}
        tree[head] = child
    _merge(child, rest, sub)


def select(value: Any, tree: Tree | None) -> Any:
    if tree is None:
        return value
    if isinstance(value, list):
        return [select(v, tree) for v in value]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in tree:
                out[key] = select(item, tree[key])
            elif "*" in tree:
                out[key] = select(item, tree["*"])
        return out
    return value
