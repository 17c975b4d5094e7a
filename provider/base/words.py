"""Words a person reads: counts ("1 node", "2 nodes"), and the word a typo meant."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural`` when adding "s" is wrong)."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known word ``word`` most likely misspells (difflib's ratio, case ignored), or
    None when none is close: "nodeSelectr: unknown field (did you mean nodeSelector?)"."""
    by_lower = {k.lower(): k for k in known}
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.8)
    return by_lower[found[0]] if found else None


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """" (did you mean <the closest known word>?)", or "" when none is close."""
    match = closest(word, known)
    return f" (did you mean {match}?)" if match is not None else ""
