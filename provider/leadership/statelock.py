"""Outside a cluster there is no Lease: an exclusive lock on the state directory stops a
second `allset serve` on the same cluster's state (flock: the kernel drops it when the
process dies, however it dies, so a crash never leaves a stale lock behind)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class StateLocked(Exception):
    """Another process holds the state directory."""


class StateDirLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / "allset.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateLocked(
                f"another allset process (pid {holder}) is using the state directory "
                f"{self.path.parent}; two processes acting on one cluster's instances would "
                "roll back each other's attempts. Stop it, or give this one another "
                "--state-dir for another cluster.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
