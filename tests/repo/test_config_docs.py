"""The config reference in docs/config/ is generated from the schema and must be current."""

from __future__ import annotations

import subprocess
import sys

from tests.kit.deploy import ROOT


def test_config_reference_is_current() -> None:
    done = subprocess.run([sys.executable, "scripts/gen_config_docs.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, (
        f"docs/config/ is stale; run `python scripts/gen_config_docs.py`:\n{done.stderr}")


def test_reference_covers_every_cloud_and_key() -> None:
    pages = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "config").glob("*.md")}
    assert set(pages) == {"README.md", "simulated.md", "aws.md", "gcp.md"}
    assert "`nodeGroups[]`" in pages["README.md"] and "`maxSize`" in pages["README.md"]
    assert "`cloud.fake.reservations[]`" in pages["simulated.md"]
    assert "`nodeGroups[].aws.launchTemplate`" in pages["aws.md"]
    assert "`cloud.gcp.reservationSelector`" in pages["gcp.md"]
    for page in ("simulated.md", "aws.md", "gcp.md"):
        assert "```yaml" in pages[page]  # the example config, whole
