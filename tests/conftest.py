from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import grpc
import pytest

from provider.service.server import Server
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import Harness, harness


@pytest.fixture(scope="session", autouse=True)
def _temp_files_under_basetemp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What the tests and every process they start write through the temp directory
    (tempfile, TMPDIR: Python, Go, etcd, matplotlib) lands under pytest's basetemp, one per
    xdist worker, which pytest keeps for the last three runs, never in /tmp at large."""
    inside = tmp_path_factory.mktemp("tmp", numbered=False)
    was = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(inside)
    tempfile.tempdir = None  # read TMPDIR again
    try:
        yield
    finally:
        if was is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = was
        tempfile.tempdir = None


@pytest.fixture
def h() -> Iterator[Harness]:
    built = harness()
    yield built
    built.provider.stop()


@pytest.fixture
def server(h: Harness) -> Iterator[Server]:
    """The real server on 127.0.0.1 (plaintext) around the harness's provider."""
    srv = Server(h.provider, "127.0.0.1:0", None)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop(grace=1.0)


@pytest.fixture
def channel(server: Server) -> Iterator[grpc.Channel]:
    chan = grpc.insecure_channel(server.address)
    yield chan
    chan.close()


@pytest.fixture
def served(h: Harness, channel: grpc.Channel) -> tuple[Harness, pb_grpc.CloudProviderStub]:
    return h, pb_grpc.CloudProviderStub(channel)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What CI prints after the run: how many crash scenarios and e2e scenarios ran. Read
    from the reports, which reach this process under pytest-xdist too (the tests' own
    module state stays in the workers)."""
    def ran(prefix: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for outcome in ("passed", "failed", "error", "skipped"):
            out[outcome] = {r.nodeid for r in terminalreporter.stats.get(outcome, [])
                            if getattr(r, "nodeid", "").startswith(prefix)
                            and getattr(r, "when", "call") in ("call", "setup")}
        return out

    crash = ran("tests/promises/test_crash.py::test_crash_at_every_step")
    if crash["passed"]:
        points = {n.split("[", 1)[1].split("=")[0] for n in crash["passed"] if "[" in n}
        terminalreporter.write_line(
            f"crash test: {len(points)} crash points, {len(crash['passed'])} scenarios "
            f"(kill, restart with state kept or wiped) passed")
    e2e = ran("tests/e2e/")
    if any(e2e.values()):
        total = sum(len(v) for k, v in e2e.items() if k != "skipped")
        detail = ", ".join(f"{len(v)} {k}" for k, v in e2e.items() if v)
        releases = os.environ.get("ALLSET_E2E_RELEASES") or "current"
        terminalreporter.write_line(
            f"e2e: {total} scenarios ran on a real control plane ({detail}), "
            f"{releases} releases (scripts/build-kube --check names them)")
