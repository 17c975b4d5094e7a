"""Small things a new user trips over (issue 15, item 10): --version, progress of long
simulate runs on a terminal, no HiGHS banner. Console script in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.kit.cli import ALLSET, ROOT, run_allset


def test_version() -> None:
    """The version and the commit (issue 53 item 3): here the checkout's, in an image the
    one its build was given (tests/base/test_build.py)."""
    from importlib.metadata import version

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip()
    result = run_allset("--version")
    assert result.returncode == 0
    assert result.stdout == f"allset {version('allset')} (commit {head[:12]})\n"


def test_highs_prints_no_banner() -> None:
    code = "from provider.planner.solver import new_highs; new_highs(); new_highs()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
                          check=False)
    assert done.returncode == 0
    assert (done.stdout, done.stderr) == ("", "")


def test_simulate_shows_progress_on_a_terminal_only() -> None:
    """A 30 s simulate run was silent (issue 15, item 10); piped, it still prints nothing
    but its report."""
    import pty
    import select

    args = [str(ALLSET), "simulate", "--generate", "1", "--jobs", "200", "--days", "2",
            "--strategy", "allset"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    main, tty = pty.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=tty, cwd=ROOT, env=env)
    os.close(tty)
    seen = b""
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=60)
    os.close(main)
    assert proc.returncode == 0
    assert re.search(rb"\rallset: simulating allset \(1/1\): \d+% of simulated time", seen), seen
    assert seen.endswith(b"\r\x1b[K"), seen  # erased when done
    assert b"simulating" not in out
    piped = run_allset(*args[1:])
    assert piped.returncode == 0 and piped.stderr == ""
