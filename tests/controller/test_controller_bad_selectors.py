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


def ones(n: int) -> str:
    return "[" + ",".join(["1"] * n) + "]"


FORTY = "[" + ",".join(str(i) for i in range(1, 41)) + "]"
# Issue 51: the review's 411-byte selector, three nested .all() over literal lists of 40.
# Within Kubernetes' limits (its estimate ~580k of 1,000,000); cel-python took about a
# minute per device on it, holding a controller worker.
NESTED_ALL = (f"{FORTY}.all(x, {FORTY}.all(y, {FORTY}.all(z, "
              f'x*y + z > 0 && device.driver == "gpu.nvidia.com")))')
# Within allset's estimate too (~1,900 of 2,000), but ~18,000 evaluation steps: its
# literals cost one each in the estimate and about ten steps each in cel-python.
UNDERESTIMATED = f"{ones(10)}.all(x, {ones(180)}.size() > 0)"


def test_the_411_byte_selector_fails_its_request_at_once_naming_the_limit(
        journaled: tuple[World, SqliteJournal]) -> None:
    w, journal = journaled
    assert len(NESTED_ALL) == 411
    claiming_request(w, NESTED_ALL)
    w.sync()
    failed = w.condition(c.FAILED)
    assert failed is not None and failed.true and failed.reason == c.INVALID_REQUEST
    assert ("spec.devices.requests[0].exactly.selectors[0].cel.expression: the selector has "
            "an estimated cost of " in failed.message)
    assert "allset evaluates selectors of cost at most 2000" in failed.message
    assert journal.attempts() == [] and w.h.cloud.live_instances() == []


def test_a_selector_that_runs_out_of_its_steps_fails_its_request_naming_it_and_the_limit(
        journaled: tuple[World, SqliteJournal]) -> None:
    """Within every static limit, it is stopped by the evaluation's step budget: refused
    as invalid once, never planned, never retried; no attempt opened."""
    w, journal = journaled
    claiming_request(w, UNDERESTIMATED)
    w.sync(rounds=40)
    failed = w.condition(c.FAILED)
    assert failed is not None and failed.true and failed.reason == c.INVALID_REQUEST
    assert failed.message.startswith("pod set workers: claim g request g: request g selector "
                                     f"{UNDERESTIMATED[:100]!r}"[:-1])
    assert "took more than 12000 evaluation steps on device gpu-0" in failed.message
    assert w.events().count((c.INVALID_REQUEST, "Warning")) == 1
    assert journal.attempts() == [] and w.h.cloud.live_instances() == []
