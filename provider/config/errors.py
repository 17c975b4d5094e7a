"""The one error config loading raises: a person can fix it from its lines."""

from __future__ import annotations

from collections.abc import Sequence


class ConfigError(Exception):
    """A config problem a person can fix: which file, which field, what is allowed."""

    def __init__(self, source: str, problems: Sequence[tuple[str, str]]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = [f"{source}: {field}: {message}" if field else f"{source}: {message}"
                 for field, message in self.problems]
        super().__init__("\n".join(lines))
