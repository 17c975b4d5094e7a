"""A YAML parser's error in one line: where, then what ("line 2, column 1: expected the
node content, but found '<stream end>'"). PyYAML's own text spans four lines and quotes
the source, which a one-line-per-problem error cannot carry."""

from __future__ import annotations

import yaml


def yaml_problem(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None)
    if mark is None or not problem:
        return " ".join(str(err).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
