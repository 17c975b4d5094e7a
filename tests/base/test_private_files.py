"""Private keys and local state are readable by their owner only from the moment they
exist, whatever the umask (issue 12, finding 12)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.fake.store import FakeStore
from provider.attempts.executor import AttemptSpec
from provider.attempts.journal import SqliteJournal
from provider.domain.cloud import CapacityType, CloudInstance, InstanceState, OwnerTags
from provider.service.tls import write_dev_pki
from tests.kit.cli import one_line, run_allset


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The widest umask: every bit a file or directory is created with shows."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_keys_are_private_even_if_the_writer_dies_right_after_writing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_umask: None) -> None:
    # A chmod that never happens stands for a process killed between writing a key and
    # narrowing its mode: what is on disk then must already be private.
    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("killed before chmod")

    monkeypatch.setattr(os, "chmod", killed)
    monkeypatch.setattr(Path, "chmod", killed)
    out = tmp_path / "new" / "pki"
    with contextlib.suppress(KeyboardInterrupt):
        write_dev_pki(out, ["localhost"])
    keys = sorted(out.glob("*.key"))
    assert keys, "no key written"
    for key in keys:
        assert mode(key) == 0o600, key
    monkeypatch.undo()
    assert mode(out) == 0o700 and mode(out.parent) == 0o700


def test_certs_cli_creates_a_private_directory_and_never_overwrites(
        tmp_path: Path, open_umask: None) -> None:
    out = tmp_path / "certs"
    done = run_allset("certs", "--out", str(out), "--server-name", "localhost")
    assert done.returncode == 0, done.stderr
    assert mode(out) == 0o700
    assert {p.name: mode(p) for p in out.glob("*.key")} == {
        "ca.key": 0o600, "server.key": 0o600, "client.key": 0o600, "operator.key": 0o600}
    before = (out / "ca.key").read_bytes()
    again = run_allset("certs", "--out", str(out), "--server-name", "localhost")
    assert again.returncode == 1
    assert one_line(again.stderr) == (
        f"allset: --out: {out}/ca.crt already exists; remove it or choose another "
        "directory (certs never overwrites a key)")
    assert (out / "ca.key").read_bytes() == before


def _sqlite_files(directory: Path) -> dict[str, int]:
    return {p.name: mode(p) for p in directory.iterdir()}


def test_journal_files_are_private_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "state" / "cluster" / "attempts.db"
    journal = SqliteJournal(path)
    journal.begin(AttemptSpec("a1", "c"), 1.0)  # a write: SQLite has its -wal and -shm now
    files = _sqlite_files(path.parent)
    assert {"attempts.db", "attempts.db-wal", "attempts.db-shm"} <= set(files)
    assert set(files.values()) == {0o600}, files
    assert mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700
    journal.close()


def test_a_journal_left_world_readable_is_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "attempts.db"
    SqliteJournal(path).close()
    path.chmod(0o644)  # as an older version left it
    SqliteJournal(path).close()
    assert mode(path) == 0o600


def test_simulated_cloud_store_is_private_whatever_the_umask(
        tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "fake" / "cloud.db"
    store = FakeStore(path)
    tags = OwnerTags(cluster="c", node_group="g", attempt="a", part="0.0",
                     source=CapacityType.ON_DEMAND)
    store.save([CloudInstance(id="i-1", provider_id="fake:///i-1", name="i-1", zone="z",
                              instance_type="t", state=InstanceState.RUNNING, tags=tags,
                              launched_at=0.0)])
    files = _sqlite_files(path.parent)
    assert "cloud.db-wal" in files and set(files.values()) == {0o600}, files
    assert mode(path.parent) == 0o700
    store.close()
