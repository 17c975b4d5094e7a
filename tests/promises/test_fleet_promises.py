"""What CA sees of the fleet stays true under duplicates, concurrent work and config
changes (issue 12, findings 5, 6, 8 and 11). Each test failed before its fix."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from provider.app import Provider
from provider.attempts.executor import AttemptSpec, Result, inline_runner
from provider.capacity.ledger import CapacityView
from provider.domain.cloud import LaunchRequest
from provider.domain.errors import FailedPrecondition
from provider.domain.fleet import Fleet
from provider.domain.model import GROUP_LABEL
from provider.domain.plan import Infeasible, Part, Plan, ReasonCode
from provider.domain.provreq import demand_from
from provider.planner.answer import plan
from tests.domain.test_provreq import request, template
from tests.kit.helpers import BASE_CONFIG, ManualPool, config, harness

SMALL = BASE_CONFIG.replace("    maxSize: 20\n", "    maxSize: 4\n")


def test_a_node_named_twice_in_delete_nodes_is_terminated_once() -> None:
    h = harness()
    h.provider.scaleups.increase("cpu", 2)
    h.run_workers()
    first, second = h.provider.fleet.view("cpu").nodes
    h.provider.delete_nodes("cpu", [first.provider_id, first.provider_id])
    h.run_workers()
    assert [i.provider_id for i in h.live("cpu")] == [second.provider_id]
    assert h.provider.fleet.view("cpu").target_size == 1
    assert h.provider.executor.terminator.owing() == set()


def test_a_deletion_is_owed_before_ca_hears_it_is_done() -> None:
    """If the worker never gets to terminate (the process dies), the next start's
    backlog does: the termination was written down before DeleteNodes returned."""
    h = harness()
    h.provider.scaleups.increase("cpu", 1)
    h.run_workers()
    (node,) = h.provider.fleet.view("cpu").nodes
    h.provider.delete_nodes("cpu", [node.provider_id])
    assert node.instance is not None
    assert node.instance.id in h.provider.journal.owed()
    assert node.instance.id in h.provider.executor.terminator.owing()


def _request_build(provider: Provider, attempt: str, counts: dict[str, int]) -> Any:
    cpu_only = [{"name": "c", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]
    templates = {name: template(name, containers=cpu_only, nodeSelector={GROUP_LABEL: "cpu"})
                 for name in counts}
    pod_sets = [{"podTemplateRef": {"name": name}, "count": n} for name, n in counts.items()]
    demand, _ = demand_from(request(podSets=pod_sets), templates)

    def build(view: CapacityView, done: Sequence[Part]) -> Plan | Infeasible:
        return plan(demand, view, provider.matcher, provider.fleet.occupied(exclude=attempt))

    return build


def test_ca_cannot_scale_past_max_while_a_request_is_launching() -> None:
    h = harness(SMALL)
    refused: list[str] = []

    def ca_scales_up_meanwhile(req: LaunchRequest) -> None:
        h.cloud.before_launch = None
        try:
            h.provider.scaleups.increase("cpu", 2)
        except FailedPrecondition as err:
            refused.append(str(err))

    h.cloud.before_launch = ca_scales_up_meanwhile
    out = h.provider.executor.execute(
        AttemptSpec("r-1", "test", request="ml/job"),
        _request_build(h.provider, "r-1", {"ps": 3}))
    h.run_workers()
    assert out.result is Result.SUCCEEDED
    assert refused and "maxSize 4" in refused[0]
    assert len(h.live("cpu")) == 3 <= 4
    assert h.provider.fleet.view("cpu").target_size == 3


def test_two_requests_launching_at_once_share_max_size() -> None:
    h = harness(SMALL)
    inner: list[Any] = []

    def second_request_meanwhile(req: LaunchRequest) -> None:
        h.cloud.before_launch = None
        inner.append(h.provider.executor.execute(
            AttemptSpec("r-2", "test", request="ml/other"),
            _request_build(h.provider, "r-2", {"ps": 2})))

    h.cloud.before_launch = second_request_meanwhile
    first = h.provider.executor.execute(
        AttemptSpec("r-1", "test", request="ml/job"),
        _request_build(h.provider, "r-1", {"ps": 3}))
    assert first.result is Result.SUCCEEDED
    (second,) = inner
    assert second.result is Result.INFEASIBLE
    assert second.infeasible is not None
    assert second.infeasible.primary.code is ReasonCode.MAX_SIZE
    assert len(h.live("cpu")) == 3


def test_a_request_plans_around_a_ca_scale_up_in_flight() -> None:
    h = harness(SMALL)
    h.provider.scaleups.increase("cpu", 3)  # placeholders: the worker has not run
    out = h.provider.executor.execute(
        AttemptSpec("r-1", "test", request="ml/job"),
        _request_build(h.provider, "r-1", {"ps": 2}))
    assert out.result is Result.INFEASIBLE
    h.run_workers()
    assert len(h.live("cpu")) == 3


def test_instances_of_a_removed_group_are_kept_and_reported(tmp_path: Path) -> None:
    h = harness()
    h.provider.scaleups.increase("cpu", 2)
    h.run_workers()
    without_cpu = BASE_CONFIG[:BASE_CONFIG.index("  - id: cpu")]
    provider = Provider(config(without_cpu), h.cloud, h.clock, pool=ManualPool(),
                        runner=inline_runner)
    provider.refresh_now()
    h.clock.advance(provider.config.orphan_grace_seconds)
    provider.refresh_now()
    assert len(h.live("cpu")) == 2  # not CA's any more, but not killed for a config edit
    assert sorted(i.id for i in provider.fleet.unknown()) == sorted(i.id for i in h.live("cpu"))
    value = provider.metrics.registry.get_sample_value("allset_unknown_group_instances")
    assert value == 2


def test_removed_groups_are_terminated_when_the_config_says_so() -> None:
    h = harness()
    h.provider.scaleups.increase("cpu", 2)
    h.run_workers()
    without_cpu = BASE_CONFIG[:BASE_CONFIG.index("  - id: cpu")] + textwrap.dedent("""\
        reconcile: {unknownGroups: terminate}
        """)
    provider = Provider(config(without_cpu), h.cloud, h.clock, pool=ManualPool(),
                        runner=inline_runner)
    provider.refresh_now()
    assert h.live("cpu") == []


def test_a_node_that_stays_in_its_group_is_never_ownerless() -> None:
    """NodeGroupForNode reads the owner map without a lock while the group is
    republished: a node that stays must be in the map at every moment."""
    fleet = Fleet(config().groups)
    fleet.increase("cpu", 1, "a-1", 0.0)
    (stays,) = [n.provider_id for n in fleet.view("cpu").nodes]
    gaps: list[str] = []

    class Watched(dict[str, str]):
        def _check(self) -> None:
            if stays not in self:
                gaps.append("missing")

        def __delitem__(self, key: str) -> None:
            super().__delitem__(key)
            self._check()

        def pop(self, key: str, *default: Any) -> Any:
            out = super().pop(key, *default)
            self._check()
            return out

        def __setitem__(self, key: str, value: str) -> None:
            super().__setitem__(key, value)
            self._check()

    fleet._owner = Watched(fleet._owner)
    for n in range(10):
        fleet.increase("cpu", 1, f"a-{n + 2}", 0.0)
    newest = [n.provider_id for n in fleet.view("cpu").nodes][-5:]
    fleet.delete_nodes("cpu", newest)
    assert gaps == []
    assert fleet.owner_of(stays) == "cpu"


@pytest.mark.parametrize("dupes", [2, 3])
def test_duplicate_placeholders_in_delete_nodes_forget_one_slot(dupes: int) -> None:
    h = harness()
    h.provider.scaleups.increase("cpu", 3)  # placeholders only
    slot = h.provider.fleet.view("cpu").nodes[0].provider_id
    h.provider.delete_nodes("cpu", [slot] * dupes)
    assert h.provider.fleet.view("cpu").target_size == 2
