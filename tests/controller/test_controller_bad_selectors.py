"""A request whose DRA selector is beyond the limits (issue 32, finding 3: 300 nested
parentheses, which crashed the CEL compile with a RecursionError) is Failed once, with
InvalidRequest naming the field and the limit: not retried every 10 s, and no attempt
opened for it in the journal, let alone one more per try."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from provider.attempts.journal import SqliteJournal
from provider.controller import conditions as c
from tests.fakes.kube import objects
from tests.kit.controller import GPU_TOLERATION, NS, World, running

NESTED_300 = "(" * 300 + "true" + ")" * 300


@pytest.fixture
def journaled(tmp_path: Path) -> Iterator[tuple[World, SqliteJournal]]:
    journal = SqliteJournal(tmp_path / "attempts.db")
    for w in running(journal=journal):
        yield w, journal


def claiming_request(w: World, *selectors: str) -> None:
    """A request for 2 pods, each claiming a GPU through a template with ``selectors``."""
    workers = objects.pod_template(NS, "workers", {"cpu": "8", "memory": "64Gi"})
    spec = workers["template"]["spec"]
    spec["tolerations"] = GPU_TOLERATION
    spec["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "gpus"}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "g"}]
    w.kube.create(workers)
    w.kube.create(objects.device_class("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"'))
    w.kube.create(objects.resource_claim_template(
        NS, "gpus", objects.device_request("g", "gpu.nvidia.com", *selectors)))
    client.CustomObjectsApi(w.api).create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests",
        objects.provisioning_request(NS, "job", {"workers": 2}))


def test_a_selector_nested_too_deep_fails_its_request_once(
        journaled: tuple[World, SqliteJournal]) -> None:
    w, journal = journaled
    claiming_request(w, NESTED_300)
    w.sync(rounds=40)  # a request retried every 10 s would be tried 4 times
    failed = w.condition(c.FAILED)
    assert failed is not None and failed.true and failed.reason == c.INVALID_REQUEST
    assert ("PodTemplate workers: ResourceClaimTemplate gpus: spec.devices.requests[0]."
            "exactly.selectors[0].cel.expression: the selector nests brackets 300 deep; "
            "allset evaluates selectors nested at most 20 deep") in failed.message
    assert w.events().count((c.INVALID_REQUEST, "Warning")) == 1
    assert journal.attempts() == [] and w.h.cloud.live_instances() == []
