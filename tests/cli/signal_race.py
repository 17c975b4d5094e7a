"""`allset serve` with a SIGTERM delivered at the worst moment for a signal handler: once
it has said it serves, the first time the main thread waits with no timeout.

``SIGNAL_RACE=locked-wait`` (the default) raises it in the main thread while that thread
holds the lock of the condition it is about to wait on: CPython runs a Python-level
signal handler in the main thread at the next bytecode boundary, wherever that is, and a
handler that takes that same lock (as ``threading.Event.set`` does) waits on itself
forever (python/cpython#126434, #85772). ``SIGNAL_RACE=other-thread`` has the kernel hand
it to another thread, as it may for a process-directed signal: the Python handler then
runs only once the main thread executes bytecode again, which a wait with no timeout
never does (python/cpython#85300). A test runs this as a program; both races are rare,
but real under load."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

_wait = threading.Condition.wait
_serving = threading.Event()  # the main thread printed its "serving" line
_fired = False


class _Stdout:
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if "allset: serving" in text:
            _serving.set()
        return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _wait_signalled(self: threading.Condition, timeout: float | None = None) -> bool:
    global _fired
    if timeout is None and not _fired and _serving.is_set() and \
            threading.current_thread() is threading.main_thread():
        _fired = True
        if os.environ.get("SIGNAL_RACE", "locked-wait") == "other-thread":
            def other() -> None:
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

            threading.Thread(target=other, name="signalled").start()
        else:
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode boundary
    return _wait(self, timeout)


def main(argv: list[str]) -> Any:
    threading.Condition.wait = _wait_signalled  # type: ignore[method-assign]
    sys.stdout = _Stdout(sys.stdout)
    from provider.cli.main import main as cli

    return cli(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
