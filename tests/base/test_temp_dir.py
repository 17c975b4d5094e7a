"""Tests write only under pytest's basetemp (issue 53, item 9): tempfile and the processes
tests start use a directory there (tests/conftest.py), not /tmp at large."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def test_temp_files_land_under_basetemp(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.getbasetemp()
    with tempfile.NamedTemporaryFile() as made:
        assert Path(made.name).is_relative_to(base)
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp())"],
                           capture_output=True, text=True, check=True, timeout=60)
    assert Path(child.stdout.strip()).is_relative_to(base)
