"""The one way allset opens a SQLite file: WAL, full fsync, one writer at a time, readable
by this user only (mode 0600 in a 0700 directory when we create it)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from provider.base.files import private_sqlite


class Database:
    def __init__(self, path: str | Path, schema: str) -> None:
        private_sqlite(Path(path))
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a committed write survives power loss
        self._db.executescript(schema)
        self.lock = threading.Lock()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            yield self._db

    def close(self) -> None:
        with self.lock:
            self._db.close()


def check_database(path: Path) -> None:
    """Raise sqlite3.DatabaseError ("file is not a database") unless the existing file at
    ``path`` is one SQLite can open, as Database would. Read as immutable, so nothing is
    written or created beside it (a read-only open of a WAL database makes its -wal and
    -shm files): for checks that must change nothing (`allset validate`)."""
    probe = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
    finally:
        probe.close()
