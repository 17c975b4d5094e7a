"""The last attempts' outcomes, for `allset status`: an executor Observer that keeps them
and passes everything on (to the metrics)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

from provider.attempts.executor import Observer, Outcome
from provider.domain.cloud import CloudInstance
from provider.domain.plan import Part


class RecentOutcomes:
    def __init__(self, inner: Observer, keep: int = 20) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._outcomes: deque[Outcome] = deque(maxlen=keep)

    def launched_part(self, part: Part, instances: int) -> None:
        self._inner.launched_part(part, instances)

    def rolled_back(self, attempt: str, instances: Sequence[CloudInstance]) -> None:
        self._inner.rolled_back(attempt, instances)

    def finished(self, outcome: Outcome) -> None:
        self._inner.finished(outcome)
        with self._lock:
            self._outcomes.append(outcome)

    def last(self) -> list[Outcome]:
        """Newest first."""
        with self._lock:
            return list(reversed(self._outcomes))
