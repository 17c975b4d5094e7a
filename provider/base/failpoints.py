"""Named points in the code where a test can make the process die, to prove that a crash
at that exact step loses nothing. Off unless ALLSET_FAILPOINTS is set, e.g.

    ALLSET_FAILPOINTS="executor.part-launched=kill@2"   # SIGKILL on the 2nd hit

Every hit of an armed point is counted; `kill` sends SIGKILL to this process (no cleanup,
no flush: the same as the node dying), `exit` leaves with status 86, `hang` blocks the
thread that hit it for good (a cloud call that never returns, as seen by a shutdown)."""

from __future__ import annotations

import os
import signal
import threading

ENV = "ALLSET_FAILPOINTS"
POINTS = (
    "executor.recorded",  # the attempt is recorded; nothing launched yet
    "ledger.planned",  # a plan is built outside the ledger's lock; nothing claimed yet
    "executor.part-launched",  # a part is up; others may not be
    "executor.rollback-started",  # a part failed; nothing terminated yet
    "executor.part-rolled-back",  # some parts terminated, others still running
    "executor.before-commit",  # every part is up; no commit tag yet
    "executor.committed",  # the commit tag is on; the local record is not updated
    "reconcile.rolling-back",  # orphans are due (at startup: a crashed run's); none gone yet
)

ACTIONS = ("kill", "exit", "hang")

_lock = threading.Lock()
_armed: dict[str, tuple[str, int]] = {}
_hits: dict[str, int] = {}


def _load() -> None:
    for item in filter(None, (os.environ.get(ENV) or "").split(",")):
        name, _, action = item.partition("=")
        action, _, nth = action.partition("@")
        if name not in POINTS:
            raise ValueError(f"{ENV}: unknown failpoint {name!r}; known: {', '.join(POINTS)}")
        if (action or "kill") not in ACTIONS:
            raise ValueError(f"{ENV}: {name}: unknown action {action!r}; known: "
                             f"{', '.join(ACTIONS)}")
        _armed[name] = (action or "kill", int(nth or "1"))


_load()


def hit(name: str) -> None:
    """Mark that execution reached ``name``; die here if a test armed it."""
    if not _armed:
        return
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        action = _armed.get(name)
        if action is None or _hits[name] != action[1]:
            return
    if action[0] == "exit":
        os._exit(86)
    if action[0] == "hang":
        threading.Event().wait()
    os.kill(os.getpid(), signal.SIGKILL)
