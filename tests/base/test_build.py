"""Which allset this is: the version and the commit `allset --version` and the
allset_build_info metric report."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider.base import build
from tests.kit.cli import ROOT


@pytest.fixture(autouse=True)
def _uncached() -> Iterator[None]:
    build.commit.cache_clear()
    yield
    build.commit.cache_clear()


def test_an_image_reads_the_commit_its_build_wrote(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    baked = tmp_path / "site-packages" / "provider" / "COMMIT"
    baked.parent.mkdir(parents=True)
    baked.write_text("9f1c2d3e4b5a69788796a5b4c3d2e1f009182736\n")  # as the Dockerfile does
    monkeypatch.setattr(build, "COMMIT_FILE", baked)
    assert build.commit() == "9f1c2d3e4b5a69788796a5b4c3d2e1f009182736"
    assert build.describe() == f"allset {build.version()} (commit 9f1c2d3e4b5a)"


def test_a_wheel_outside_our_checkout_says_unknown(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed into another project's virtualenv, inside that project's git work tree:
    the commit of that project is not allset's."""
    project = tmp_path / "their-project"
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=30)
    package = project / ".venv" / "lib" / "python3.11" / "site-packages" / "provider"
    package.mkdir(parents=True)
    monkeypatch.setattr(build, "COMMIT_FILE", package / "COMMIT")
    assert build.commit() == "unknown"
    assert build.describe().endswith("(commit unknown)")


def test_a_checkout_asks_git() -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip()
    assert build.commit() == head
