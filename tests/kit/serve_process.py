"""`allset serve` as a child process, for tests that kill it, signal it and restart it.
Every wait is bounded well below pytest's own timeout, and a child that does not exit in
time is made to show where it is: its threads' stacks (faulthandler, on SIGABRT) and the
tail of its log are in the test's failure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import grpc

from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import free_port, wait_until
from tests.kit.paths import ROOT

START_SECONDS = 30.0  # until the child answers gRPC
EXIT_SECONDS = 25.0  # for a child to exit; tests pass it --grace well below this
LOG_TAIL = 6000  # characters of the child's log shown when it misbehaves


class ServeProcess:
    """Starts `allset serve` (or ``program``, a wrapper around provider.cli) with one
    config and state directory; stdout and stderr of every run go to ``tmp/serve.log``."""

    def __init__(self, tmp: Path, config: Path | None, state_dir: Path, *,
                 grace: float = 5.0, program: Sequence[str] = ("-m", "provider.cli")) -> None:
        self.tmp, self.config, self.state_dir = tmp, config, state_dir
        self.grace, self.program = grace, tuple(program)
        self.log_path = tmp / "serve.log"

    def start(self, failpoints: str = "", *, answering: bool = True
              ) -> tuple[subprocess.Popen[bytes], str]:
        """The child and its address, once it answers gRPC (``answering``; otherwise at
        once, for a child that may stop by itself)."""
        address = f"127.0.0.1:{free_port()}"
        # PYTHONFAULTHANDLER: on SIGABRT the child writes every thread's stack first.
        env = {**os.environ, "ALLSET_FAILPOINTS": failpoints, "PYTHONFAULTHANDLER": "1"}
        config = ["--config", str(self.config)] if self.config is not None else []
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, *self.program, "serve", "--insecure", "--address", address,
             *config, "--state-dir", str(self.state_dir), "--grace", str(self.grace)],
            cwd=ROOT, env=env, stdout=log, stderr=log,
        )
        log.close()  # the child holds its own copy
        if not answering:
            return proc, address
        channel = grpc.insecure_channel(address)
        stub = pb_grpc.CloudProviderStub(channel)

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"allset serve exited early (status {proc.returncode}):"
                                   f"\n{self.log_tail()}")
            try:
                stub.GPULabel(pb.GPULabelRequest(), timeout=1)
                return True
            except grpc.RpcError:
                return False

        try:
            wait_until(up, timeout=START_SECONDS)
        except AssertionError:
            self._show_and_kill(proc)
            raise AssertionError(f"allset serve did not answer within {START_SECONDS:.0f}s:"
                                 f"\n{self.log_tail()}") from None
        finally:
            channel.close()
        return proc, address

    def wait(self, proc: subprocess.Popen[bytes], timeout: float = EXIT_SECONDS) -> int:
        """The child's exit status; if it has not exited within ``timeout``, fail with its
        threads' stacks and the tail of its log."""
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._show_and_kill(proc)
            raise AssertionError(f"allset serve did not exit within {timeout:.0f}s; "
                                 f"its log, ending with its threads' stacks:\n"
                                 f"{self.log_tail()}") from None

    def stop(self, proc: subprocess.Popen[bytes]) -> int:
        """SIGTERM, then the exit status (bounded as ``wait``)."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        return self.wait(proc)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL:]
        except OSError as err:
            return f"(no log: {err})"

    def _show_and_kill(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGABRT)  # faulthandler dumps the stacks, then it dies
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
