"""Optional SQLite persistence for the simulated cloud, so its instances outlive a restart
of the service (what a real cloud does). Every launch is written in one transaction."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from provider.base.sqlite import Database
from provider.domain.cloud import CapacityType, CloudInstance, InstanceState, OwnerTags

_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    provider_id TEXT NOT NULL,
    zone TEXT NOT NULL,
    instance_type TEXT NOT NULL,
    state TEXT NOT NULL,
    tags TEXT NOT NULL,
    launched_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    token TEXT PRIMARY KEY,
    instance_ids TEXT NOT NULL
);
"""


class FakeStore:
    def __init__(self, path: str | Path) -> None:
        self._db = Database(path, _SCHEMA)

    def load(self) -> tuple[list[CloudInstance], dict[str, tuple[str, ...]]]:
        with self._db.reading() as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM instances ORDER BY launched_at, id"
                              ).fetchall()
            tokens = db.execute("SELECT token, instance_ids FROM tokens").fetchall()
        return [_instance(r) for r in rows], {t: tuple(json.loads(ids)) for t, ids in tokens}

    def ids(self, state: InstanceState) -> set[str]:
        """The ids of the instances in ``state`` (cheap: a reader that polls for new
        instances, like bench/scale's kubelets, reads in full only those it has not seen)."""
        with self._db.reading() as db:
            rows = db.execute("SELECT id FROM instances WHERE state = ?", (state.value,))
            return {r[0] for r in rows}

    def instances(self, ids: Iterable[str]) -> list[CloudInstance]:
        wanted = list(ids)
        out: list[CloudInstance] = []
        with self._db.reading() as db:
            for start in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
                chunk = wanted[start:start + 500]
                out += [_instance(r) for r in db.execute(
                    f"SELECT {_COLUMNS} FROM instances WHERE id IN "
                    f"({', '.join('?' * len(chunk))})", chunk)]
        return out

    def save_launch(self, token: str, instances: Iterable[CloudInstance]) -> None:
        items = list(instances)
        with self._db.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO instances VALUES (?, ?, ?, ?, ?, ?, ?)",
                [_row(i) for i in items],
            )
            db.execute(
                "INSERT OR REPLACE INTO tokens VALUES (?, ?)",
                (token, json.dumps([i.id for i in items])),
            )

    def save(self, instances: Iterable[CloudInstance]) -> None:
        with self._db.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO instances VALUES (?, ?, ?, ?, ?, ?, ?)",
                [_row(i) for i in instances],
            )

    def close(self) -> None:
        self._db.close()


_COLUMNS = "id, provider_id, zone, instance_type, state, tags, launched_at"


def _instance(r: tuple[Any, ...]) -> CloudInstance:
    return CloudInstance(id=r[0], provider_id=r[1], name=r[0], zone=r[2], instance_type=r[3],
                         state=InstanceState(r[4]), tags=_tags_from_json(r[5]),
                         launched_at=r[6])


def _row(i: CloudInstance) -> tuple[str, str, str, str, str, str, float]:
    tags = asdict(i.tags)
    tags["source"] = i.tags.source.value
    return (i.id, i.provider_id, i.zone, i.instance_type, i.state.value, json.dumps(tags),
            i.launched_at)


def _tags_from_json(text: str) -> OwnerTags:
    data = json.loads(text)
    data["source"] = CapacityType(data["source"])
    return OwnerTags(**data)
