"""`allset validate --config FILE`: the pre-flight check of a config, offline. Everything
`allset serve` checks of the file before its first cloud call (the schema, the rules across
fields and sections, each group's shape and template node, the files it would create), with
no cloud credentials, no network and nothing written. Exit 0 with one OK line, or 1 with
one line per problem."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from provider.config import ConfigError, LoadedConfig, load_config


def validate(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        problems = _group_problems(config) + _path_problems(config)
    except ConfigError as err:
        problems = [str(err)]
    if problems:
        for problem in problems:
            for line in problem.splitlines():
                print(f"allset: {line}", file=sys.stderr)
        return 1
    print(f"allset: {config.source}: OK: {_summary(config)}")
    return 0


def _summary(config: LoadedConfig) -> str:
    total = len(config.schema.node_groups)
    text = f"{total} node group{'' if total == 1 else 's'} on cloud {config.schema.cloud.provider}"
    if config.unresolved:
        # Only the cloud can describe these: checked by `allset serve` (or `plan --config`)
        # at its first call, with credentials.
        types = ", ".join(config.unresolved)
        text += (f"; the shape of {types} is" if len(config.unresolved) == 1 else
                 f"; the shapes of {types} are") + " left to the cloud (checked when allset starts)"
    return text


def _group_problems(config: LoadedConfig) -> list[str]:
    """Build what serve builds from each group before any cloud call: the planner's
    matcher and the template node CA is given. A failure here is one a config reached
    that the schema let through: said per group rather than as serve's traceback."""
    from provider.planner.matching import Matcher
    from provider.service.nodeinfo import template_info

    problems: list[str] = []
    try:
        Matcher(config.groups, config.schema.gpu_label)
    except Exception as err:  # reported, not raised: validate's whole job is to say it
        problems.append(f"{config.source}: nodeGroups: the planner cannot use them: {err}")
    index = {g.id: i for i, g in enumerate(config.schema.node_groups)}
    for group in config.groups:
        try:
            template_info(group, config.schema.gpu_label)
        except Exception as err:
            problems.append(f"{config.source}: nodeGroups[{index[group.id]}] (id {group.id}): "
                            f"its template node cannot be built: {err}")
    return problems


def _path_problems(config: LoadedConfig) -> list[str]:
    """The config's one path, cloud.fake.statePath, checked as the simulated cloud would
    create or open it (adapters/registry.py), without creating or changing it."""
    from adapters.registry import beside_config, state_path_refusal
    from provider.base.files import creation_problem

    fake = config.schema.cloud.fake
    if config.schema.cloud.provider != "fake" or fake is None or not fake.state_path:
        return []
    path = beside_config(config.source, fake.state_path)
    wrong = creation_problem(Path(path)) if path else None
    if wrong:
        return [f"{config.source}: cloud.fake.statePath: cannot create {path}: {wrong}"]
    refused = state_path_refusal(config)  # serve's own words for a file it cannot open
    return [str(refused)] if refused else []
