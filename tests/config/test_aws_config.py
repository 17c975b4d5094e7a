"""The AWS config sections: the example loads, and every mistake names its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.aws.settings import settings_from
from provider.config import ConfigError, load_config, load_config_text

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "aws.yaml"

BASE = """\
cluster: c1
cloud:
  provider: aws
  aws: {region: us-east-1}
nodeGroups:
  - id: g
    zone: us-east-1a
    instanceType: p5.48xlarge
    maxSize: 4
    aws: {launchTemplate: {name: gpu}}
"""


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, "cfg.yaml")
    return info.value.problems


def test_the_example_loads_and_leaves_shapes_to_the_cloud() -> None:
    cfg = load_config(EXAMPLE)
    assert cfg.unresolved == ("m7i.2xlarge", "p5.48xlarge")
    settings = settings_from(cfg)
    assert settings.region == "us-east-1"
    assert settings.selected_ids == {"cr-0a1b2c3d4e5f60718", "cr-0f1e2d3c4b5a69788",
                                     "cr-0123456789abcdef0"}
    assert dict(settings.selector_tags) == {"allset": "prod-east"}
    assert dict(settings.fabric_of_placement_group) == {"training-a": "training-a",
                                                        "block-2026-12": "block-2026-12"}
    # The Capacity Block the block group lists is that group's fabric.
    assert settings.fabric_of_reservation["cr-0123456789abcdef0"] == "block-2026-12"
    assert settings.capacity_block_cutoff == 40 * 60
    gpu, cpu = settings.groups["h100-a"], settings.groups["cpu"]
    assert (gpu.template_name, gpu.template_version, gpu.efa_interfaces) == (
        "eks-gpu-al2023", "$Default", 32)
    assert gpu.placement_group == "training-a" and dict(gpu.tags) == {"team": "research"}
    assert (cpu.template_id, cpu.template_version, cpu.placement_group) == (
        "lt-0123456789abcdef0", "3", None)


def test_placement_group_may_differ_from_the_fabric_name() -> None:
    text = BASE.replace("maxSize: 4", "maxSize: 4\n    fabric: fab-a").replace(
        "aws: {launchTemplate: {name: gpu}}",
        "aws: {launchTemplate: {name: gpu}, placementGroup: My_PG.1}")
    settings = settings_from(load_config_text(text))
    assert settings.groups["g"].placement_group == "My_PG.1"
    assert dict(settings.fabric_of_placement_group) == {"My_PG.1": "fab-a"}


def group(aws: str, extra: str = "") -> str:
    return BASE.replace("aws: {launchTemplate: {name: gpu}}", f"aws: {aws}").replace(
        "maxSize: 4", "maxSize: 4" + extra)


@pytest.mark.parametrize(("text", "field", "words"), [
    (group("{launchTemplate: {}}"), "nodeGroups[0] (id g).aws.launchTemplate",
     "exactly one of launchTemplate.name or launchTemplate.id"),
    (group("{launchTemplate: {name: gpu, version: latest}}"),
     "nodeGroups[0] (id g).aws.launchTemplate", "a number, $Default or $Latest"),
    (group("{launchTemplate: {name: gpu}, efaInterfaces: 4}"), "nodeGroups[0] (id g).aws",
     "efaInterfaces needs subnetId and securityGroupIds"),
    (group("{launchTemplate: {name: gpu}, tags: {allset.dev/cluster: x}}"),
     "nodeGroups[0] (id g).aws.tags", "reserved"),
    (group("{launchTemplate: {name: gpu}, tags: {aws:foo: x}}"),
     "nodeGroups[0] (id g).aws.tags", "reserved"),
    (group("{launchTemplate: {name: gpu}, subnet: subnet-1}"), "nodeGroups[0] (id g).aws.subnet",
     "unknown key (did you mean subnetId?); allowed keys: efaInterfaces, efaSecondaryType, "
     "launchTemplate, placementGroup"),
    (BASE.replace("us-east-1a", "us-west-2a"), "nodeGroups[0] (id g).zone",
     "not a zone of cloud.aws.region us-east-1"),
    (group("{launchTemplate: {name: gpu}}", "\n    reservations: [my-reservation]"),
     "nodeGroups[0] (id g).reservations[0]", "not a capacity reservation id"),
    (group("{launchTemplate: {name: gpu}, placementGroup: pg}"), "nodeGroups[0] (id g).fabric",
     "required with aws.placementGroup"),
    (BASE.replace("reservationSelector", "x").replace(
        "aws: {region: us-east-1}", "aws: {region: us-east-1, reservationSelector: {ids: [x]}}"),
     "cloud.aws.reservationSelector.ids", "not a capacity reservation id"),
])
def test_mistakes_name_their_field(text: str, field: str, words: str) -> None:
    found = problems(text)
    assert any(f == field and words in m for f, m in found), found


def test_one_placement_group_is_one_fabric_in_one_zone() -> None:
    second = """\
  - id: h
    zone: us-east-1b
    instanceType: p5.48xlarge
    maxSize: 4
    fabric: fab-b
    aws: {launchTemplate: {name: gpu}, placementGroup: fab-a}
"""
    text = BASE.replace("maxSize: 4", "maxSize: 4\n    fabric: fab-a") + second
    found = problems(text)
    assert ("nodeGroups[1] (id h).fabric",
            "placement group fab-a is fabric fab-a in group g; one placement group is one "
            "fabric") in found
    assert ("nodeGroups[1] (id h).zone", "placement group fab-a is used in us-east-1a; a "
            "cluster placement group lives in one zone") in found
