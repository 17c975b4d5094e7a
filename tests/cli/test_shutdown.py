"""SIGTERM ends `allset serve` within its grace period plus a small bound, whatever the
process is doing: settling into its wait, waiting with the signal handed to another
thread, or draining an attempt that never finishes. What a bounded stop leaves behind is
recovered by the next start, as after a crash."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from adapters.fake.store import FakeStore
from provider.cli.shutdown import EXIT_MARGIN_SECONDS, EXIT_NOT_DRAINED, Shutdown
from provider.domain.cloud import InstanceState
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import wait_until
from tests.kit.serve_process import EXIT_SECONDS, ServeProcess

RACE = str(Path(__file__).with_name("signal_race.py"))


@pytest.mark.parametrize("race", ["locked-wait", "other-thread"])
def test_a_sigterm_as_the_main_thread_settles_into_its_wait_stops_it(
        tmp_path: Path, race: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (the rare hang of the crash test's restarted allset): the SIGTERM
    handler set a threading.Event. Landing while the main thread held that event's lock
    on its way into wait(), it waited on itself forever; handed to another thread, it
    was never run at all. Fails on the code before: the child never exits."""
    monkeypatch.setenv("SIGNAL_RACE", race)
    serve = ServeProcess(tmp_path, None, tmp_path / "state", program=(RACE,))
    proc, _ = serve.start(answering=False)  # the wrapper signals it once it serves
    code = serve.wait(proc)
    assert code == 0, serve.log_tail()
    assert "received SIGTERM" in serve.log_tail() and "allset stopped" in serve.log_tail()


CONFIG = """\
cluster: hang
refreshInterval: 1s
reconcile: {{orphanGrace: 1s}}
cloud:
  provider: fake
  fake:
    statePath: {state}
    reservations:
      - {{id: r-a, zone: us-east-1a, instanceType: p5.48xlarge, count: 2}}
nodeGroups:
  - id: gpu
    zone: us-east-1a
    instanceType: p5.48xlarge
    gpu: {{type: nvidia-h100-80gb, count: 8}}
    cpu: 191
    memory: 1900Gi
    maxSize: 8
    price: {{onDemand: 98.32}}
"""


def test_an_attempt_that_never_finishes_is_left_for_recovery_within_the_grace(
        tmp_path: Path) -> None:
    """A part's launch never returns (a cloud call hung on a dead connection). SIGTERM
    ends the process within --grace plus the exit margin, the attempt still open in the
    journal and its instances tagged; the next start rolls it back at once. Fails on the
    code before: the drain waited for the worker with no bound."""
    cloud_db = tmp_path / "cloud.db"
    config = tmp_path / "allset.yaml"
    config.write_text(CONFIG.format(state=cloud_db))
    serve = ServeProcess(tmp_path, config, tmp_path / "state", grace=2.0)
    assert 2.0 + EXIT_MARGIN_SECONDS < EXIT_SECONDS
    proc, address = serve.start("executor.part-launched=hang@1")
    stub = pb_grpc.CloudProviderStub(__import__("grpc").insecure_channel(address))
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=3), timeout=30)
    wait_until(lambda: len(live(cloud_db)) >= 2, timeout=30)  # a part is up, then hangs
    proc.send_signal(signal.SIGTERM)
    code = serve.wait(proc)
    assert code == EXIT_NOT_DRAINED, serve.log_tail()
    assert "left for recovery" in serve.log_tail()
    assert live(cloud_db) and not any(i.tags.committed for i in live(cloud_db))

    proc, _ = serve.start()  # recovery: the journal says the attempt never committed
    try:
        wait_until(lambda: not live(cloud_db), timeout=30)
    finally:
        assert serve.stop(proc) == 0, serve.log_tail()


def live(path: Path) -> list:  # type: ignore[type-arg]
    store = FakeStore(path)
    try:
        instances, _ = store.load()
    finally:
        store.close()
    return [i for i in instances if i.state is not InstanceState.TERMINATED]


# --- the watcher, in this process (SIGUSR1 stands for SIGTERM) ------------------------------


class Exits:
    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


@pytest.fixture
def exits() -> Exits:
    return Exits()


def installed(shutdown: Shutdown) -> Shutdown:
    shutdown.install(signals=(signal.SIGUSR1,))
    return shutdown


