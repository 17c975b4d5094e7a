"""Child processes of the e2e suite: each logs to its own file (shown when a test fails),
stops with SIGTERM and, if it lingers, SIGKILL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Proc:
    def __init__(self, name: str, argv: Sequence[str], log: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.env = dict(env) if env is not None else None
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        handle = self.log.open("ab")
        handle.write(f"\n=== start {' '.join(self.argv)}\n".encode())
        handle.flush()
        self.popen = subprocess.Popen(self.argv, stdout=handle, stderr=subprocess.STDOUT,
                                      env=self.env, start_new_session=True)
        handle.close()
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.popen.returncode}:\n"
                                 f"{self.tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        if not self.alive:
            return
        assert self.popen is not None
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when the machine dies."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(30)

    def tail(self, lines: int = 60) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
