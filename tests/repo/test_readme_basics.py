"""What the README asks a new user to run is available and leaves the checkout clean
(issue 15, items 8 and 10)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.kit.cli import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_grpcurl_is_introduced_before_its_first_use() -> None:
    first_use = re.search(r"^grpcurl ", README, flags=re.MULTILINE)
    assert first_use is not None
    before = README[:first_use.start()]
    assert "https://github.com/fullstorydev/grpcurl/releases" in before
    assert "go install github.com/fullstorydev/grpcurl/cmd/grpcurl@" in before


def test_what_readme_commands_write_into_the_checkout_is_ignored() -> None:
    """`allset certs --out certs` writes a CA key into the checkout; it must never be
    committed by accident."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    outs = re.findall(r"allset certs --out (\S+)", README)
    assert outs
    paths = [f"{out}/{name}" for out in outs
             for name in ("ca.key", "server.key", "client.key", "operator.key", "ca.crt")]
    done = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert sorted(done.stdout.split()) == sorted(paths), done