def test_a_signal_handed_to_another_thread_wakes_the_main_thread(exits: Exits) -> None:
    shutdown = installed(Shutdown(60.0, exit=exits))
    try:
        def signal_self() -> None:
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

        thread = threading.Thread(target=signal_self)
        thread.start()
        thread.join(10)
        assert shutdown.wait(timeout=10)  # no bytecode ran in this thread meanwhile
        assert shutdown.signal_name == "SIGUSR1" and 0 < shutdown.remaining() <= 60.0
        assert not exits.codes
    finally:
        shutdown.close()


def test_the_process_ends_when_the_stop_outlives_grace_and_margin(
        exits: Exits, capfd: pytest.CaptureFixture[str]) -> None:
    shutdown = installed(Shutdown(0.2, 0.1, exit=exits))
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert shutdown.wait(timeout=10)
        assert exits.called.wait(10)  # nothing drained: the watcher ends it
        assert exits.codes == [EXIT_NOT_DRAINED] and shutdown.remaining() == 0.0
        err = capfd.readouterr().err
        assert "still running" in err and "Thread 0x" in err  # and shows every stack
    finally:
        shutdown.close()


def test_a_second_signal_ends_the_process_at_once(exits: Exits) -> None:
    shutdown = installed(Shutdown(3600.0, exit=exits))
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert shutdown.wait(timeout=10)
        assert not exits.called.wait(0.2)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert exits.called.wait(10) and exits.codes == [EXIT_NOT_DRAINED]
    finally:
        shutdown.close()


def test_no_signal_no_stop(exits: Exits) -> None:
    shutdown = installed(Shutdown(1.0, exit=exits))
    try:
        assert not shutdown.wait(timeout=0.1)
        assert shutdown.remaining() == 1.0 and not exits.codes
    finally:
        shutdown.close()
    assert signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, signal.SIG_IGN, None) or \
        callable(signal.getsignal(signal.SIGUSR1))


def test_a_negative_grace_is_refused() -> None:
    with pytest.raises(ValueError, match="grace"):
        Shutdown(-1.0)


GIL_HELD = """\
import os, re, signal, time
from provider.cli.shutdown import Shutdown
shutdown = Shutdown(0.5, 0.5)
shutdown.install()
os.kill(os.getpid(), signal.SIGTERM)
assert shutdown.wait(10)
print("stopping", flush=True)
re.match(r"(a+)+$", "a" * 64 + "b")  # backtracks for ages without letting the GIL go
"""


def test_the_backstop_ends_a_process_whose_watcher_cannot_run(tmp_path: Path) -> None:
    """The main thread holds the GIL in C for good, so the watcher thread never runs:
    faulthandler's timer (a C thread) still dumps the stacks and ends the process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", GIL_HELD], capture_output=True, text=True,
                          timeout=EXIT_SECONDS, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout == "stopping\n", done.stderr
    assert done.returncode == EXIT_NOT_DRAINED and "Timeout" in done.stderr, done.stderr


def test_a_sigterm_during_startup_recovery_ends_the_process_within_the_bound(
        tmp_path: Path) -> None:
    """The restart after a crash rolls the crashed attempt back before it serves; a cloud
    call of that rollback never returns. SIGTERM still ends the process within --grace
    plus the margin (the main thread never gets back to its wait: the watcher ends it),
    and the next start finishes the recovery. Fails on the code before: the handler ran,
    but nothing else ever looked at what it set."""
    import grpc

    cloud_db = tmp_path / "cloud.db"
    config = tmp_path / "allset.yaml"
    config.write_text(CONFIG.format(state=cloud_db))
    serve = ServeProcess(tmp_path, config, tmp_path / "state", grace=1.0)
    proc, address = serve.start("executor.part-launched=kill@1")
    with grpc.insecure_channel(address) as channel:
        pb_grpc.CloudProviderStub(channel).NodeGroupIncreaseSize(
            pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=3), timeout=30)
    assert serve.wait(proc) == -signal.SIGKILL, serve.log_tail()
    assert live(cloud_db)

    proc, _ = serve.start("reconcile.rolling-back=hang@1", answering=False)
    wait_until(lambda: "rolling back" in serve.log_tail(), timeout=30)  # and hangs there
    proc.send_signal(signal.SIGTERM)
    code = serve.wait(proc)
    assert code == EXIT_NOT_DRAINED, serve.log_tail()
    assert "still running" in serve.log_tail() and live(cloud_db)

    proc, _ = serve.start()
    try:
        wait_until(lambda: not live(cloud_db), timeout=30)
    finally:
        assert serve.stop(proc) == 0, serve.log_tail()
