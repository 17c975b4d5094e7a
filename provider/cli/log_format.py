"""How allset's log lines look: text for people, or one JSON object per line for a log
pipeline (python-json-logger), where an attempt's lines carry `attempt` and `request`.

In JSON every line allset writes to stderr is a JSON object, its own records and also what
bypasses the logging module: gRPC's C core writes to file descriptor 2 itself, through absl,
which Python cannot hand a formatter. So fd 2 is pointed at a relay process
(stderr_relay.py) that turns each such line into a record, and allset's own records go
straight to the real stderr. gRPC keeps its default verbosity (GRPC_VERBOSITY, ERROR and
above): its lines are worth having, as JSON."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_relay: subprocess.Popen[bytes] | None = None  # kept, so it is never collected
_real_stderr: TextIO | None = None


def configure(level: str, fmt: str) -> None:
    if fmt == "json":
        handler = logging.StreamHandler(_relay_stderr())
        handler.setFormatter(JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"}))
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(TEXT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))


def is_json() -> bool:
    return _relay is not None


def _relay_stderr() -> TextIO:
    """Point fd 2 at the relay; return a stream on the stderr it had, for our records."""
    global _relay, _real_stderr
    if _real_stderr is not None:  # configured before, in this process
        return _real_stderr
    sys.stderr.flush()
    real = os.dup(2)
    _relay = subprocess.Popen([sys.executable, "-m", "provider.cli.stderr_relay"],
                              stdin=subprocess.PIPE, stdout=real, stderr=real,
                              start_new_session=True)
    assert _relay.stdin is not None
    os.dup2(_relay.stdin.fileno(), 2)
    _relay.stdin.close()  # fd 2 is now this process's one end of the pipe
    _real_stderr = os.fdopen(real, "w", buffering=1, encoding="utf-8", errors="replace")
    return _real_stderr
