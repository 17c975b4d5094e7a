"""A lease store one replica reaches the API server through, which a test can cut (a
partition: the replica is alive, its Lease calls fail)."""

from __future__ import annotations

from provider.leadership.elector import LeaseRecord, LeaseStore


class Cuttable:
    """Implements provider.leadership.elector.LeaseStore over ``store``; while ``cut``,
    every call fails as an unreachable API server's does."""

    def __init__(self, store: LeaseStore) -> None:
        self._store = store
        self.cut = False

    def _reach(self) -> None:
        if self.cut:
            raise ConnectionError("the API server is unreachable from this replica")

    def get(self) -> LeaseRecord | None:
        self._reach()
        return self._store.get()

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self._reach()
        return self._store.create(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self._reach()
        return self._store.update(record)
