"""The stable surface (docs/compatibility.md) is held to its record, docs/stable-surface.json:
a change to a config key, a flag, a metric or its labels, an instance tag, a label or
annotation, the admin service or the journal's columns fails here until the record is
rewritten (`python scripts/stable_surface.py`) and the change is in CHANGELOG.md."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.kit.deploy import ROOT

SCRIPT = "scripts/stable_surface.py"


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, SCRIPT, "--check"], cwd=root, capture_output=True,
                          text=True, timeout=110, check=False)


def test_the_record_is_the_code() -> None:
    done = _check(ROOT)
    assert done.returncode == 0, (
        "the stable surface changed: if you meant it, run `python scripts/stable_surface.py`"
        " and say what changed in CHANGELOG.md (docs/compatibility.md says how it may "
        f"change)\n{done.stderr}")


# Deliberate renames, one of each kind, in a copy of the source: each must fail the check
# and show the old name and the new one.
RENAMES = {
    "metric": ("provider/attempts/metrics.py", '"allset_nodes_launched"',
               '"allset_nodes_started"', "allset_nodes_started_total"),
    "metric label": ("provider/attempts/metrics.py", '["source", "group", "zone"]',
                     '["capacity", "group", "zone"]', '"capacity"'),
    "flag": ("provider/cli/main.py", '"--grace"', '"--grace-seconds"', "--grace-seconds"),
    "config key": ("provider/config/schema.py", "    refresh_interval: Duration",
                   "    refresh_period: Duration", '"refreshPeriod"'),
    "instance tag": ("adapters/aws/tags.py", 'PREFIX + "part"', 'PREFIX + "piece"',
                     '"allset.dev/piece"'),
    "journal column": ("provider/attempts/journal.py", "    since REAL NOT NULL",
                       "    owed_since REAL NOT NULL", '"owed_since REAL NOT NULL"'),
}


@pytest.mark.timeout(120)  # a copy of the source and one run of the script (~5 s alone)
@pytest.mark.parametrize("kind", sorted(RENAMES))
def test_a_rename_fails_the_check(kind: str, tmp_path: Path) -> None:
    path, old, new, shown = RENAMES[kind]
    for part in ("provider", "adapters", "scripts"):
        shutil.copytree(ROOT / part, tmp_path / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "stable-surface.json", tmp_path / "docs")
    assert _check(tmp_path).returncode == 0  # the copy alone is the record
    source = (tmp_path / path).read_text(encoding="utf-8")
    assert source.count(old) == 1, f"{old} is no longer in {path}: pick another rename"
    (tmp_path / path).write_text(source.replace(old, new), encoding="utf-8")
    done = _check(tmp_path)
    assert done.returncode == 1
    added = [ln for ln in done.stderr.splitlines() if ln.startswith("+ ")]
    assert any(re.search(re.escape(shown), ln) for ln in added), done.stderr


def test_the_changelog_has_a_section_for_this_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["version"]
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
                          re.MULTILINE)
    assert headings[0] == "Unreleased"  # where the next change is written
    assert version in headings, f"CHANGELOG.md has no section for {version}"
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)  # SemVer, as docs/compatibility.md says
