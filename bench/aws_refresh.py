"""What one AWS Refresh (CloudAdapter.snapshot) costs: wall time and API calls, for 500
capacity reservations and 10,000 instances, against the number of node groups.

    python -m bench.aws_refresh [--reservations 500] [--instances 10000] [--groups 1,10,100,1000]

EC2 is moto plus the test-side layer (tests/fakes/ec2.py), which answers
DescribeCapacityReservations and pages DescribeInstances by instance as EC2 does (moto pages
by launch). Nothing leaves the machine; credentials are fake. The instances are launched
through the adapter itself, in parts of 8, and committed, as the executor would.

Wall time is dominated by moto building and botocore parsing 10,000 instances; the
"adapter" column replays the same pages through allset's own parsing alone."""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from moto import mock_aws

from adapters.aws import AwsAdapter, create, discovery
from adapters.aws.settings import AwsSettings, settings_from
from bench.common import machine
from provider.base.clock import ManualClock
from provider.config import LoadedConfig, load_config_text
from provider.domain.cloud import CapacityType, LaunchRequest, OwnerTags
from tests.fakes.ec2 import Ec2Layer

REGION = "us-east-1"
ZONES = [f"{REGION}{z}" for z in "abcdef"]
TYPES = ["p5.48xlarge", "p4d.24xlarge", "p5e.48xlarge", "g6.48xlarge", "m7i.large"]
CLUSTER = "bench"
PART = 8  # nodes per launch, a typical GPU part
HOUR = 3600.0


def config_text(groups: int, targeted: list[str]) -> str:
    lines = [
        f"cluster: {CLUSTER}",
        "cloud:",
        "  provider: aws",
        f"  aws: {{region: {REGION}, reservationSelector: {{tags: {{team: ml}}}}}}",
        "nodeGroups:",
    ]
    for i in range(groups):
        zone, itype = ZONES[i % len(ZONES)], TYPES[i % len(TYPES)]
        fabric = f", fabric: pg-{i % 4}" if i % 3 == 0 else ""
        listed = f", reservations: [{targeted[i % len(targeted)]}]" if i % 2 == 0 else ""
        lines.append(
            f"  - {{id: g{i}, zone: {zone}, instanceType: {itype}, cpu: 8, memory: 32Gi, "
            f"maxSize: 1000{fabric}{listed}, aws: {{launchTemplate: {{name: bench}}}}}}"
        )
    return "\n".join(lines) + "\n"


def add_reservations(layer: Ec2Layer, count: int, now: float) -> list[str]:
    """A mix: open and targeted ODCRs, capacity blocks, some in placement groups."""
    targeted = []
    for i in range(count):
        kind: dict[str, Any] = {"tags": {"team": "ml", "n": str(i)}}
        if i % 10 == 0:
            kind.update(targeted=True, capacity_block=True, starts=now - HOUR,
                        ends=now + 24 * HOUR)
        elif i % 5 == 0:
            kind.update(targeted=True)
        if i % 7 == 0:
            kind.update(placement_group=f"pg-{i % 4}")
        r = layer.add_reservation(ZONES[i % len(ZONES)], TYPES[i % len(TYPES)], 16, **kind)
        if r.targeted:
            targeted.append(r.id)
    return targeted


def launch_fleet(adapter: AwsAdapter, instances: int, groups: int) -> None:
    """``instances`` on-demand nodes in parts of PART over the groups, each committed."""
    launched = 0
    part = 0
    while launched < instances:
        n = min(PART, instances - launched)
        g = part % groups
        attempt = f"a-{part:06d}"
        owner = OwnerTags(CLUSTER, f"g{g}", attempt, "0.0", CapacityType.ON_DEMAND)
        got = adapter.launch(LaunchRequest(f"{attempt}/0.0", f"g{g}", ZONES[g % len(ZONES)],
                                           TYPES[g % len(TYPES)], n, owner))
        adapter.commit([i.id for i in got], attempt)
        launched += n
        part += 1


