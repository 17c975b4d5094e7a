"""How big and how costly a DRA selector may be (pure): what Kubernetes' DRA API allows,
and how deep allset's evaluator (cel-python, which recurses per level of its syntax tree)
can follow it.

Kubernetes' own bounds, from k8s.io/api/resource/v1/types.go: a CELDeviceSelector's
expression is at most `CELSelectorExpressionMaxLength` = 10 * 1024 long (Go's len(): bytes)
and its estimated cost at most `CELSelectorExpressionMaxCost` = 1000000;
pkg/apis/resource/validation/validation.go refuses the length before it compiles. A
request or class has at most `DeviceSelectorsMaxSize` = 32 selectors."""

from __future__ import annotations

from typing import Any

import lark

MAX_LENGTH = 10 * 1024  # resource.CELSelectorExpressionMaxLength, bytes
MAX_COST = 1_000_000  # resource.CELSelectorExpressionMaxCost
MAX_SELECTORS = 32  # resource.DeviceSelectorsMaxSize
# Kubernetes' CEL parser (cel-go, parser/parser.go) stops at 250 levels of recursion by
# default. cel-python's evaluator takes about five Python frames per level of its syntax
# tree (ten levels per pair of parentheses), and the interpreter's stack ends at 2500
# frames, so allset stops sooner: 20 brackets (the CEL spec asks implementations for 12),
# 250 tree levels (a long && or || chain adds one per term).
MAX_NESTING = 20
MAX_DEPTH = 250
# How many entries a device map may have (resource.ResourceSliceMaxAttributesAndCapacities
# PerDevice): the size Kubernetes' cost estimator gives device.attributes and capacity.
MAX_DEVICE_MAP = 32
# allset's own bounds (issue 51). Kubernetes' cost limit is set for cel-go, compiled Go;
# cel-python walks the tree in Python, ~1,000 times slower per step (the 411-byte selector
# of three nested .all() over 40-element lists, estimated ~580k by Kubernetes, took close
# to a minute per device). A selector is refused before it is evaluated above
# MAX_EVALUATED_COST (allset's estimate, below), and one request's selectors together above
# MAX_REQUEST_COST; an evaluation that still takes more than MAX_STEPS (tree nodes
# visited, a macro's body once per element) is stopped and its selector refused, and the
# evaluations that judge one request (each selector on each kind of device of the fleet)
# take MAX_REQUEST_STEPS together at most (devices/budget.py). Figures: bench/hostile.py,
# docs/planning.md.
MAX_EVALUATED_COST = 2_000
MAX_REQUEST_COST = 10_000
MAX_STEPS = 12_000
MAX_REQUEST_STEPS = 20_000

_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_OPEN, _CLOSE, _QUOTES = "([{", ")]}", "\"'"


def before_parse(expression: str) -> str | None:
    """Why the selector is refused before it is parsed (too long, nested too deep)."""
    size = len(expression.encode())
    if size > MAX_LENGTH:
        return (f"is {size} bytes long; Kubernetes allows at most {MAX_LENGTH} "
                "(resource.k8s.io CELSelectorExpressionMaxLength)")
    deepest = nesting(expression)
    if deepest > MAX_NESTING:
        return (f"nests brackets {deepest} deep; allset evaluates selectors nested at most "
                f"{MAX_NESTING} deep")
    return None


def nesting(expression: str) -> int:
    """How deep brackets nest outside string literals (a cheap bound: the tree's depth is
    checked once it is parsed)."""
    depth = deepest = 0
    quote, escaped = "", False
    for ch in expression:
        if escaped:
            escaped = False
        elif quote:
            escaped = ch == "\\"
            quote = "" if ch == quote else quote
        elif ch in _QUOTES:
            quote = ch
        elif ch in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
    return deepest


