"""The GCP section of the config: every problem names its field before anything starts."""

from __future__ import annotations

import pytest

from adapters.gcp.settings import settings_from
from provider.config import ConfigError
from tests.kit.gcp import GROUPS, gcp_config
from tests.kit.paths import ROOT


def problems(groups: str, extra: str = "") -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        settings_from(gcp_config("http://127.0.0.1:9", groups, extra))
    return info.value.problems


def test_the_example_groups_are_accepted() -> None:
    s = settings_from(gcp_config("http://127.0.0.1:9", GROUPS,
                                 "reservationSelector: {namePrefixes: [team-a-]}\n"))
    a = s.groups["h100-a"]
    assert a.instance_template == "projects/proj/global/instanceTemplates/gpu-node"
    # A fabric group uses the compact placement policy named like its fabric by default.
    assert a.placement_policy == "fabric-a"  # by name, as the API takes it
    assert s.groups["h100-b"].placement_policy is None
    assert s.groups["t4"].accelerators == (("nvidia-tesla-t4", 1),) and s.groups["t4"].gpu
    assert s.local  # an http:// endpoint is a local test server: no credentials
    assert s.selects("team-a-h100") and not s.selects("team-b-h100")


def test_group_problems_name_their_fields() -> None:
    groups = """\
  - id: a
    zone: us-east1-b
    instanceType: a3-highgpu-8g
    maxSize: 1
    gcp: {instanceTemplate: t, machineType: a3-megagpu-8g, placementPolicy: p}
  - id: b
    zone: us-central1-a
    instanceType: n2-standard-8
    maxSize: 1
  - id: c
    zone: us-central1-a
    instanceType: n2-standard-8
    maxSize: 1
    gcp: {instanceTemplate: t, labels: {allset-cluster: x, Team: y}}
"""
    fields = [f for f, _ in problems(groups)]
    assert fields == [
        "nodeGroups[0] (id a).zone",
        "nodeGroups[0] (id a).gcp.machineType",
        "nodeGroups[0] (id a).gcp.placementPolicy",
        "nodeGroups[1] (id b).gcp.instanceTemplate",
        "nodeGroups[2] (id c).gcp.labels.allset-cluster",
        "nodeGroups[2] (id c).gcp.labels.Team",
    ]


def test_unknown_gcp_keys_are_refused() -> None:
    with pytest.raises(ConfigError) as info:
        gcp_config("http://127.0.0.1:9", GROUPS, "reservationSelector: {labels: {a: b}}\n")
    (field, message), = info.value.problems
    assert field == "cloud.gcp.reservationSelector.labels"
    assert "allowed keys: namePrefixes, names, projects" in message


def test_the_deploy_example_is_valid() -> None:

    from provider.config import load_config

    path = ROOT / "deploy" / "examples" / "gcp.yaml"
    cfg = load_config(path)
    s = settings_from(cfg)
    assert s.groups["h100-a"].placement_policy == "h100-compact"
    assert sorted(cfg.unresolved) == ["a3-highgpu-8g", "n2-standard-16"]


def test_missing_credentials_are_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from adapters.registry import create_adapter
    from provider.base.clock import ManualClock

    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")
    cfg = gcp_config("https://compute.example.invalid", GROUPS)
    with pytest.raises(ConfigError) as info:
        create_adapter(cfg, ManualClock())
    (field, message), = info.value.problems
    assert field == "cloud.gcp" and "credentials" in message
