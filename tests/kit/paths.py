"""Where the checkout is, for tests that run its scripts or read its files."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
