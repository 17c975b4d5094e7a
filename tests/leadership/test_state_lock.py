"""Without Kubernetes there is no Lease: a second `allset serve` on the same state
directory is refused with one line, and the first keeps serving."""

from __future__ import annotations

from pathlib import Path

from tests.cli_kit import Served, run_allset
from tests.helpers import free_port, wait_until


def test_a_second_process_on_the_state_directory_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Served(["--state-dir", str(state)], tmp_path / "first.log")
    try:
        wait_until(first.answers, timeout=30)
        second = run_allset("serve", "--insecure", "--address", f"127.0.0.1:{free_port()}",
                            "--state-dir", str(state), timeout=60)
        assert second.returncode == 1, second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert "Traceback" not in second.stderr
        assert lines[-1].startswith("allset: --state-dir: another allset process (pid ")
        assert f"is using the state directory {state}/" in lines[-1]
        assert first.answers()  # the first one was not disturbed
    finally:
        assert first.stop() == 0
    # The lock goes with the process: a new one starts.
    again = Served(["--state-dir", str(state)], tmp_path / "again.log")
    try:
        wait_until(again.answers, timeout=30)
    finally:
        again.stop()
