"""The part of Compute's list ``filter`` syntax allset's adapter may send: terms
``field = value`` / ``field != value``, each optionally in parentheses, joined by spaces
or AND. Anything else is refused (HTTP 400), so a filter the real API would read
differently shows up as a failing test rather than as a silently wrong listing."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_TERM = re.compile(
    r'\s*(?:AND\s+)?\(?\s*(?P<field>[a-zA-Z][\w.-]*)\s*(?P<op>!=|=)\s*'
    r'(?:"(?P<quoted>[^"]*)"|(?P<bare>[^\s()"]+))\s*\)?\s*'
)


@dataclass(frozen=True, slots=True)
class Term:
    field: str
    negate: bool
    value: str


def parse(text: str) -> list[Term]:
    terms: list[Term] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TERM.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"unsupported filter near {text[pos:]!r}")
        value = match.group("quoted")
        terms.append(Term(match.group("field"), match.group("op") == "!=",
                          value if value is not None else match.group("bare")))
        pos = match.end()
    return terms


def matcher(text: str | None) -> Callable[[Mapping[str, str], Mapping[str, str]], bool]:
    """A predicate over (fields, labels) of a resource; fields are top-level strings."""
    terms = parse(text) if text else []

    def matches(fields: Mapping[str, str], labels: Mapping[str, str]) -> bool:
        for term in terms:
            if term.field.startswith("labels."):
                actual = labels.get(term.field.removeprefix("labels."))
            else:
                actual = fields.get(term.field)
            if (actual == term.value) == term.negate:
                return False
        return True

    return matches
