"""Which allset this is: the installed distribution's version, and the commit it was built
from (`allset --version`, the allset_build_info metric)."""

from __future__ import annotations

import functools
import subprocess
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version
from pathlib import Path

# Written into the package by the image build from its ALLSET_COMMIT build argument
# (Dockerfile); a checkout asks git instead.
COMMIT_FILE = Path(__file__).resolve().parents[1] / "COMMIT"
UNKNOWN = "unknown"


@functools.cache
def version() -> str:
    try:
        return distribution_version("allset")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return UNKNOWN


@functools.cache
def commit() -> str:
    """The full commit id, or "unknown" (an image built without ALLSET_COMMIT, a wheel)."""
    if COMMIT_FILE.is_file():
        return COMMIT_FILE.read_text(encoding="utf-8").strip() or UNKNOWN
    checkout = COMMIT_FILE.parent.parent
    # Only allset's own checkout: a wheel installed in some other project's virtualenv
    # sits inside that project's work tree, whose commit is not ours.
    if not ((checkout / ".git").exists() and (checkout / "pyproject.toml").is_file()):
        return UNKNOWN
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else UNKNOWN


def describe() -> str:
    """One line: `allset 0.1.0 (commit 3c1ead4a1b2c)`."""
    sha = commit()
    return f"allset {version()} (commit {sha[:12] if sha != UNKNOWN else sha})"
