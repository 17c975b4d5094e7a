"""Every record the executor writes to its journal also becomes a log line, so an operator
can follow an attempt (and the request it serves) from its plan to its outcome: which
capacity was chosen, what each part launched or why it failed, what was rolled back.
The attempt id and request ride on each line as fields (`attempt`, `request`) for
`--log-format json`, and in the text of the message for people."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from provider.attempts.executor import AttemptSpec, Journal, OpenAttempt, Outcome, Result
from provider.base.words import counted
from provider.domain.plan import Part, Plan

log = logging.getLogger("allset.attempts")


class LoggedJournal:
    """Implements executor.Journal around another journal, which keeps the records."""

    def __init__(self, inner: Journal) -> None:
        self._inner = inner
        self._requests: dict[str, str | None] = {}  # attempt -> request, while it runs

    def begin(self, spec: AttemptSpec, now: float) -> None:
        self._inner.begin(spec, now)
        self._requests[spec.id] = spec.request
        log.info("attempt %s began%s", spec.id, _for(spec.request), extra=self._ids(spec.id))

    def planned(self, attempt: str, plan_index: int, plan: Plan) -> None:
        self._inner.planned(attempt, plan_index, plan)
        notes = "; ".join([n.message for n in plan.notes] +
                          ([plan.placement.message] if plan.placement else []))
        log.info("attempt %s plan %d: %s, %s%s", attempt, plan_index,
                 counted(plan.node_count, "node"),
                 ", ".join(_part(p) for p in plan.parts), f" ({notes})" if notes else "",
                 extra=self._ids(attempt))

    def launched(self, attempt: str, label: str, instance_ids: Sequence[str]) -> None:
        self._inner.launched(attempt, label, instance_ids)
        log.info("attempt %s part %s launched %s: %s", attempt, label,
                 counted(len(instance_ids), "instance"), ", ".join(instance_ids),
                 extra=self._ids(attempt))

    def committing(self, attempt: str) -> None:
        self._inner.committing(attempt)
        log.info("attempt %s committing", attempt, extra=self._ids(attempt))

    def finished(self, outcome: Outcome) -> None:
        self._inner.finished(outcome)
        ids = self._ids(outcome.attempt)
        self._requests.pop(outcome.attempt, None)
        failed = [f"part {_part(f.part)} failed: {f.error}" for f in outcome.failures]
        failures = "; ".join(failed + ([f"raised {outcome.error}"] if outcome.error else []))
        why = "; ".join(r.message for r in outcome.infeasible.reasons) \
            if outcome.infeasible is not None else ""
        level = logging.INFO if outcome.result is Result.SUCCEEDED else logging.WARNING
        reused = f", {counted(len(outcome.reused), 'idle node')} reused" if outcome.reused \
            else ""
        log.log(level, "attempt %s %s in %.1fs: %s committed%s, %d rolled back, %s "
                "tried%s%s", outcome.attempt, outcome.result.value, outcome.seconds,
                counted(len(outcome.instances), "node"), reused, outcome.rolled_back,
                counted(outcome.plans_tried, "plan"),
                f"; {failures}" if failures else "", f"; cannot plan: {why}" if why else "",
                extra=ids)

    def owe(self, instance_ids: Sequence[str], now: float) -> None:
        self._inner.owe(instance_ids, now)
        log.info("terminating %s: %s", counted(len(instance_ids), "instance"),
                 ", ".join(instance_ids))

    def paid(self, instance_ids: Sequence[str]) -> None:
        self._inner.paid(instance_ids)

    def owed(self) -> list[str]:
        return self._inner.owed()

    def open_attempts(self) -> list[OpenAttempt]:
        return self._inner.open_attempts()

    def close_interrupted(self, attempts: Sequence[str]) -> None:
        self._inner.close_interrupted(attempts)

    def prune(self, now: float, settled: Collection[str] = ()) -> int:
        return self._inner.prune(now, settled)  # reconcile logs the settled ones

    def _ids(self, attempt: str) -> dict[str, str]:
        request = self._requests.get(attempt)
        return {"attempt": attempt, **({"request": request} if request else {})}


def _for(request: str | None) -> str:
    return f" for request {request}" if request else " for a Cluster Autoscaler scale-up"


def _part(part: Part) -> str:
    source = f"reservation {part.reservation}" if part.reservation else \
        str(part.capacity_type.value)
    if part.reused:
        return f"{part.count} x {part.group} ({source}, reused idle: {', '.join(part.reused)})"
    return f"{part.count} x {part.group} ({source})"
