"""AWS adapter fixtures: moto for EC2, the test-side layer (ec2model) for what moto lacks,
fake credentials from the environment, and a manual clock."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from moto import mock_aws

from adapters.aws import AwsAdapter, create
from provider.base.clock import ManualClock
from provider.config import LoadedConfig, load_config_text
from tests.fakes.ec2 import Ec2Layer

REGION = "us-east-1"
AMI = "ami-760aaa0f"  # one of moto's built-in images (Amazon Linux: Linux/UNIX)


@dataclass
class World:
    """moto with launch templates "gpu" (p5.48xlarge) and "cpu" (m7i.large), the layer in
    front of it, and the ids a config needs."""

    layer: Ec2Layer
    clock: ManualClock
    subnets: dict[str, str]  # zone -> default subnet
    security_group: str

    def config(self, text: str) -> LoadedConfig:
        ids = {f"subnet_{zone[-1]}": sid for zone, sid in self.subnets.items()}
        body = textwrap.dedent(text).replace("{sg}", self.security_group)
        for key, value in ids.items():
            body = body.replace("{" + key + "}", value)
        return load_config_text(body, "aws-test.yaml")

    def adapter(self, config: LoadedConfig, **kw: int) -> AwsAdapter:
        adapter = create(config, self.clock, session=self.layer.session())
        assert isinstance(adapter, AwsAdapter)
        if kw:  # smaller pages or batches, to exercise pagination with few instances
            adapter = AwsAdapter(adapter._settings, adapter._ec2, self.clock, **kw)
        return adapter


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials, and nothing from a developer's own AWS set-up."""
    for name in ("AWS_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2", "AWS_RETRY_MODE",
                 "AWS_MAX_ATTEMPTS", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


@pytest.fixture
def world(aws_env: None) -> Iterator[World]:
    with mock_aws():
        clock = ManualClock()
        layer = Ec2Layer(REGION, clock.now)
        ec2 = layer.ec2
        for name, itype in (("gpu", "p5.48xlarge"), ("cpu", "m7i.large")):
            ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={
                "ImageId": AMI, "InstanceType": itype})
        subnets = {s["AvailabilityZone"]: s["SubnetId"]
                   for s in ec2.describe_subnets()["Subnets"] if s.get("DefaultForAz")}
        group = ec2.describe_security_groups(GroupNames=["default"])["SecurityGroups"][0]
        yield World(layer, clock, subnets, group["GroupId"])
