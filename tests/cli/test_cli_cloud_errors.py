"""A cloud that refuses or does not answer is one line and exit 1 from `allset plan`,
`instances` and `serve`, never a traceback (issue 15, item 4)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.kit.cli import ROOT, one_line, run_allset

AWS = str(ROOT / "deploy" / "examples" / "aws.yaml")
REQUEST = str(ROOT / "deploy" / "examples" / "requests" / "mixed-gang.yaml")
COMMANDS = {
    "plan": ("plan", "--config", AWS, "--request", REQUEST),
    "instances": ("instances", "--config", AWS),
    "serve": ("serve", "--insecure", "--config", AWS),
}


def _aws_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No credentials anywhere in the chain: no variables (the fixture below removes
    them), no files, no instance metadata."""
    return {"AWS_CONFIG_FILE": str(tmp_path / "none"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
            "AWS_EC2_METADATA_DISABLED": "true", **extra}


@pytest.fixture(autouse=True)
def _keep_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize("command", COMMANDS)
def test_aws_without_credentials_is_one_line(tmp_path: Path, command: str) -> None:
    result = run_allset(*COMMANDS[command], env=_aws_env(tmp_path))
    assert result.returncode == 1
    assert one_line(result.stderr) == (
        f"allset: {AWS}: cloud.aws: no AWS credentials found; run with IRSA or EKS pod "
        "identity, an instance profile, or set AWS_PROFILE or "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")


@pytest.mark.parametrize("command", COMMANDS)
def test_aws_unreachable_is_one_line(tmp_path: Path, command: str) -> None:
    env = _aws_env(tmp_path, AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="x",
                   AWS_ENDPOINT_URL="http://127.0.0.1:1", AWS_MAX_ATTEMPTS="1")
    result = run_allset(*COMMANDS[command], env=env)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith("allset: cloud call failed: DescribeInstanceTypes: Could not "
                           "connect to the endpoint URL"), line
    assert line.endswith("the cloud's API did not answer; check network access to it and "
                         "try again")


def test_an_auth_error_points_at_the_cloud_identity() -> None:
    from provider.cli.errors import cloud_error_line
    from provider.domain.cloud import InvalidRequest

    line = cloud_error_line(InvalidRequest("DescribeInstances: UnauthorizedOperation: You "
                                           "are not authorized"))
    assert line.endswith('check allset\'s cloud identity and permissions '
                         '(docs/operator-guide.md, "Give allset a cloud identity")')
