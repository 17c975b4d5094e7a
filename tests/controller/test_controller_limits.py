"""Issue 32, finding 2: a request that can never fit fails at once, naming the limit, and
is neither planned nor retried (by this replica or the one that takes over)."""

from __future__ import annotations

import pytest

from provider.controller import conditions as c
from provider.controller.gang import ATTEMPT_DETAIL
from tests.kit.controller import World, create, world

__all__ = ["world"]

# The base config's GPU groups: gpu (maxSize 10) and gpu-b (maxSize 4), 8 one-GPU workers a
# node: 112 workers at most, ever.
MOST = 112


@pytest.mark.parametrize("count", [2**31 - 1, MOST + 1])
def test_more_pods_than_max_size_can_ever_hold_fail_naming_the_limit(
        world: World, count: int) -> None:
    w = world
    create(w, pod_sets={"workers": count})
    w.sync()
    failed = w.condition(c.FAILED)
    assert failed is not None and failed.true, w.request()
    assert failed.reason == "MaxSizeReached"
    assert failed.message == (
        f"pod set workers: {count} pods can never fit: the 2 node groups that can host them "
        f"hold at most {MOST} at their maxSize (maxSize x pods per node: gpu 10 x 8, "
        "gpu-b 4 x 8)")
    assert ("MaxSizeReached", "Warning") in w.events()
    # Refused before any attempt: none was recorded, nothing launched.
    details = (w.request() or {}).get("status", {}).get("provisioningClassDetails") or {}
    assert ATTEMPT_DETAIL not in details
    assert w.h.cloud.live_instances() == []
    # Not retried: past every backoff, nothing more is written or launched.
    writes = w.kube.count("update", "provisioningrequests/status")
    w.h.clock.advance(3600)
    w.sync()
    assert w.kube.count("update", "provisioningrequests/status") == writes
    assert w.h.cloud.live_instances() == []


def test_what_fits_at_max_size_is_not_refused(world: World) -> None:
    w = world
    create(w, pod_sets={"workers": 80})  # all of group gpu, in one zone
    w.provision()
    assert w.condition(c.FAILED) is None
    assert w.condition(c.PROVISIONED).true  # type: ignore[union-attr]


@pytest.mark.parametrize(("field", "value", "words"), [
    # Issue 51: "²" passed str.isdigit() and int() raised on every pass, for ever.
    ("bookingDurationSeconds", "\u00b2", "is not a whole number of seconds"),
    # 255 nines parsed to a float of infinity: a booking that never ends.
    ("bookingDurationSeconds", "9" * 255, "is not a whole number of seconds from 1 to 604,800"),
    ("maxWaitSeconds", "604801", "out of range"),
])
def test_odd_and_huge_numbers_fail_the_request_naming_the_bound(
        world: World, field: str, value: str, words: str) -> None:
    w = world
    create(w, "job", None, **{field: value})
    w.sync()
    failed = w.condition(c.FAILED)
    assert failed is not None and failed.true, w.request()
    assert failed.reason == c.INVALID_REQUEST
    assert failed.message.startswith(f"spec.parameters.{field}: ") and words in failed.message
    assert w.h.cloud.live_instances() == []
