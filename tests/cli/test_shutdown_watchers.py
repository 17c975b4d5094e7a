"""Issue 51, finding 3: SIGTERM ends `allset serve` in an orderly stop within its grace,
whatever Health.Watch clients do meanwhile (cancel their streams as the stop begins, or
watch on), with a scale-up's attempt in flight; the journal is left consistent."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from provider.attempts.journal import SqliteJournal
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.cli.test_shutdown import CONFIG, live
from tests.kit.serve_process import ServeProcess

GRACE = 4.0
WATCHERS = 200  # streams on one channel, as a mesh sidecar or a dashboard would hold
SERVICES = ("", "allset.live", "allset.ready")


def test_sigterm_with_watch_streams_cancelled_and_live_stops_in_order_within_grace(
        tmp_path: Path) -> None:
    """Fails on the code before: grpcio-health-checking's servicer sent each stream its
    NOT_SERVING holding its lock, waiting for gRPC's polling thread, which was waiting for
    that lock to forget a stream just cancelled. The stop never completed: the watcher
    ended the process after grace and margin, exit status 1, attempts left for recovery."""
    cloud_db = tmp_path / "cloud.db"
    config = tmp_path / "allset.yaml"
    # A launch takes a second: the scale-up is in flight when the signal comes.
    config.write_text(CONFIG.format(state=cloud_db).replace(
        "    statePath:", "    launchLatencySeconds: 1.0\n    statePath:"))
    serve = ServeProcess(tmp_path, config, tmp_path / "state", grace=GRACE)
    proc, address = serve.start()
    channel = grpc.insecure_channel(address)
    health = health_pb2_grpc.HealthStub(channel)
    streams = [health.Watch(health_pb2.HealthCheckRequest(service=SERVICES[i % 3]))
               for i in range(WATCHERS)]
    for stream in streams:
        next(stream)
    pb_grpc.CloudProviderStub(channel).NodeGroupIncreaseSize(
        pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=2), timeout=30)
    live_streams = streams[1::2]
    seen: dict[int, list[int]] = {}
    ended: dict[int, grpc.StatusCode] = {}

    def read(i: int, stream: grpc.Call) -> None:
        try:
            seen[i] = [r.status for r in stream]
            ended[i] = grpc.StatusCode.OK
        except grpc.RpcError as err:
            ended[i] = err.code()

    readers = [threading.Thread(target=read, args=(i, s), daemon=True)
               for i, s in enumerate(live_streams)]
    for r in readers:
        r.start()
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    for stream in streams[0::2]:  # cancelled as the stop begins
        stream.cancel()
    code = serve.wait(proc)
    took = time.monotonic() - start
    log = serve.log_tail()
    assert code == 0 and "allset stopped" in log and "still running" not in log, log
    assert took < GRACE + 2.0, (took, log)
    for r in readers:
        r.join(5)
    # Every live watcher was told NOT_SERVING, then its stream ended in order.
    assert set(ended.values()) == {grpc.StatusCode.OK}, ended
    assert all(s and s[-1] == health_pb2.HealthCheckResponse.NOT_SERVING
               for s in seen.values()), seen
    channel.close()
    # The journal is consistent: no attempt left open, and what runs is committed.
    journal = SqliteJournal(tmp_path / "state" / "hang" / "attempts.db")
    try:
        assert journal.open_attempts() == []
    finally:
        journal.close()
    running = live(cloud_db)
    assert len(running) == 2 and all(i.tags.committed for i in running), running
