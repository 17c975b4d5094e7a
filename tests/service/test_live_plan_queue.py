"""`allset plan --server --queue ns/name` (issue 19): the running server plans the request
as its Kueue queue would be valued, and a queue that is not namespace/name is bad input
that plans nothing."""

from __future__ import annotations

import pytest

from provider.domain.provreq import BadRequest
from provider.service.live_plan import live_plan
from tests.controller.test_controller_timing import CONFIG
from tests.fakes.kube import objects
from tests.kit.controller import GPU_TOLERATION, NS
from tests.kit.helpers import harness

VALUED = CONFIG + "runtimes:\n  waitValuePerGpuHour: 500\n  queues: {ml/batch: 1}\n"


def documents() -> list[dict[str, object]]:
    """16 one-GPU workers for 6 h that may wait 2 h; the block opens in 30 min."""
    workers = objects.pod_template(NS, "workers", {"cpu": "8", "memory": "64Gi",
                                                   "nvidia.com/gpu": "1"},
                                   {"example.com/gpu": "nvidia-h100-80gb"})
    workers["template"]["spec"]["tolerations"] = GPU_TOLERATION
    request = objects.provisioning_request(NS, "job", {"workers": 16}, parameters={
        "expectedRuntimeSeconds": "21600", "maxWaitSeconds": "7200"})
    return [request, workers]


def test_the_live_plan_values_the_wait_as_the_queue_given() -> None:
    h = harness(VALUED)
    try:
        batch = live_plan(h.provider, documents(), "req.yaml", queue="ml/batch")
        assert batch["timing"]["decision"] == "wait", batch["timing"]
        assert batch["timing"]["waitValueFrom"] == "queue ml/batch"
        assert "valued at 1.00 USD/GPU-h from queue ml/batch" in batch["text"]
        other = live_plan(h.provider, documents(), "req.yaml")
        assert other["timing"]["decision"] == "buy-now"
        assert other["timing"]["waitValueFrom"] == "runtimes.waitValuePerGpuHour"
        with pytest.raises(BadRequest) as info:
            live_plan(h.provider, documents(), "req.yaml", queue="ml/Batch")
        assert info.value.problems == [("queue", "queue 'ml/Batch' is not "
                                        "namespace/localQueueName (a Kueue LocalQueue, "
                                        "e.g. ml/train)")]
    finally:
        h.provider.stop()
