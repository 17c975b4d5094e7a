"""The attempt journal: every attempt is written before its first cloud call, with each
part's instances as they launch, its outcome, and terminations still owed."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from pathlib import Path

from provider.attempts.executor import AttemptSpec, OpenAttempt, Outcome
from provider.base.sqlite import Database
from provider.domain.plan import Plan

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    request TEXT,
    partial INTEGER NOT NULL,
    state TEXT NOT NULL,            -- open | committing | succeeded | failed | ...
    started_at REAL NOT NULL,
    finished_at REAL,
    detail TEXT
);
CREATE TABLE IF NOT EXISTS parts (
    attempt TEXT NOT NULL,
    label TEXT NOT NULL,
    node_group TEXT NOT NULL,
    source TEXT NOT NULL,
    reservation TEXT,
    count INTEGER NOT NULL,
    instances TEXT,
    PRIMARY KEY (attempt, label)
);
CREATE TABLE IF NOT EXISTS terminations (
    instance_id TEXT PRIMARY KEY,
    since REAL NOT NULL
);
"""


# Finished attempts are a record, not state: reconcile works from the cloud's tags. They are
# pruned so the journal fits the size-limited volume it lives on (deploy/kubernetes/base).
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600.0
DEFAULT_MAX_FINISHED = 10_000
PRUNE_EVERY_SECONDS = 600.0


class SqliteJournal:
    """Implements provider.attempts.executor.Journal and the terminator's durable backlog."""

    def __init__(self, path: str | Path, *,
                 retention_seconds: float = DEFAULT_RETENTION_SECONDS,
                 max_finished: int = DEFAULT_MAX_FINISHED) -> None:
        self._db = Database(path, _SCHEMA)  # fsynced: an attempt is recorded before launch
        self._retention = retention_seconds
        self._max_finished = max_finished
        self._pruned_at = float("-inf")

    # --- executor.Journal ------------------------------------------------------------------

    def begin(self, spec: AttemptSpec, now: float) -> None:
        with self._db.transaction() as db:
            db.execute("INSERT OR REPLACE INTO attempts VALUES (?, ?, ?, ?, 'open', ?, NULL, NULL)",
                       (spec.id, spec.cluster, spec.request, int(spec.partial), now))
        if now - self._pruned_at >= PRUNE_EVERY_SECONDS:
            self.prune(now)

    def planned(self, attempt: str, plan_index: int, plan: Plan) -> None:
        with self._db.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO parts VALUES (?, ?, ?, ?, ?, ?, NULL)",
                [(attempt, f"{plan_index}.{i}", p.group, str(p.capacity_type), p.reservation,
                  p.count) for i, p in enumerate(plan.launches)],
            )

    def launched(self, attempt: str, label: str, instance_ids: Sequence[str]) -> None:
        with self._db.transaction() as db:
            db.execute("UPDATE parts SET instances = ? WHERE attempt = ? AND label = ?",
                       (json.dumps(list(instance_ids)), attempt, label))

    def committing(self, attempt: str) -> None:
        with self._db.transaction() as db:
            db.execute("UPDATE attempts SET state = 'committing' WHERE id = ?", (attempt,))

    def finished(self, outcome: Outcome) -> None:
        detail = {"plans": outcome.plans_tried, "rolledBack": outcome.rolled_back,
                  "instances": [i.id for i in outcome.instances],
                  "errors": [str(f.error) for f in outcome.failures]
                  + ([outcome.error] if outcome.error else [])}
        with self._db.transaction() as db:
            db.execute("UPDATE attempts SET state = ?, finished_at = started_at + ?, "
                       "detail = ? WHERE id = ?",
                       (str(outcome.result), outcome.seconds, json.dumps(detail),
                        outcome.attempt))

    # --- recovery ----------------------------------------------------------------------

    def open_attempts(self) -> list[OpenAttempt]:
        """Attempts a previous run began and never finished (it crashed)."""
        with self._db.reading() as db:
            rows = db.execute(
                "SELECT id, started_at, state FROM attempts "
                "WHERE state IN ('open', 'committing') ORDER BY started_at"
            ).fetchall()
            out = []
            for attempt, started, state in rows:
                parts = db.execute(
                    "SELECT instances FROM parts WHERE attempt = ? AND instances IS NOT NULL",
                    (attempt,)).fetchall()
                ids = tuple(i for (text,) in parts for i in json.loads(text))
                out.append(OpenAttempt(attempt, started, ids, committing=state == "committing"))
            return out

    def close_interrupted(self, attempts: Sequence[str]) -> None:
        with self._db.transaction() as db:
            db.executemany("UPDATE attempts SET state = 'interrupted' WHERE id = ?",
                           [(a,) for a in attempts])

    def attempt_state(self, attempt: str) -> str | None:
        with self._db.reading() as db:
            row = db.execute("SELECT state FROM attempts WHERE id = ?",
                                   (attempt,)).fetchone()
        return None if row is None else str(row[0])

    def prune(self, now: float, settled: Collection[str] = ()) -> int:
        """Delete finished attempts (and their parts) older than the retention, then the
        oldest finished ones beyond the cap, and the open ones in ``settled`` (reconcile
        found nothing running them and nothing of them in the cloud). Other open attempts
        are never pruned (recovery needs them), nor are terminations owed (another table).
        Returns how many attempts went."""
        finished = "state != 'open'"
        at = "COALESCE(finished_at, started_at)"  # an interrupted attempt has no finish
        with self._db.transaction() as db:
            doomed = [a for a in settled if db.execute(
                "SELECT 1 FROM attempts WHERE id = ? AND state IN ('open', 'committing')",
                (a,)).fetchone()]
            doomed += [r[0] for r in db.execute(
                f"SELECT id FROM attempts WHERE {finished} AND {at} < ?",
                (now - self._retention,))]
            doomed += [r[0] for r in db.execute(
                f"SELECT id FROM attempts WHERE {finished} AND {at} >= ? "
                f"ORDER BY {at} DESC, id LIMIT -1 OFFSET ?",
                (now - self._retention, self._max_finished))]
            db.executemany("DELETE FROM parts WHERE attempt = ?", [(a,) for a in doomed])
            db.executemany("DELETE FROM attempts WHERE id = ?", [(a,) for a in doomed])
        self._pruned_at = now
        return len(doomed)

    def attempts(self) -> list[str]:
        """Every attempt recorded, oldest first."""
        with self._db.reading() as db:
            return [r[0] for r in db.execute("SELECT id FROM attempts ORDER BY started_at, id")]

    # --- terminations owed ---------------------------------------------------------------

    def owe(self, instance_ids: Sequence[str], now: float) -> None:
        with self._db.transaction() as db:
            db.executemany("INSERT OR IGNORE INTO terminations VALUES (?, ?)",
                           [(i, now) for i in instance_ids])

    def paid(self, instance_ids: Sequence[str]) -> None:
        with self._db.transaction() as db:
            db.executemany("DELETE FROM terminations WHERE instance_id = ?",
                           [(i,) for i in instance_ids])

    def owed(self) -> list[str]:
        with self._db.reading() as db:
            return [r[0] for r in db.execute("SELECT instance_id FROM terminations")]

    def close(self) -> None:
        self._db.close()
