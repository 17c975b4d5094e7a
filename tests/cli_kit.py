"""Run the real `allset` console script, as an operator would, against this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLSET = Path(sys.executable).parent / "allset"


def run_allset(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
               timeout: float = 60, stdin: str | None = None,
               ) -> subprocess.CompletedProcess[str]:
    """The console script in a subprocess; PYTHONPATH puts this checkout first, so the
    code under test runs whichever checkout the virtualenv was installed from."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([str(ALLSET), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=full, input=stdin, check=False)


def one_line(stderr: str) -> str:
    """The single line a usage error prints; fails on a traceback or several lines."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]