def after_parse(tree: lark.Tree[Any]) -> str | None:
    """Why the parsed selector is refused (too deep for the evaluator, too costly)."""
    depth, largest = _shape(tree)
    if depth > MAX_DEPTH:
        return (f"is {depth} levels deep as parsed; allset evaluates at most {MAX_DEPTH} "
                "(a pair of parentheses adds 10 levels, each && or || term 1)")
    cost = _cost(tree, max(MAX_DEVICE_MAP, largest))
    if cost > MAX_COST:
        return (f"has an estimated cost of {cost}; Kubernetes allows at most {MAX_COST} "
                "(resource.k8s.io CELSelectorExpressionMaxCost)")
    if cost > MAX_EVALUATED_COST:
        return (f"has an estimated cost of {cost}; allset evaluates selectors of cost at "
                f"most {MAX_EVALUATED_COST} (Kubernetes allows {MAX_COST} for the "
                "scheduler's compiled evaluator; allset's is far slower per step)")
    return None


def cost_of(tree: lark.Tree[Any]) -> int:
    """allset's estimate of a parsed selector's cost (within MAX_DEPTH)."""
    return _cost(tree, max(MAX_DEVICE_MAP, _shape(tree)[1]))


def over_budget(device: str) -> str:
    """Why a selector whose evaluation ran out of MAX_STEPS is refused."""
    return (f"took more than {MAX_STEPS} evaluation steps on device {device} (allset's "
            "budget for one evaluation of a selector)")


def _shape(tree: lark.Tree[Any]) -> tuple[int, int]:
    """The tree's depth and its largest list or map literal, without recursion (the tree
    may be far deeper than the interpreter's stack)."""
    depth = largest = 0
    stack = [(tree, 1)]
    while stack:
        node, level = stack.pop()
        depth = max(depth, level)
        largest = max(largest, _literal_size(node) or 0)
        stack.extend((c, level + 1) for c in node.children if isinstance(c, lark.Tree))
    return depth, largest


def _literal_size(node: lark.Tree[Any]) -> int | None:
    if node.data == "list_lit":
        return len(node.children[0].children) if node.children else 0
    if node.data == "map_lit":
        return len(node.children[0].children) // 2 if node.children else 0
    return None


def _cost(node: lark.Tree[Any], bound: int) -> int:
    """A worst-case cost in the manner of cel-go's estimate: about one per operation, and a
    macro's body once per element of its range. Called on a tree no deeper than
    MAX_DEPTH, so its recursion is bounded."""
    macro = _macro(node)
    if macro is not None:
        target, args = macro
        body = sum(_cost(a, bound) for a in args[1:])  # args[0] names the variable
        return _cost(target, bound) + _size(target, bound) * (body + 1) + 1
    tokens = sum(1 for c in node.children if isinstance(c, lark.Token))
    own = tokens + (1 if len(node.children) > 1 else 0)
    return own + sum(_cost(c, bound) for c in node.children if isinstance(c, lark.Tree))


def _macro(node: lark.Tree[Any]) -> tuple[lark.Tree[Any], list[Any]] | None:
    """(range, arguments) of `range.all(x, ...)` and its siblings."""
    if node.data != "member_dot_arg" or len(node.children) != 3 or \
            str(node.children[1]) not in _MACROS:
        return None
    target, _, args = node.children
    return target, [a for a in args.children if isinstance(a, lark.Tree)]


def _size(node: lark.Tree[Any], bound: int) -> int:
    """How many elements a range may have: a literal's own count, a concatenation's sum,
    what map() and filter() keep of theirs; otherwise ``bound`` (a device map, or an
    element of the largest literal)."""
    while (literal := _literal_size(node)) is None and len(node.children) == 1 and \
            isinstance(node.children[0], lark.Tree):
        node = node.children[0]
    if literal is not None:
        return literal
    first = node.children[0] if node.children else None
    if node.data == "addition" and isinstance(first, lark.Tree) and \
            first.data == "addition_add":
        return _size(first.children[0], bound) + _size(node.children[1], bound)
    macro = _macro(node)
    if macro is not None and str(node.children[1]) in ("map", "filter"):
        return _size(macro[0], bound)
    return bound
