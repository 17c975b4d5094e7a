"""docs/design.md is the specification the code cites: every invariant cited anywhere in the
repository is defined there, every checker the adversary runs is one of them, and what the
page says holds each invariant exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
CHECKERS = ROOT / "tests" / "adversary" / "invariants.py"

# A row of the invariants table: "| I12 | text | held by |".
_ROW = re.compile(r"^\| ([A-Z]\d{1,2}) \| (.+?) \| (.+?) \|$", re.M)
# Invariants are cited as I<n>; the other families only where they name an invariant (their
# letters collide with GPU and machine names: L4, T4, G2).
_CITED_I = re.compile(r"\bI\d{1,2}\b")
_DECLARED = re.compile(r'Invariant\(\s*"([A-Z]\d{1,2})(?:\.[a-z]+)?"')
_ADVERSARY_REF = re.compile(r"adversary ([A-Z]\d{1,2})\b")
_PATH = re.compile(r"\b(tests/[\w/]+\.py|provider/[\w/]+\.py)\b")


def _rows() -> dict[str, tuple[str, str]]:
    return {m.group(1): (m.group(2), m.group(3)) for m in _ROW.finditer(DESIGN.read_text())}


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    keep = (".py", ".md", ".yaml", ".yml", ".toml", ".json")
    return [ROOT / p for p in out
            if p.endswith(keep) and not p.startswith("provider/wire/") and (ROOT / p).exists()]


def test_every_cited_invariant_is_defined() -> None:
    defined = set(_rows())
    cited: dict[str, str] = {}
    for path in _tracked_text_files():
        for ident in _CITED_I.findall(path.read_text(errors="replace")):
            cited.setdefault(ident, str(path.relative_to(ROOT)))
    missing = {i: where for i, where in cited.items() if i not in defined}
    assert not missing, f"invariants cited but not defined in docs/design.md: {missing}"


def test_every_adversary_checker_is_a_defined_invariant() -> None:
    declared = set(_DECLARED.findall(CHECKERS.read_text()))
    assert declared, "no Invariant(...) declarations found: the pattern is stale"
    assert declared <= set(_rows()), declared - set(_rows())


def test_what_holds_each_invariant_exists() -> None:
    rows = _rows()
    declared = set(_DECLARED.findall(CHECKERS.read_text()))
    for ident, (_text, held_by) in rows.items():
        for ref in _ADVERSARY_REF.findall(held_by):
            assert ref in declared, f"{ident} says adversary {ref} holds it; no such checker"
        for path in _PATH.findall(held_by):
            assert (ROOT / path).exists(), f"{ident} says {path} holds it; no such file"
        unheld = "no adversary checker" in held_by or "no checker" in held_by
        assert _ADVERSARY_REF.search(held_by) or _PATH.search(held_by) or unheld, (
            f"{ident}: the page names nothing that holds it, and does not say so")


def test_the_glossary_gives_each_word_one_meaning() -> None:
    text = DESIGN.read_text()
    words = text.split("## Words", 1)[1].split("\n## ", 1)[0]
    terms = [line.split("|")[1].strip() for line in words.splitlines()
             if line.startswith("| ") and not line.startswith("| word")]
    names = [name.strip() for term in terms for name in term.split(",")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for word in ("book", "hold", "settle", "unknown outcome", "gang", "claim", "commit"):
        assert word in names, f"the glossary lacks {word!r}"
