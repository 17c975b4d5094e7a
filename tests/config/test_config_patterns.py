"""A value of the wrong form is named in words, never by the regex that checks it (issue 35,
item 9: `cluster: String should match pattern '^[a-z0-9]...'`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from provider.config.paths import _PHRASES
from provider.config.schema import Config
from provider.sim.trace import TraceModel
from tests.kit.cli import run_allset


def _patterns(model: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[str]:
    if model in seen:
        return
    seen.add(model)
    for field in model.model_fields.values():
        for meta in field.metadata:
            if getattr(meta, "pattern", None):
                yield meta.pattern
        yield from _inner(field.annotation, seen)


def _inner(annotation: Any, seen: set[type[BaseModel]]) -> Iterator[str]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from _patterns(annotation, seen)
        return
    for arg in getattr(annotation, "__args__", ()) or ():
        yield from _inner(arg, seen)
    for meta in getattr(annotation, "__metadata__", ()) or ():
        if getattr(meta, "pattern", None):
            yield meta.pattern
        for sub in getattr(meta, "metadata", ()) or ():
            if getattr(sub, "pattern", None):
                yield sub.pattern


def test_every_pattern_of_the_config_and_the_trace_has_words() -> None:
    found = set(_patterns(Config, set())) | set(_patterns(TraceModel, set()))
    assert found, "the walk found no patterns at all"
    assert found <= set(_PHRASES), sorted(found - set(_PHRASES))


def test_a_cluster_name_of_the_wrong_form_is_described(tmp_path: Any) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("cluster: Prod_East\ncloud: {provider: aws, aws: {region: useast}}\n"
                      "nodeGroups: [{id: gpu, zone: us-east-1a, instanceType: p5.48xlarge, "
                      "maxSize: 1, aws: {launchTemplate: {id: lt-zz}}}]\n")
    done = run_allset("validate", "--config", str(config))
    assert done.returncode == 1
    assert "pattern" not in done.stderr and "^" not in done.stderr, done.stderr
    assert (f"allset: {config}: cluster: 'Prod_East' is not a DNS label: lower-case letters, "
            "digits and '-', at most 63, starting and ending with a letter or digit (e.g. "
            "prod-east)") in done.stderr.splitlines()
    assert f"allset: {config}: cloud.aws.region: 'useast' is not an AWS region name (e.g. " \
        "us-east-1)" in done.stderr.splitlines()
