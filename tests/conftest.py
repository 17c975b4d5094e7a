from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from provider.service.server import Server
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.helpers import Harness, harness


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
    from tests.test_crash import COVERED, SCENARIOS

    if COVERED:
        points = {c.split("=")[0] for c in COVERED}
        terminalreporter.write_line(
            f"crash test: {len(points)} crash points, {len(COVERED)} of "
            f"{2 * len(SCENARIOS)} scenarios (kill, restart with state kept or wiped) passed"
        )
