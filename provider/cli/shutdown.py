"""SIGTERM and SIGINT as an orderly stop with a hard bound.

CPython runs a Python signal handler in the main thread between two bytecodes, wherever
that thread is. A handler that takes a lock the main thread may hold at that moment waits
on itself forever: ``threading.Event.set`` takes its condition's lock, which the main
thread holds while it enters ``Event.wait`` (python/cpython#126434, #85772). And a signal
the kernel hands to another thread runs its handler only once the main thread executes
bytecode again (python/cpython#85300). So the Python handler here does nothing: CPython's
C-level handler writes the signal's number to a pipe (``signal.set_wakeup_fd``) from
whichever thread got it, and a watcher thread reading that pipe sets the event the main
thread waits on.

The watcher also holds the bound: ``grace`` seconds after the first signal the orderly
stop should be over, and ``margin`` seconds later (handing the lease over, the last log
lines, interpreter exit) the watcher writes every thread's stack to stderr and ends the
process with ``os._exit``, whatever is still running. That is a crash as far as state
goes, which allset survives by design: attempts are in the journal before their first
cloud call and tagged in the cloud, terminations owed are written before they are tried.
A second signal ends the process at once, the same way. Should the watcher itself be
unable to run (a thread holding the GIL in a C call, an interpreter stuck in its own
exit), faulthandler's timer, a C thread that needs no GIL, dumps the stacks and exits a
moment later."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

log = logging.getLogger(__name__)

# After the grace period: enough for one bounded Lease write (leaderElection.retryPeriod,
# 8s by default) and the interpreter's exit.
EXIT_MARGIN_SECONDS = 10.0
EXIT_NOT_DRAINED = 1  # the status when the process ends without an orderly stop
BACKSTOP_SECONDS = 2.0  # after the watcher's bound: faulthandler's, if the watcher is stuck
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Shutdown:
    """Install once, from the main thread, before anything that must be drained starts;
    then ``wait()``. ``exit`` and ``clock`` are injected by tests."""

    def __init__(self, grace: float, margin: float = EXIT_MARGIN_SECONDS, *,
                 exit: Callable[[int], object] = os._exit,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if grace < 0 or margin < 0:
            raise ValueError(f"grace ({grace}) and margin ({margin}) must not be negative")
        self.grace, self.margin = grace, margin
        self._exit, self._clock = exit, clock
        self.requested = threading.Event()  # set by the watcher, never by a signal handler
        self.signal_name = ""
        self._received_at: float | None = None
        self._signals: tuple[int, ...] = ()
        self._previous: dict[int, object] = {}
        self._previous_fd = -1
        self._pipe: tuple[int, int] | None = None
        self._watcher: threading.Thread | None = None
        self._closing = False

    # --- setup ----------------------------------------------------------------------------

    def install(self, signals: Sequence[int] = STOP_SIGNALS) -> None:
        read, write = os.pipe()
        os.set_blocking(write, False)  # set_wakeup_fd requires it; a full pipe drops bytes
        self._pipe = (read, write)
        self._signals = tuple(signals)
        self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for signum in self._signals:
            self._previous[signum] = signal.signal(signum, _noted)
        self._watcher = threading.Thread(target=self._watch, name="shutdown", daemon=True)
        self._watcher.start()

    def close(self) -> None:
        """Undo install (tests; a served process just exits)."""
        if self._pipe is None:
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_fd)
        self._closing = True
        os.write(self._pipe[1], b"\0")  # wake the watcher to see it
        if self._watcher is not None:
            self._watcher.join(5)
        for fd in self._pipe:
            os.close(fd)
        self._pipe = None

    # --- what the main thread uses --------------------------------------------------------

    def wait(self, timeout: float | None = None) -> bool:
        """Until a stop signal has arrived (or ``timeout``): True when one did."""
        return self.requested.wait(timeout)

    def remaining(self) -> float:
        """Seconds left of the grace period (the full grace before any signal)."""
        if self._received_at is None:
            return self.grace
        return max(0.0, self._received_at + self.grace - self._clock())

    def exit_now(self, why: str) -> None:
        """End the process now, without an orderly stop: say why, flush the log, exit.
        (The main thread's way out; the watcher's own exits write to stderr directly, so
        that a thread stuck inside the logging module cannot hold them up.)"""
        log.warning("%s", why)
        _flush_logs()
        self._exit(EXIT_NOT_DRAINED)

    # --- the watcher ----------------------------------------------------------------------

    def _watch(self) -> None:
        assert self._pipe is not None
        read = self._pipe[0]
        while not self._closing:
            timeout = None
            if self._received_at is not None:
                timeout = max(0.0, self._received_at + self.grace + self.margin - self._clock())
            ready, _, _ = select.select([read], [], [], timeout)
            if not ready:
                self._expired()
                return
            for signum in os.read(read, 512):
                if signum in self._signals and not self._closing:
                    self._received(signum)

    def _received(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._received_at is not None:
            _say(f"allset: received {name} again while stopping: exiting now; attempts in "
                 "flight are left for recovery at the next start")
            self._exit(EXIT_NOT_DRAINED)
            return
        self._received_at = self._clock()
        self.signal_name = name
        # A real exit, not a test's: arm the C-level backstop first (the log line below
        # may wait for a thread that is inside the logging module).
        if self._exit is os._exit:
            faulthandler.dump_traceback_later(self.grace + self.margin + BACKSTOP_SECONDS,
                                              exit=True, file=sys.stderr.fileno())
        self.requested.set()  # before the log line, which may wait on a stuck thread
        log.info("received %s: draining for at most %.0fs, exiting within %.0fs", name,
                 self.grace, self.grace + self.margin)

    def _expired(self) -> None:
        # Written without the logging module: a thread stuck inside it must not keep the
        # process from ending. faulthandler writes from C, taking no lock.
        _say(f"allset: still running {self.grace + self.margin:.0f}s after "
             f"{self.signal_name} (--grace {self.grace:g}s + {self.margin:g}s); the "
             "threads' stacks follow; exiting now (any attempt among them is left for "
             "recovery at the next start)")
        with contextlib.suppress(Exception):
            faulthandler.dump_traceback(file=sys.stderr.fileno(), all_threads=True)
        self._exit(EXIT_NOT_DRAINED)


def _noted(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: nothing to do, the wakeup byte carries the signal (and
    doing nothing here is what makes it safe wherever the main thread is)."""


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(sys.stderr.fileno(), (line + "\n").encode())


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
