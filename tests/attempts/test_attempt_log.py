"""An attempt can be followed in allset's log (issue 15): its plan, what each part launched
or why it failed, its outcome, with the attempt and request on every line as fields."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from provider.app import Provider
from provider.attempts.executor import MemoryJournal, inline_runner
from provider.attempts.log import LoggedJournal
from provider.domain.cloud import InsufficientCapacity
from tests.kit.helpers import ManualPool, config, harness


def test_an_attempt_is_told_from_plan_to_outcome(caplog: pytest.LogCaptureFixture) -> None:
    h = harness()
    provider = Provider(config(), h.cloud, h.clock, pool=ManualPool(), runner=inline_runner,
                        journal=LoggedJournal(MemoryJournal()))
    provider.refresh_now()
    # The reservation's launch fails once: the part is rolled back and a new plan is made.
    h.cloud.inject("launch", InsufficientCapacity("ReservationCapacityExceeded"),
                   when=lambda r: r.reservation == "r-gpu")
    caplog.set_level(logging.INFO, logger="allset.attempts")
    provider.scaleups.increase("gpu", 4)
    provider.workers.run_all()  # type: ignore[attr-defined]
    lines = [r for r in caplog.records if r.name == "allset.attempts"
             and r.getMessage().startswith("attempt ")]  # (terminations name instances)
    assert lines
    attempt = getattr(lines[0], "attempt", None)
    assert attempt and all(getattr(r, "attempt", None) == attempt for r in lines)
    text = "\n".join(r.getMessage() for r in lines)
    assert f"attempt {attempt} began for a Cluster Autoscaler scale-up" in text
    assert "plan 0: 4 nodes, 3 x gpu (reservation r-gpu), 1 x gpu (on-demand)" in text
    assert "plan 1:" in text  # planned again without the refused reservation
    assert "part 3 x gpu (reservation r-gpu) failed: ReservationCapacityExceeded" in text
    assert f"attempt {attempt} succeeded" in text


def test_json_lines_carry_the_attempt_and_request() -> None:
    # In its own process: JSON logging points fd 2 at a relay for the life of the process,
    # which in a test worker would outlive the test and take the worker's stderr with it.
    script = ("import logging; from provider.cli.log_format import configure; "
              "configure('info', 'json'); logging.getLogger('allset.attempts').info("
              "'attempt r0-1 began', extra={'attempt': 'r0-1', 'request': 'ml/train'})")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    line = json.loads(done.stderr.strip().splitlines()[-1])
    assert line["message"] == "attempt r0-1 began" and line["level"] == "INFO"
    assert line["attempt"] == "r0-1" and line["request"] == "ml/train"
    assert line["logger"] == "allset.attempts" and "time" in line
