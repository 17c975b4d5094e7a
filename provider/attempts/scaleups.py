"""CA's scale-up path: IncreaseSize records a scale-up and returns at once; a worker plans
the delta inside the group (matching reservations first) and executes it as one attempt."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Executor as Pool

from provider.attempts.executor import AttemptSpec, Executor, Outcome, Result
from provider.base.clock import Clock
from provider.capacity.ledger import CapacityView
from provider.domain.cloud import CloudInstance
from provider.domain.errors import Unavailable
from provider.domain.fleet import ErrorInfo, Fleet
from provider.domain.model import ScaleUpMode
from provider.domain.plan import Infeasible, Part, Plan, ReasonCode
from provider.planner.group import plan_group_delta
from provider.planner.matching import Matcher

log = logging.getLogger(__name__)

OUT_OF_RESOURCES_CODES = {ReasonCode.CAPACITY, ReasonCode.QUOTA}


def new_attempt_id() -> str:
    return "a-" + uuid.uuid4().hex[:16]


class ScaleUps:
    def __init__(
        self,
        cluster: str,
        fleet: Fleet,
        executor: Executor,
        clock: Clock,
        pool: Pool,
        matcher: Matcher,
        *,
        ids: Callable[[], str] = new_attempt_id,
    ) -> None:
        self._cluster = cluster
        self._fleet = fleet
        self._executor = executor
        self._clock = clock
        self._pool = pool
        self._ids = ids
        self._matcher = matcher
        self.draining = False
        # Set at the first moment of a shutdown, before anything is drained: no new
        # scale-up is taken while the controller's workers finish.
        self.refusing = False

    def increase(self, group_id: str, delta: int) -> str:
        """Validate and record the scale-up, then hand it to a worker. Raises NotFound,
        InvalidArgument or FailedPrecondition with nothing changed."""
        if self.draining or self.refusing:
            raise Unavailable("allset is shutting down; scale-ups are not accepted")
        attempt = self._ids()
        self._fleet.increase(group_id, delta, attempt, self._clock.now())
        try:
            self._pool.submit(self._run_logged, attempt, group_id)
        except RuntimeError as err:  # the pool shut down between the check and the submit
            self._fleet.settle(attempt, [], ErrorInfo("Unavailable", str(err), False),
                               self._clock.now())
            raise Unavailable("allset is shutting down; scale-ups are not accepted") from err
        return attempt

    def _run_logged(self, attempt: str, group_id: str) -> None:
        if self.draining:
            # Still queued when the process began to stop: handed back before any record
            # or cloud call, so the drain waits only for attempts that already act. CA
            # sees the placeholders fail and scales up again through the next leader.
            self._fleet.settle(attempt, [], ErrorInfo(
                "Unavailable", "allset shut down before this scale-up started", False),
                self._clock.now())
            return
        try:
            self.run(attempt, group_id)
        except Exception:  # a worker must never die silently
            log.exception("scale-up %s of %s crashed", attempt, group_id)
            self._fleet.settle(attempt, [], ErrorInfo("InternalError", "scale-up crashed", False),
                               self._clock.now())

    def run(self, attempt: str, group_id: str) -> Outcome:
        group = self._fleet.group(group_id)
        partial = group.scale_up is ScaleUpMode.PARTIAL

        def wanted() -> int:
            su = self._fleet.scale_up(attempt)
            return su.wanted if su is not None else 0

        def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
            count = wanted() - sum(p.count for p in done)
            return plan_group_delta(view, self._matcher, group, count, partial=partial,
                                    name=attempt)

        def show(instances: Sequence[CloudInstance]) -> None:
            self._fleet.show_launched(attempt, instances)

        spec = AttemptSpec(attempt, self._cluster, partial=partial, ended_by_fleet=True)
        def select(launched: Sequence[CloudInstance]) -> list[CloudInstance]:
            return self._fleet.select_commit(attempt, launched)

        outcome = self._executor.execute(
            spec, build, on_launched=show, cancelled=lambda: wanted() == 0, select=select
        )
        surplus = self._fleet.settle(attempt, outcome.instances, error_info(outcome),
                                     self._clock.now())
        if surplus:
            self._executor.terminator.terminate([i.id for i in surplus],
                                                self._executor.retrying())
        log.info("scale-up %s of %s: %s, %d nodes, %d plans", attempt, group_id,
                 outcome.result, len(outcome.instances), outcome.plans_tried)
        return outcome


def error_info(outcome: Outcome) -> ErrorInfo | None:
    """The errorInfo CA sees on placeholders that were not filled."""
    if outcome.result is Result.SUCCEEDED:
        return None
    if outcome.infeasible is not None and not outcome.failures:
        reason = outcome.infeasible.primary
        return ErrorInfo(str(reason.code), outcome.infeasible.summary(),
                         reason.code in OUT_OF_RESOURCES_CODES)
    err = outcome.last_error
    if err is not None:
        return ErrorInfo(err.code, str(err), err.code in ("InsufficientCapacity", "QuotaExceeded"))
    return ErrorInfo(str(outcome.result), f"scale-up {outcome.result}", False)