def index_moto_tag_lookups() -> None:
    """moto finds one resource's tags by scanning every tag in the region (describe_tags
    with a resource-id filter), so listing N tagged instances costs O(N x all tags): at
    10,000 instances with allset's tags, most of an hour spent inside moto. For one exact
    resource id, this runs moto's own describe_tags over that resource's entry alone: the
    same answer, without the scan. Bench only; the tests use moto as shipped."""
    from moto.ec2.models.tags import TagBackend

    original: Any = TagBackend.describe_tags

    class _One:
        VALID_TAG_FILTERS = TagBackend.VALID_TAG_FILTERS

        def __init__(self, tags: dict[str, dict[str, str]]) -> None:
            self.tags = tags

    def describe_tags(self: Any, filters: dict[str, list[str]] | None = None) -> Any:
        ids = (filters or {}).get("resource-id", [])
        if filters and set(filters) == {"resource-id"} and len(ids) == 1 \
                and not set(ids[0]) & set("*?\\"):
            one = {ids[0]: dict(self.tags[ids[0]])} if ids[0] in self.tags else {}
            return original(_One(one), filters)
        return original(self, filters)

    TagBackend.describe_tags = describe_tags  # type: ignore[method-assign]


class Replay:
    """Serves recorded pages in order: allset's parsing without moto or botocore."""

    def __init__(self, pages: dict[str, list[dict[str, Any]]]) -> None:
        self._pages = {op: iter(p) for op, p in pages.items()}

    def describe_instances(self, **_: Any) -> dict[str, Any]:
        return next(self._pages["DescribeInstances"])

    def describe_capacity_reservations(self, **_: Any) -> dict[str, Any]:
        return next(self._pages["DescribeCapacityReservations"])


def adapter_only_seconds(pages: dict[str, list[dict[str, Any]]], settings: AwsSettings,
                         repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        replay = Replay(pages)
        start = time.perf_counter()
        discovery.list_reservations(replay, settings)
        discovery.list_instances(replay, CLUSTER)
        best = min(best, time.perf_counter() - start)
    return best


def build(layer: Ec2Layer, config: LoadedConfig, clock: ManualClock,
          pages: dict[str, list[dict[str, Any]]]) -> AwsAdapter:
    session = layer.session()

    def record(model: Any, parsed: dict[str, Any], **_: Any) -> None:
        if model.name in ("DescribeInstances", "DescribeCapacityReservations"):
            pages.setdefault(model.name, []).append(parsed)

    session.events.register("after-call.ec2", record)
    adapter = create(config, clock, session=session)
    assert isinstance(adapter, AwsAdapter)
    return adapter


def rows(args: argparse.Namespace) -> Iterator[str]:
    clock = ManualClock()
    layer = Ec2Layer(REGION, clock.now, instance_pages=True)
    layer.ec2.create_launch_template(LaunchTemplateName="bench", LaunchTemplateData={
        "ImageId": "ami-760aaa0f"})
    targeted = add_reservations(layer, args.reservations, clock.now())
    counts = [int(g) for g in args.groups.split(",")]
    started = time.perf_counter()
    fleet_adapter = build(layer, load_config_text(config_text(max(counts), targeted)),
                          clock, {})
    launch_fleet(fleet_adapter, args.instances, max(counts))
    yield (f"set-up: {args.reservations} reservations, {args.instances} instances launched "
           f"and committed through the adapter in {time.perf_counter() - started:.0f} s")
    yield ""
    yield ("| groups | API calls | DescribeCapacityReservations | DescribeInstances | "
           "reservations selected | instances | Refresh wall s | adapter-only ms |")
    yield "|---:|---:|---:|---:|---:|---:|---:|---:|"
    for groups in counts:
        config = load_config_text(config_text(groups, targeted))
        pages: dict[str, list[dict[str, Any]]] = {}
        adapter = build(layer, config, clock, pages)
        before = Counter(layer.calls)
        start = time.perf_counter()
        snap = adapter.snapshot(CLUSTER)
        wall = time.perf_counter() - start
        calls = Counter(layer.calls)
        calls.subtract(before)
        own = adapter_only_seconds(pages, settings_from(config))
        yield (f"| {groups} | {snap.api_calls} | {calls['DescribeCapacityReservations']} | "
               f"{calls['DescribeInstances']} | {len(snap.reservations)} | "
               f"{len(snap.instances)} | {wall:.1f} | {own * 1000:.0f} |")
        adapter.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reservations", type=int, default=500)
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--groups", default="1,10,100,1000")
    args = parser.parse_args()
    # moto stands in for EC2; these keep boto3 away from any real account or profile.
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_SESSION_TOKEN="bench", AWS_DEFAULT_REGION=REGION)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2"):
        os.environ.pop(name, None)
    print(f"AWS Refresh on moto + the test-side EC2 layer ({machine()})")
    index_moto_tag_lookups()
    with mock_aws():
        for row in rows(args):
            print(row, flush=True)
    print()
    print("API calls = reservation pages (1,000 a page) + instance pages (1,000 a page); the "
          "group count only changes which reservations are kept, on the client.")


if __name__ == "__main__":
    main()
