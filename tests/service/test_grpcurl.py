"""A gRPC client we did not write (grpcurl) drives the service through reflection."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from provider.service.server import Server
from tests.kit.helpers import Harness
from tests.kit.paths import ROOT


def _grpcurl() -> str:
    found = shutil.which("grpcurl") or shutil.which("grpcurl", path=str(ROOT / ".ci" / "bin"))
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("grpcurl is not installed; .ci/run installs it into .ci/bin")
        pytest.skip("grpcurl not installed (.ci/run installs it into .ci/bin)")
    return found


def run(server: Server, *args: str, data: str | None = None) -> str:
    """grpcurl [-d DATA] ADDRESS ARGS... (ARGS: a method, or list [SERVICE])."""
    flags = ["-d", data] if data is not None else []
    result = subprocess.run(
        [_grpcurl(), "-plaintext", "-max-time", "10", *flags, server.address, *args],
        capture_output=True, text=True, check=False, timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


SVC = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider"


def test_grpcurl_lists_services_and_scales_up(server: Server, h: Harness) -> None:
    services = run(server, "list").split()
    assert SVC in services and "grpc.health.v1.Health" in services
    methods = run(server, "list", SVC).split()
    assert len(methods) == 15

    groups = json.loads(run(server, f"{SVC}/NodeGroups"))
    assert [g["id"] for g in groups["nodeGroups"]] == ["gpu", "gpu-b", "cpu"]

    run(server, f"{SVC}/NodeGroupIncreaseSize", data='{"id": "gpu", "delta": 2}')
    h.run_workers()
    listed = json.loads(run(server, f"{SVC}/NodeGroupNodes", data='{"id": "gpu"}'))
    ids = sorted(i["id"] for i in listed["instances"])
    assert ids == sorted(i.provider_id for i in h.live("gpu"))

    check = json.dumps({"service": SVC})
    health = json.loads(run(server, "grpc.health.v1.Health/Check", data=check))
    assert health["status"] == "SERVING"


def test_grpcurl_sees_error_codes(server: Server) -> None:
    result = subprocess.run(
        [_grpcurl(), "-plaintext", "-d", '{"id": "nope", "delta": 1}', server.address,
         f"{SVC}/NodeGroupIncreaseSize"],
        capture_output=True, text=True, check=False, timeout=30,
    )
    assert result.returncode != 0
    assert "NotFound" in result.stderr and "nope" in result.stderr


def test_gpu_types_render_in_json_clients(server: Server) -> None:
    """Values used to be Any with no type, which grpcurl renders as "@error" (issue 15,
    item 10); CA reads only the keys."""
    out = run(server, f"{SVC}/GetAvailableGPUTypes")
    assert "@error" not in out
    assert json.loads(out) == {"gpuTypes": {"nvidia-h100-80gb": {
        "@type": "type.googleapis.com/google.protobuf.Empty", "value": {}}}}
