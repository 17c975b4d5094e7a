"""With `--log-format json`, what reaches allset's stderr outside the logging module: gRPC's
C core (which logs through absl straight to file descriptor 2: "Handshake failed ...",
"Address already in use"), Python's warnings and tracebacks, the last words of a process
that ends with os._exit. The command points fd 2 at this small process's stdin
(log_format.py), and it writes each line as a JSON record, with the fields our own records
have, to the real stderr.

A process of its own rather than a thread: a thread dies with a process that ends at once
(a second Ctrl-C, the shutdown watcher's bound, faulthandler's exit), and what that process
wrote last would be lost in the pipe; this one reads to the end of the pipe, which comes
when the last process holding it (allset, its planning process) has ended. It runs in a
session of its own, so the Ctrl-C a terminal sends to allset's process group does not
reach it."""

from __future__ import annotations

import json
import re
import sys
import time

# absl's prefix, as gRPC's C core writes it: severity, MMDD, time, thread, file:line.
_ABSL = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ ([^\]\s]+)\] ?(.*)$")
_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}


def record(line: str, now: float) -> dict[str, str]:
    """One line as a JSON record: gRPC's with its level and source, anything else ERROR
    (what bypasses logging is a warning, a traceback or a process's last words)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + \
        f",{int(now % 1 * 1000):03d}"
    found = _ABSL.match(line)
    if found is not None:
        return {"time": stamp, "level": _LEVELS[found.group(1)], "logger": "grpc",
                "message": found.group(3), "source": found.group(2)}
    return {"time": stamp, "level": "ERROR", "logger": "stderr", "message": line}


def main() -> None:
    out = sys.stdout
    for raw in sys.stdin.buffer:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line.strip():
            continue
        try:
            out.write(json.dumps(record(line, time.time())) + "\n")
            out.flush()
        except (BrokenPipeError, OSError):
            return  # nobody reads allset's stderr any more


if __name__ == "__main__":
    main()
