"""Budgets for evaluating a tenant's DRA selectors (issue 51): steps, not seconds, so that
every replica, `allset plan` and a test reach the same verdict whatever the machine's load.

A step is one node of the selector's syntax tree visited by cel-python's evaluator (a
macro's body once per element of its range). One evaluation of a selector on one device
may take limits.MAX_STEPS; the evaluations made to judge one request (its every selector
on every kind of device of the fleet's groups) may take limits.MAX_REQUEST_STEPS
together, opened by `request_budget()` around the judging (the planner's front door,
planner.limits.never_fits). A verdict remembered from an earlier evaluation is charged the
steps it took then: what a request may spend does not depend on what was judged before it."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Hashable, Iterator
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import Evaluator

from provider.domain.devices import limits


class OverBudget(Exception):
    """An evaluation took more steps than its meter allowed."""


class RequestOverBudget(Exception):
    """The selectors of the request being judged took more than its steps together."""

    def __init__(self, steps: int) -> None:
        super().__init__(
            f"its DRA selectors took more than {steps} evaluation steps together on the "
            "devices of the fleet's node groups (allset's budget for judging one request)")
        self.steps = steps


class Meter:
    __slots__ = ("charged", "left", "limit")

    def __init__(self, steps: int) -> None:
        self.left = self.limit = steps
        self.charged: set[Hashable] = set()  # verdicts charged to this request


_REQUEST: contextvars.ContextVar[Meter | None] = contextvars.ContextVar(
    "allset_selector_budget", default=None)


@contextlib.contextmanager
def request_budget(steps: int = limits.MAX_REQUEST_STEPS) -> Iterator[Meter]:
    """The steps the selectors evaluated within may take together (this thread's)."""
    meter = Meter(steps)
    token = _REQUEST.set(meter)
    try:
        yield meter
    finally:
        _REQUEST.reset(token)


def allowed() -> int:
    """Steps the next evaluation may take: its own bound, or what is left of the
    request's when that is less."""
    meter = _REQUEST.get()
    return limits.MAX_STEPS if meter is None else max(0, min(limits.MAX_STEPS, meter.left))


def charge(steps: int, verdict: Hashable) -> None:
    """Charge the request being judged (if any) the steps of ``verdict`` (a selector on a
    kind of device), once however often it is read; RequestOverBudget past its budget.
    So a request costs what its distinct verdicts cost, whatever was evaluated before it
    and however many groups share a kind of device."""
    counted = _TALLY.get()
    if counted is not None:
        counted.verdicts[verdict] = steps
    meter = _REQUEST.get()
    if meter is None or verdict in meter.charged:
        return
    meter.charged.add(verdict)
    meter.left -= steps
    if meter.left < 0:
        raise RequestOverBudget(meter.limit)


class Tally:
    __slots__ = ("verdicts",)

    def __init__(self) -> None:
        self.verdicts: dict[Hashable, int] = {}


_TALLY: contextvars.ContextVar[Tally | None] = contextvars.ContextVar(
    "allset_selector_tally", default=None)


@contextlib.contextmanager
def tally() -> Iterator[Tally]:
    """The verdicts read within and their steps (for a cache of what was computed from
    them, to charge them on a hit as the verdicts' own cache does)."""
    counted = Tally()
    token = _TALLY.set(counted)
    try:
        yield counted
    finally:
        _TALLY.reset(token)


class _MeteredEvaluator(Evaluator):
    """cel-python's tree-walking evaluator, counting each node it visits (a macro's body
    once per element: its sub-evaluators share the meter) and stopping past the budget.
    Evaluator catches only TypeError, KeyError and CELEvalError, so OverBudget ends the
    whole evaluation."""

    def __init__(self, ast: lark.Tree[Any], activation: Any, meter: Meter) -> None:
        super().__init__(ast, activation=activation)
        self._meter = meter

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _MeteredEvaluator(ast, self.activation, self._meter)

    def _visit_tree(self, tree: lark.Tree[Any]) -> Any:  # lark's one way into a node
        meter = self._meter
        meter.left -= 1
        if meter.left < 0:
            raise OverBudget
        return super()._visit_tree(tree)


class MeteredRunner(celpy.InterpretedRunner):
    def evaluate(self, context: Any, meter: Meter | None = None) -> celtypes.Value:
        evaluator = _MeteredEvaluator(self.ast, self.new_activation(),
                                      meter or Meter(limits.MAX_STEPS))
        return evaluator.evaluate(context)
