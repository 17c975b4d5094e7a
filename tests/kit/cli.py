"""Run the real `allset` console script, as an operator would, against this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.kit.paths import ROOT as ROOT  # the kit's tests take it from here

ALLSET = Path(sys.executable).parent / "allset"


def run_allset(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
               timeout: float = 60, stdin: str | None = None,
               ) -> subprocess.CompletedProcess[str]:
    """The console script in a subprocess; PYTHONPATH puts this checkout first, so the
    code under test runs whichever checkout the virtualenv was installed from."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([str(ALLSET), *own_defaults(args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=full, input=stdin, check=False)


def own_defaults(args: Sequence[str]) -> list[str]:
    """`allset serve` as a test runs it: an address and a state directory of its own when
    the test names none (port 0, a new directory under the tests' temp dir). The defaults,
    127.0.0.1:8086 and ~/.local/state/allset, are the user's: a demo left running there
    from the README's first command failed tests that reached the port or the lock."""
    out = list(args)
    if "serve" not in out:
        return out
    given = {a.split("=", 1)[0] for a in out}
    if "--address" not in given:
        out += ["--address", "127.0.0.1:0"]
    if "--state-dir" not in given:
        out += ["--state-dir", tempfile.mkdtemp(prefix="state-")]
    return out


def one_line(stderr: str) -> str:
    """The single line a usage error prints; fails on a traceback or several lines."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


class Served:
    """`allset serve` running as a console script, its output in a file."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path = ROOT) -> None:
        import signal

        self.log = log
        self.address = f"127.0.0.1:{_free_port()}"
        full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        full.pop("KUBERNETES_SERVICE_HOST", None)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(ALLSET), "serve", "--insecure", "--address", self.address, *args],
                cwd=cwd, env=full, stdout=out, stderr=out)
        self._sigterm = signal.SIGTERM

    def text(self) -> str:
        return self.log.read_text()

    def answers(self) -> bool:
        import grpc

        from provider.wire import externalgrpc_pb2 as pb
        from provider.wire import externalgrpc_pb2_grpc as pb_grpc

        assert self.proc.poll() is None, self.text()
        with grpc.insecure_channel(self.address) as channel:
            try:
                pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=2)
                return True
            except grpc.RpcError:
                return False

    def scale_up(self, delta: int) -> str:
        """What CA does first: IncreaseSize on the first group; returns the group's id."""
        import grpc

        from provider.wire import externalgrpc_pb2 as pb
        from provider.wire import externalgrpc_pb2_grpc as pb_grpc

        with grpc.insecure_channel(self.address) as channel:
            stub = pb_grpc.CloudProviderStub(channel)
            group = str(stub.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups[0].id)
            stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=group, delta=delta),
                                       timeout=5)
        return group

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(self._sigterm)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _free_port() -> int:
    from tests.kit.helpers import free_port

    return free_port()
