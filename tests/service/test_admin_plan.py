"""The admin Plan call (`allset plan --server`) over gRPC on 127.0.0.1: bad input is
INVALID_ARGUMENT with a message naming the field, never UNKNOWN (issue 32, finding 3: a
selector nested 300 deep answered UNKNOWN from a RecursionError; a document of the wrong
shape from an AttributeError)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import yaml

from provider.service.admin import PLAN_METHOD
from tests.kit.cli import ROOT
from tests.kit.helpers import channel_to, harness

DRA = ROOT / "deploy" / "examples" / "requests" / "dra-80gi.yaml"
SELECTOR = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'


@pytest.fixture
def call() -> Iterator[Any]:
    h = harness()
    try:
        with channel_to(h.provider) as channel:
            yield channel.unary_unary(PLAN_METHOD)
    finally:
        h.provider.stop()


def documents(text: str) -> bytes:
    docs = list(yaml.safe_load_all(text))
    return json.dumps({"documents": docs, "source": "dra.yaml"}).encode()


def refused(call: Any, body: bytes) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(body, timeout=30)
    return info.value.code(), info.value.details()


def test_a_selector_nested_too_deep_is_invalid_argument(call: Any) -> None:
    deep = "(" * 300 + "true" + ")" * 300
    code, message = refused(call, documents(DRA.read_text().replace(SELECTOR, deep)))
    assert code is grpc.StatusCode.INVALID_ARGUMENT, message
    assert message == (
        "research/finetune: PodTemplate trainer: ResourceClaimTemplate four-80gi: "
        "spec.devices.requests[0].exactly.selectors[0].cel.expression: the selector "
        "nests brackets 300 deep; allset evaluates selectors nested at most 20 deep")


def test_documents_of_the_wrong_shape_are_invalid_argument(call: Any) -> None:
    text = DRA.read_text().replace("template:\n  spec:", "template:\n  spec: oops\n  x:")
    code, message = refused(call, documents(text))
    assert code is grpc.StatusCode.INVALID_ARGUMENT, message
    assert "PodTemplate trainer: template.spec: must be an object, not a string" in message
    for body in (b"[]", b'{"documents": "x"}', b"[" * 100_000):
        code, message = refused(call, body)
        assert (code, message.split(":")[0]) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                 "not a plan request"), message


def test_a_request_within_the_limits_is_planned(call: Any) -> None:
    found = json.loads(call(documents(DRA.read_text()), timeout=30))
    assert found["kind"] == "ProvisioningRequest" and found["name"] == "research/finetune"
