"""The examples do not run out: a capacity block in deploy/examples ended on 2027-01-01,
weeks after it was written (issue 35, item 9), and every command the docs show from that
config would then have planned without it. Each window an example or page writes down
still has a year to run on the day the tests run (the wall clock, on purpose: it is what a
reader of the example has)."""

from __future__ import annotations

import datetime as dt
import re

from tests.kit.deploy import ROOT

_ENDS = re.compile(r"\bendsAt:\s*\"?(\d{4}-\d{2}-\d{2}T[\d:.]+Z)")


def _windows() -> dict[str, list[dt.datetime]]:
    found: dict[str, list[dt.datetime]] = {}
    files = [*sorted((ROOT / "deploy").rglob("*.yaml")), ROOT / "README.md",
             *sorted((ROOT / "docs").rglob("*.md"))]
    for path in files:
        ends = [dt.datetime.fromisoformat(m.replace("Z", "+00:00"))
                for m in _ENDS.findall(path.read_text(encoding="utf-8"))]
        if ends:
            found[str(path.relative_to(ROOT))] = ends
    return found


def test_every_window_in_the_examples_lasts_another_year() -> None:
    windows = _windows()
    assert "deploy/examples/simulated.yaml" in windows, windows
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(days=365)
    ending = {f: [e.isoformat() for e in ends if e < soon] for f, ends in windows.items()}
    assert not {f: e for f, e in ending.items() if e}, (
        "these examples stop working within a year; move their endsAt further out")
