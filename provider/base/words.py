"""Counts in the words a person reads: "1 node", "2 nodes"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural`` when adding "s" is wrong)."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"
