"""YAML as PyYAML's safe loader reads it, except that a key given twice in one mapping is
an error: PyYAML keeps the last silently, so a config with two `maxSize:` lines ran with
whichever came second (YAML 1.2 says keys are unique)."""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKey(yaml.YAMLError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise DuplicateKey(f"line {key_node.start_mark.line + 1}: key {key!r} given "
                                   f"twice in the mapping that starts at line "
                                   f"{node.start_mark.line + 1}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load(text: str) -> Any:
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
