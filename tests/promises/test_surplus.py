"""A CA scale-up never commits a node CA no longer wants (issue 31, I6 across processes).

CA may delete a scale-up's placeholders while their launch runs. The launch still brings
up every instance it asked for; before the fix it committed them all and then terminated
the surplus, a termination owed only in that process: a replica deposed (or dead without
its state dir) at that moment left committed nodes that its successor showed CA as
members, though CA had been told they were deleted (adversary seeds 382, 398, 606, 1280,
1502, 2263 and 2673 of the two-replica world). Now only the slots CA still wants are
committed; the rest carry the deletion mark before the commit, so any leader ends them."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from provider.app import Provider
from provider.attempts.executor import inline_runner
from provider.base import failpoints
from provider.domain.errors import FailedPrecondition
from provider.domain.fleet import PLACEHOLDER_PREFIX
from tests.kit.helpers import Harness, ManualPool, Switchable, harness


def leading(h: Harness) -> tuple[Provider, Switchable, ManualPool]:
    """A replica that leads on the harness' cloud until the test deposes it."""
    lead = Switchable(h.clock)
    lead.leading = True
    pool = ManualPool()
    provider = Provider(h.provider.config, h.cloud, h.clock, pool=pool,
                        runner=inline_runner, leadership=lead)
    provider.refresh_now()
    assert provider.acting()
    return provider, lead, pool


def placeholders(p: Provider, group: str) -> list[str]:
    return sorted(n.provider_id for n in p.fleet.view(group).nodes
                  if n.provider_id.startswith(PLACEHOLDER_PREFIX))


def committed(h: Harness, group: str) -> list[str]:
    return sorted(i.id for i in h.live(group) if i.tags.committed)


def test_placeholders_deleted_while_they_launch_are_never_committed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 398's path: CA deletes two of three placeholders after the plan launched
    them; the replica is deposed right after its commit, before it could terminate the
    two. Its successor, with nothing of its state, must end them."""
    h = harness()
    a, lead, pool = leading(h)
    a.scaleups.increase("cpu", 3)
    doomed = placeholders(a, "cpu")[1:]
    real = failpoints.hit

    def hit(name: str) -> None:
        if name == "executor.part-launched" and set(doomed) <= set(placeholders(a, "cpu")):
            a.delete_nodes("cpu", doomed)  # CA: answered OK, the placeholders go
        if name == "executor.committed":
            lead.leading = False  # deposed before the surplus is terminated
        real(name)

    monkeypatch.setattr(failpoints, "hit", hit)
    pool.run_all()
    assert a.fleet.view("cpu").target_size == 1
    launched = h.live("cpu")
    assert len(launched) == 3  # the launch brought up all three
    kept = committed(h, "cpu")
    assert len(kept) == 1, "a node CA deleted was committed"
    surplus = [i for i in launched if i.id not in kept]
    assert all(i.marked_deleting for i in surplus), "the surplus' debt is not on it"

    b = Provider(a.config, h.cloud, h.clock, pool=ManualPool(), runner=inline_runner)
    b.refresh_now()
    assert sorted(i.id for i in h.live("cpu")) == kept
    view = b.fleet.view("cpu")
    assert view.target_size == 1 and [n.instance.id for n in view.nodes
                                      if n.instance is not None] == kept


def test_a_placeholder_whose_deletion_is_being_marked_is_not_committed_meanwhile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CA deletes a node and an empty placeholder in one call. While the node's mark is
    written, the scale-up fills the placeholder and commits: it must leave that slot's
    instance out, or the deletion, applied after, finds the placeholder taken by a
    committed node (before the fix: not deleted at all, and CA's target one too high)."""
    h = harness()
    a, _, pool = leading(h)
    a.scaleups.increase("cpu", 1)
    pool.run_all()
    (member,) = h.live("cpu")
    a.scaleups.increase("cpu", 2)
    empty = placeholders(a, "cpu")[-1]
    real_mark = h.cloud.mark_deleting
    ran: list[bool] = []

    def mark_deleting(ids: Sequence[str], at: float) -> None:
        if not ran:
            ran.append(True)
            pool.run_all()  # the scale-up launches and commits while this call is out
        real_mark(ids, at)

    monkeypatch.setattr(h.cloud, "mark_deleting", mark_deleting)
    a.delete_nodes("cpu", [member.provider_id, empty])
    assert ran
    pool.run_all()  # the terminations
    a.refresh_now()
    live = h.live("cpu")
    assert member.id not in {i.id for i in live}
    assert len(committed(h, "cpu")) == 1 and len(live) == 1
    assert a.fleet.view("cpu").target_size == 1
    assert placeholders(a, "cpu") == []


def test_a_deposed_scale_ups_nodes_hold_max_size_until_a_listing_counts_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A scale-up launched, then found at its commit that the replica no longer led: its
    instances stay up uncommitted, and its claim on maxSize ended with it. The replica led
    again at once, and CA's next scale-up was planned as if they were not there: 6
    instances in a group of maxSize 5 (I3, adversary seed 983748381)."""
    h = harness()
    a, lead, pool = leading(h)
    real = failpoints.hit

    def hit(name: str) -> None:
        if name == "executor.before-commit":
            lead.leading = False  # the commit's fence refuses
        real(name)

    monkeypatch.setattr(failpoints, "hit", hit)
    a.scaleups.increase("gpu-b", 3)
    pool.run_all()
    assert len(h.live("gpu-b")) == 3 and committed(h, "gpu-b") == []
    lead.leading = True
    monkeypatch.setattr(failpoints, "hit", real)
    a.fleet.decrease_target("gpu-b", -3)  # CA drops the failed placeholders (its RPC)
    with pytest.raises(FailedPrecondition, match="max"):
        a.scaleups.increase("gpu-b", 2)  # 3 still up + 2 > maxSize 4
    # A listing a grace period later counts them itself; past the orphan grace they go.
    h.clock.advance(a.config.orphan_grace_seconds + 1)
    a.refresh_now()
    h.clock.advance(a.config.orphan_grace_seconds + 1)
    a.refresh_now()
    assert h.live("gpu-b") == []
    a.scaleups.increase("gpu-b", 2)
