"""Files only this process's user may read: private keys and local state. Modes are set
when a file or directory is created, never narrowed after the data is in it, so there is
no moment (or crash) that leaves a key or a journal readable by others, whatever the
umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> None:
    """Create ``path`` and any missing parents with mode 0700. Directories that already
    exist are left as they are: the operator chose them."""
    missing: list[Path] = []
    for p in (path, *path.parents):
        if p.exists():
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            os.mkdir(p, DIR_MODE)
        except FileExistsError:
            continue  # made by someone else meanwhile: theirs, not ours to change
        # mkdir's mode went through the umask, which may have taken owner bits we need
        # (0o700 is already the widest we allow, so this never widens anything).
        if stat.S_IMODE(os.stat(p).st_mode) != DIR_MODE:
            os.chmod(p, DIR_MODE)


def create_private(path: Path, data: bytes) -> None:
    """Write a new file with mode 0600 from its creation on. Raises FileExistsError
    rather than overwrite (O_EXCL also refuses a symlink planted at ``path``)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # the umask can only have removed bits; restore exactly
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def private_sqlite(path: Path) -> None:
    """Make sure a SQLite database file exists with mode 0600 before SQLite opens it.
    SQLite gives the -wal, -shm and -journal files it creates beside the database the
    database file's mode (os_unix.c, findCreateFileMode), so they are covered too.
    Files left by an older version with wider modes are narrowed; they hold no secret
    the narrowing could come too late for."""
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        pass
    else:
        os.fchmod(fd, FILE_MODE)
        os.close(fd)
    for p in (path, *(Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal"))):
        try:
            mode = stat.S_IMODE(p.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            os.chmod(p, FILE_MODE)


def creation_problem(path: Path) -> str | None:
    """Why a file could not be created at ``path`` (its missing directories too), judged
    without creating anything: for checks that must change nothing (`allset validate`)."""
    if path.is_dir():
        return f"{path} is a directory"
    if path.exists():
        return None if os.access(path, os.R_OK | os.W_OK) else f"{path}: permission denied"
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is not a directory"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f"this user may not create files in {parent}"
            return None
    return None
