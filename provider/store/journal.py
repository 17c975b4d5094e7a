"""The attempt journal: every attempt is written before its first cloud call, with each
part's instances as they launch, its outcome, and terminations still owed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from provider.executor import AttemptSpec, OpenAttempt, Outcome
from provider.plan import Plan
from provider.store.sqlite import Database

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


class SqliteJournal:
    """Implements provider.executor.Journal and the terminator's durable backlog."""

    def __init__(self, path: str | Path) -> None:
        self._db = Database(path, _SCHEMA)  # fsynced: an attempt is recorded before launch

    # --- executor.Journal ------------------------------------------------------------------

    def begin(self, spec: AttemptSpec, now: float) -> None:
        with self._db.transaction() as db:
            db.execute("INSERT OR REPLACE INTO attempts VALUES (?, ?, ?, ?, 'open', ?, NULL, NULL)",
                       (spec.id, spec.cluster, spec.request, int(spec.partial), now))

    def planned(self, attempt: str, plan_index: int, plan: Plan) -> None:
        with self._db.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO parts VALUES (?, ?, ?, ?, ?, ?, NULL)",
                [(attempt, f"{plan_index}.{i}", p.group, str(p.capacity_type), p.reservation,
                  p.count) for i, p in enumerate(plan.parts)],
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
                  "errors": [str(f.error) for f in outcome.failures]}
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
