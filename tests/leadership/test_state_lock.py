"""Without Kubernetes there is no Lease: a second `allset serve` on the same state
directory (and so the same cloud) is refused with one line, and the first keeps serving.
A simulated cloud held in memory is each process's own, so the demo takes no lock."""

from __future__ import annotations

from pathlib import Path

from tests.kit.cli import Served, run_allset
from tests.kit.helpers import free_port, wait_until

CONFIG = """\
cluster: locked
cloud:
  provider: fake
  fake: {{statePath: {cloud}}}
nodeGroups:
  - {{id: cpu, zone: z1, instanceType: m7i.large, cpu: 2, memory: 8Gi, maxSize: 4,
     price: {{onDemand: 0.1}}}}
"""


def test_a_second_process_on_the_state_directory_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = tmp_path / "allset.yaml"
    config.write_text(CONFIG.format(cloud=tmp_path / "cloud.db"))
    args = ["--config", str(config), "--state-dir", str(state)]
    first = Served(args, tmp_path / "first.log")
    try:
        wait_until(first.answers, timeout=30)
        second = run_allset("serve", "--insecure", "--address", f"127.0.0.1:{free_port()}",
                            *args, timeout=60)
        assert second.returncode == 1, second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert "Traceback" not in second.stderr
        assert lines[-1].startswith("allset: --state-dir: another allset process (pid ")
        assert f"is using the state directory {state}/" in lines[-1]
        assert first.answers()  # the first one was not disturbed
    finally:
        assert first.stop() == 0
    # The lock goes with the process: a new one starts.
    again = Served(args, tmp_path / "again.log")
    try:
        wait_until(again.answers, timeout=30)
    finally:
        again.stop()


def test_demos_in_memory_do_not_lock_each_other(tmp_path: Path) -> None:
    first = Served(["--state-dir", str(tmp_path)], tmp_path / "first.log")
    second = Served(["--state-dir", str(tmp_path)], tmp_path / "second.log")
    try:
        wait_until(first.answers, timeout=30)
        wait_until(second.answers, timeout=30)
    finally:
        assert first.stop() == 0 and second.stop() == 0
