"""What moto 5.2 does not model, modelled on the test side: capacity reservations (free
counts, open vs targeted, capacity blocks and their windows, placement groups), pools that
stock out, ClientToken idempotency, EC2's eventual consistency, and injected faults.

Sources of the EC2 behaviours modelled here (facts only; the code is ours):

* BLOCK END: EC2 begins terminating a Capacity Block's instances 30 minutes before the
  block ends (EC2 user guide, "Monitor Capacity Blocks using EventBridge": the warning
  comes 40 minutes before the end, termination 10 minutes later,
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html), an
  UltraServer Capacity Block's 60 minutes before (EC2 user guide, "Capacity Blocks for
  ML", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html). The
  layer terminates them then, and refuses launches into a block from then on (the code of
  that refusal is not documented; ReservationCapacityExceeded here).
* ODCR END: an On-Demand Capacity Reservation's end ends only launches into it: "After a
  reservation ends, you can no longer target instances to the Capacity Reservation.
  Instances running in the reserved capacity continue to run uninterrupted" (EC2 user
  guide, "Work with Capacity Reservations",
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-using.html).
  The layer shows it expired and leaves its instances running.
* BLOCK STATES: a block bought for later is ``scheduled`` (``payment-pending`` while paid)
  until its StartDate and shows no available instances; a launch into it then fails with
  InvalidCapacityReservationState.PendingActivation (the code named in issue 20; the
  states are DescribeCapacityReservations' CapacityReservation.State,
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html).
* TOKEN SPENT: repeating a ClientToken whose instances were all terminated fails with
  IdempotentInstanceTerminated ("Error codes for the Amazon EC2 API",
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
* TOKEN REUSED: a ClientToken repeated with other parameters fails with
  IdempotentParameterMismatch: "The request uses the same client token as a previous,
  but non-identical request" (same page; "Ensuring idempotency in Amazon EC2 API
  requests", https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html),
  and launches nothing.
* TOKEN LENGTH: a ClientToken is at most 64 ASCII characters (botocore's
  RunInstancesRequest.ClientToken: "Constraints: Maximum 64 ASCII characters"); the
  layer refuses a longer one with InvalidParameterValue (the code is not documented for
  this case).
* PLATFORM AND TENANCY: a reservation takes instances "that have matching attributes
  (instance type, platform, Availability Zone, and tenancy)" (EC2 user guide, "Work with
  Capacity Reservations"); CapacityReservation.InstancePlatform and Tenancy say them
  (botocore's EC2 model). The layer consumes an open reservation only for a launch that
  matches, and refuses a targeted one that does not with InvalidParameterCombination (the
  code of that refusal is not documented). A launch's platform is its image's
  PlatformDetails, "The platform details associated with the billing code of the AMI"
  (EC2 API reference, Image), which moto does not fill: the layer gives "Windows" to a
  Windows image and "Linux/UNIX" to others, unless ``image_platforms`` says more.
* EFA-ONLY: an EFA-only interface takes no IP address and cannot be the primary interface
  (card 0, device 0) (EC2 user guide, "Maximize network bandwidth on Amazon EC2 instances
  with multiple network cards",
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html); the layer
  counts the subnet addresses launches take.

It hooks the botocore event system of one boto3 session, so only the adapter under test sees
it, and it answers with real error codes and HTTP statuses, which botocore turns into real
ClientErrors. Everything else (instances, tags, launch templates, instance types) is moto's.

* ``before-parameter-build`` sees the adapter's own parameters: calls are counted and kept,
  and a RunInstances is decided here (it may shrink MaxCount, as EC2 launches anything from
  MinCount to MaxCount, or fail).
* ``before-call`` answers DescribeCapacityReservations, errors and repeated ClientTokens
  itself, or lets the call through to moto.
* ``after-call`` records what a RunInstances launched (which reservation each instance took)
  and gives slots back on TerminateInstances."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import re
import secrets
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError

ACCOUNT = "123456789012"
ON_DEMAND, SPOT, CAPACITY_BLOCK = "on-demand", "spot", "capacity-block"
INTERRUPTIBLE = "interruptible-capacity-reservation"
CLIENT_TOKEN_MAX = 64  # ASCII characters (TOKEN LENGTH)
BLOCK_CUTOFF = 30 * 60.0  # EC2 terminates a block's instances this long before its end
ULTRASERVER_BLOCK_CUTOFF = 60 * 60.0  # ... and an UltraServer block's (BLOCK END)
# Instance types sold only as UltraServer nodes (botocore's InstanceType enum; EC2 user
# guide, Amazon EC2 UltraServers). EC2 reports LaunchStatus for their reservations only
# (CapacityReservation.LaunchStatus: "Only supported for UltraServers").
ULTRASERVER_TYPES = frozenset({"p6e-gb200.36xlarge", "trn2u.48xlarge"})
_URL = "https://ec2.amazonaws.com/"
Response = tuple[AWSResponse, dict[str, Any]]


def new_reservation_id() -> str:
    return "cr-" + secrets.token_hex(9)[:17]


@dataclass
class ModelReservation:
    id: str
    zone: str
    instance_type: str
    total: int
    targeted: bool = False
    capacity_block: bool = False
    placement_group: str | None = None
    starts: float | None = None
    ends: float | None = None
    tags: dict[str, str] = field(default_factory=dict)
    state: str = "active"
    instances: set[str] = field(default_factory=set)  # instance ids running in it
    # An interruptible Capacity Reservation (CapacityReservation.Interruptible): lent by its
    # owner, who may reclaim it ("the capacity owner can reclaim the capacity at any time
    # with a 2-minute interruption notice", EC2 user guide, Interruptible Capacity
    # Reservations); targeted ("you must specifically target it at launch"), and launched
    # into with the market type interruptible-capacity-reservation (botocore's MarketType).
    interruptible: bool = False
    # UltraServer reservations only (CapacityReservation.LaunchStatus): "unlaunchable - You
    # can't launch instances into the Capacity Reservation". None: not reported.
    launch_status: str | None = None
    # What launches it takes (PLATFORM AND TENANCY).
    platform: str = "Linux/UNIX"
    tenancy: str = "default"

    @property
    def free(self) -> int:
        return max(0, self.total - len(self.instances))

    @property
    def cutoff(self) -> float:
        """How long before its end EC2 begins terminating a block's instances."""
        return ULTRASERVER_BLOCK_CUTOFF if self.instance_type in ULTRASERVER_TYPES \
            else BLOCK_CUTOFF

    def state_at(self, now: float) -> str:
        """A block is scheduled before its start and expired after its end."""
        if self.state == "active" and self.starts is not None and now < self.starts:
            return "scheduled"
        if self.state == "active" and self.ends is not None and now >= self.ends:
            return "expired"
        return self.state

    def item(self, region: str, now: float) -> dict[str, Any]:
        """As DescribeCapacityReservations shows it."""

        def when(epoch: float | None) -> dt.datetime | None:
            return None if epoch is None else dt.datetime.fromtimestamp(epoch, dt.UTC)

        item: dict[str, Any] = {
            "CapacityReservationId": self.id,
            "OwnerId": ACCOUNT,
            "CapacityReservationArn":
                f"arn:aws:ec2:{region}:{ACCOUNT}:capacity-reservation/{self.id}",
            "InstanceType": self.instance_type,
            "InstancePlatform": self.platform,
            "AvailabilityZone": self.zone,
            "Tenancy": self.tenancy,
            "TotalInstanceCount": self.total,
            "AvailableInstanceCount": self.free if self.state_at(now) == "active" else 0,
            "State": self.state_at(now),
            "InstanceMatchCriteria": "targeted" if self.targeted else "open",
            "ReservationType": CAPACITY_BLOCK if self.capacity_block else "default",
            "EndDateType": "limited" if self.ends is not None else "unlimited",
            "Tags": [{"Key": k, "Value": v} for k, v in self.tags.items()],
        }
        if self.starts is not None:
            item["StartDate"] = when(self.starts)
        if self.ends is not None:
            item["EndDate"] = when(self.ends)
        if self.interruptible:
            item["Interruptible"] = True
            item["InstanceMatchCriteria"] = "targeted"
        if self.launch_status is not None or self.instance_type in ULTRASERVER_TYPES:
            item["LaunchStatus"] = self.launch_status or "launchable"
        if self.placement_group is not None:
            item["PlacementGroupArn"] = (
                f"arn:aws:ec2:{region}:{ACCOUNT}:placement-group/{self.placement_group}")
        return item


@dataclass
class _Fault:
    code: str | None  # an error code to answer with, or None for a read timeout
    status: int
    after: bool  # the call happens, then the connection breaks
    remaining: int


@dataclass
class _Launch:
    count: int
    takes: list[tuple[str | None, int]]  # (reservation id or None for the pool, instances)
    pool: tuple[str, str, str]


@dataclass(frozen=True)
class LiveInstance:
    id: str
    zone: str
    instance_type: str
    state: str
    tags: dict[str, str]


class Ec2Layer:
    def __init__(self, region: str = "us-east-1", now: Callable[[], float] = time.time, *,
                 instance_pages: bool = False) -> None:
        self.region = region
        self._now = now
        # moto pages DescribeInstances by launch (reservation), EC2 by instance. With this
        # set, the layer pages by instance as EC2 does (benches count calls with it).
        self._instance_pages = instance_pages
        self._listing: list[dict[str, Any]] = []
        self.reservations: dict[str, ModelReservation] = {}
        # (zone, instance type, market) -> instances still available; absent: unlimited.
        self.pools: dict[tuple[str, str, str], int] = {}
        # (zone, instance type) EC2 does not offer: a launch there fails with Unsupported
        # (400), "you might be trying to launch an instance in an Availability Zone that
        # currently has constraints on that instance type" (Error codes for the Amazon EC2
        # API). moto launches any type anywhere.
        self.not_offered: set[tuple[str, str]] = set()
        # On-Demand vCPU limits by quota (Service Quotas names them "Running On-Demand P
        # instances", "Running On-Demand G and VT instances", "Running On-Demand Standard
        # (A, C, D, H, I, M, R, T, Z) instances", ...: "On-Demand Instance quotas", EC2
        # user guide). A launch that would take the running vCPUs of its type's quota over
        # it fails with VcpuLimitExceeded (400); the other quotas are untouched. Absent:
        # no limit. Only on-demand launches are counted here.
        self.vcpu_limits: dict[str, int] = {}
        # Image id -> its PlatformDetails, where moto's "Windows or not" is not enough.
        self.image_platforms: dict[str, str] = {}
        self.calls: Counter[str] = Counter()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.tokens: dict[str, list[str]] = {}
        self._token_params: dict[str, dict[str, Any]] = {}  # what each token first asked
        self._faults: dict[str, deque[_Fault]] = {}
        self._hidden: dict[str, int] = {}  # instance id -> calls it stays invisible for
        self._hide_next_launch = 0
        self._backdoor: Any = None
        self.addresses_taken = 0  # subnet addresses the layer's launches took

    # --- set-up -------------------------------------------------------------------------

    def add_reservation(self, zone: str, instance_type: str, total: int, *,
                        id: str | None = None, **kw: Any) -> ModelReservation:
        r = ModelReservation(id or new_reservation_id(), zone, instance_type, total, **kw)
        self.reservations[r.id] = r
        return r

    def withdraw_offering(self, zone: str, instance_type: str) -> None:
        self.not_offered.add((zone, instance_type))

    def stockout(self, zone: str, instance_type: str, market: str = ON_DEMAND) -> None:
        self.pools[(zone, instance_type, market)] = 0

    def fail(self, operation: str, code: str, *, status: int = 400, times: int = 1) -> None:
        """The next ``times`` calls of ``operation`` answer with this error code."""
        self._faults.setdefault(operation, deque()).append(_Fault(code, status, False, times))

    def timeout(self, operation: str, *, after: bool, times: int = 1) -> None:
        """The next calls time out: before EC2 saw them, or after it carried them out."""
        self._faults.setdefault(operation, deque()).append(_Fault(None, 0, after, times))

    def stop(self, instance_id: str) -> None:
        """The instance is stopped (someone in the console, a scheduled retirement): it
        stays (moto's StopInstances) and gives its Capacity Reservation slot back. STOP
        SLOT: EC2's guide says a reservation is used by matching "new instances and
        running instances" and bills its unused part "whether you run instances in
        reserved capacity or not" (Work with Capacity Reservations; Capacity Reservation
        pricing and billing); it does not say in so many words what a stop does to the
        slot: a stopped instance is not running, so the layer frees it, as GCE documents
        for a stopped VM (docs/cloud-behaviour.md)."""
        self.ec2.stop_instances(InstanceIds=[instance_id])
        self._release(instance_id)

    def hide_next_launch(self, calls: int) -> None:
        """EC2's eventual consistency: the next launch's instances stay invisible to the
        following ``calls`` calls that name or list them."""
        self._hide_next_launch = calls

    def session(self) -> boto3.session.Session:
        """A session whose clients go through this layer (and moto behind it)."""
        session = boto3.session.Session(region_name=self.region)
        events = session.events
        events.register("before-parameter-build.ec2", self._before_parameter_build)
        events.register("before-call.ec2", self._before_call)
        events.register("after-call.ec2", self._after_call)
        return session

    # --- assertions -----------------------------------------------------------------------

    @property
    def ec2(self) -> Any:
        """A client straight to moto, bypassing the layer (set-up and assertions)."""
        if self._backdoor is None:
            self._backdoor = boto3.client("ec2", region_name=self.region)
        return self._backdoor

    def live(self, **tag_filters: str) -> list[LiveInstance]:
        filters = [{"Name": "instance-state-name",
                    "Values": ["pending", "running", "stopping", "stopped", "shutting-down"]}]
        filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in tag_filters.items()]
        out = []
        pages = self.ec2.get_paginator("describe_instances").paginate(Filters=filters)
        for r in (r for page in pages for r in page["Reservations"]):
            for i in r["Instances"]:
                out.append(LiveInstance(
                    i["InstanceId"], i["Placement"]["AvailabilityZone"], i["InstanceType"],
                    i["State"]["Name"], {t["Key"]: t["Value"] for t in i.get("Tags", [])},
                ))
        return out

    def used(self, reservation_id: str) -> int:
        return len(self.reservations[reservation_id].instances)

    def adapter_calls(self) -> int:
        return sum(self.calls.values())

    # --- event handlers -------------------------------------------------------------------

    def _before_parameter_build(self, params: dict[str, Any], model: Any,
                                context: dict[str, Any], **_: Any) -> None:
        op = model.name
        self.calls[op] += 1
        self.requests.append((op, copy.deepcopy(params)))
        context["layer.params"] = params
        fault = self._take_fault(op)
        context["layer.fault"] = fault
        if fault is not None and not fault.after:
            return
        if op == "RunInstances":
            token = params.get("ClientToken", "")
            context["layer.asked"] = copy.deepcopy(params)
            if len(token) > CLIENT_TOKEN_MAX or not token.isascii():  # TOKEN LENGTH
                context["layer.launch"] = error("InvalidParameterValue", 400)
                return
            repeated = self.tokens.get(token)
            if repeated is not None:
                if self._token_params.get(token) != params:  # TOKEN REUSED
                    context["layer.launch"] = error("IdempotentParameterMismatch", 400)
                    return
                context["layer.repeat"] = repeated
                return
            decided = self._decide_launch(params)
            if isinstance(decided, _Launch):
                # EC2 launches anything from MinCount to MaxCount; moto launches MinCount.
                params["MinCount"] = params["MaxCount"] = decided.count
            context["layer.launch"] = decided

    def _before_call(self, model: Any, context: dict[str, Any], **_: Any) -> Response | None:
        op = model.name
        params: dict[str, Any] = context.get("layer.params", {})
        fault: _Fault | None = context.get("layer.fault")
        if fault is not None and not fault.after:
            if fault.code is None:
                raise ReadTimeoutError(endpoint_url=_URL)
            return error(fault.code, fault.status)
        self._end_blocks()
        if op == "DescribeCapacityReservations":
            return self._describe_reservations(params)
        if op == "RunInstances":
            if "layer.repeat" in context:
                if self._all_terminated(context["layer.repeat"]):
                    return error("IdempotentInstanceTerminated", 400)
                return self._repeat(context["layer.repeat"])
            decided = context.get("layer.launch")
            if isinstance(decided, tuple):
                return decided
        if op == "DescribeInstances" and self._instance_pages and "MaxResults" in params:
            return self._describe_instances_by_instance(params)
        if op in ("TerminateInstances", "CreateTags"):
            named = params.get("InstanceIds") or params.get("Resources") or []
            if any(self._invisible(i) for i in named):
                return error("InvalidInstanceID.NotFound", 400)
        return None

    def _after_call(self, model: Any, parsed: dict[str, Any], context: dict[str, Any],
                    **_: Any) -> None:
        op = model.name
        ok = parsed.get("ResponseMetadata", {}).get("HTTPStatusCode", 200) < 300
        decided = context.get("layer.launch")
        if op == "RunInstances" and ok and isinstance(decided, _Launch):
            self._record_launch(context["layer.params"], decided, parsed,
                                context["layer.asked"])
        if op == "TerminateInstances" and ok:
            for item in parsed.get("TerminatingInstances", []):
                self._release(item["InstanceId"])
        if op == "DescribeImages" and ok:
            for image in parsed.get("Images", []):
                image.setdefault("PlatformDetails", self._platform_of(image))
        if op == "DescribeInstances" and ok:
            for r in parsed.get("Reservations", []):
                r["Instances"] = [i for i in r["Instances"]
                                  if not self._invisible(i["InstanceId"])]
        fault: _Fault | None = context.get("layer.fault")
        if fault is not None and fault.after:
            raise ReadTimeoutError(endpoint_url=_URL)

    # --- the model ----------------------------------------------------------------------

    def _take_fault(self, op: str) -> _Fault | None:
        queue = self._faults.get(op)
        if not queue:
            return None
        fault = queue[0]
        fault.remaining -= 1
        if fault.remaining <= 0:
            queue.popleft()
        return fault

    def _end_blocks(self) -> None:
        """EC2 terminates a block's instances from 30 minutes before its end (60 for an
        UltraServer block); an ODCR's end leaves its instances running (ODCR END)."""
        now = self._now()
        for r in self.reservations.values():
            if r.capacity_block and r.ends is not None and now >= r.ends - r.cutoff \
                    and r.instances:
                self.ec2.terminate_instances(InstanceIds=sorted(r.instances))
                r.instances.clear()

    def _all_terminated(self, ids: list[str]) -> bool:
        found = self.ec2.describe_instances(InstanceIds=ids)["Reservations"]
        states = [i["State"]["Name"] for r in found for i in r["Instances"]]
        return bool(states) and all(s == "terminated" for s in states)

    def _invisible(self, instance_id: str) -> bool:
        left = self._hidden.get(instance_id, 0)
        if left <= 0:
            return False
        self._hidden[instance_id] = left - 1
        return True

    def _describe_reservations(self, params: dict[str, Any]) -> Response:
        wanted = params.get("CapacityReservationIds") or []
        for rid in wanted:
            if rid not in self.reservations:
                return error("InvalidCapacityReservationId.NotFound", 400)
        items = [r for r in self.reservations.values() if not wanted or r.id in wanted]
        for f in params.get("Filters", []):
            name, values = f["Name"], set(f["Values"])
            items = [r for r in items if _matches(r, name, values, self._now())]
        start = int(params.get("NextToken") or 0)
        size = int(params.get("MaxResults") or 1000)
        page = items[start:start + size]
        now = self._now()
        body: dict[str, Any] = {"CapacityReservations": [r.item(self.region, now)
                                                         for r in page]}
        if start + size < len(items):
            body["NextToken"] = str(start + size)
        return ok(body)

    def _decide_launch(self, params: dict[str, Any]) -> _Launch | Response:
        low, high = int(params["MinCount"]), int(params["MaxCount"])
        zone = params.get("Placement", {}).get("AvailabilityZone", "")
        itype = params.get("InstanceType", "")
        market = params.get("InstanceMarketOptions", {}).get("MarketType", ON_DEMAND)
        spec = params.get("CapacityReservationSpecification", {})
        target = spec.get("CapacityReservationTarget", {}).get("CapacityReservationId")
        pool = (zone, itype, market)
        for nic in params.get("NetworkInterfaces", []):
            if nic.get("InterfaceType") == "efa-only" and (
                    nic.get("NetworkCardIndex", 0), nic.get("DeviceIndex")) == (0, 0):
                return error("InvalidParameterCombination", 400)  # not the primary
        if (zone, itype) in self.not_offered:
            return error("Unsupported", 400)
        if market == ON_DEMAND and target is None and self._over_vcpu_limit(itype, high):
            return error("VcpuLimitExceeded", 400)
        if target is not None:
            return self._decide_targeted(target, params, low, high, market, pool)
        if market == CAPACITY_BLOCK:
            return error("InvalidParameterCombination", 400)
        takes: list[tuple[str | None, int]] = []
        remaining = high
        preference = spec.get("CapacityReservationPreference", "open")
        if market == ON_DEMAND and preference in ("open", "capacity-reservations-only"):
            # EC2's default: matching open reservations are consumed silently.
            now = self._now()
            for r in self.reservations.values():
                if (r.state_at(now) == "active" and not r.targeted and r.free and remaining
                        and (r.zone, r.instance_type) == (zone, itype)
                        and (r.platform, r.tenancy) == self._launches(params)):
                    n = min(r.free, remaining)
                    takes.append((r.id, n))
                    remaining -= n
        if remaining and preference != "capacity-reservations-only":
            n = min(remaining, self.pools.get(pool, remaining))
            if n:
                takes.append((None, n))
                remaining -= n
        got = high - remaining
        if got < low:
            return error("InsufficientInstanceCapacity", 500)
        return _Launch(got, takes, pool)

    def _launches(self, params: dict[str, Any]) -> tuple[str, str]:
        """(platform, tenancy) of a RunInstances: its own image and placement, else its
        launch template's (PLATFORM AND TENANCY)."""
        data: dict[str, Any] = {}
        template = params.get("LaunchTemplate")
        if template:
            named = {k: v for k, v in template.items() if k in ("LaunchTemplateId",
                                                                "LaunchTemplateName")}
            found = self.ec2.describe_launch_template_versions(
                **named, Versions=[template.get("Version", "$Default")])
            data = found["LaunchTemplateVersions"][0]["LaunchTemplateData"]
        image = params.get("ImageId") or data.get("ImageId", "")
        tenancy = params.get("Placement", {}).get("Tenancy") or \
            data.get("Placement", {}).get("Tenancy") or "default"
        found = self.ec2.describe_images(Filters=[{"Name": "image-id", "Values": [image]}])
        images = found["Images"]
        return (self._platform_of(images[0]) if images else "Linux/UNIX"), tenancy

    def _platform_of(self, image: dict[str, Any]) -> str:
        known = self.image_platforms.get(image["ImageId"])
        if known is not None:
            return known
        return "Windows" if image.get("Platform") == "windows" else "Linux/UNIX"

    def _over_vcpu_limit(self, itype: str, count: int) -> bool:
        quota = _on_demand_quota(itype)
        limit = self.vcpu_limits.get(quota)
        if limit is None:
            return False
        running = [i.instance_type for i in self.live() if i.state in ("pending", "running")
                   and _on_demand_quota(i.instance_type) == quota]
        return sum(map(self._vcpus, running)) + count * self._vcpus(itype) > limit

    def _vcpus(self, itype: str) -> int:
        found = self.ec2.describe_instance_types(InstanceTypes=[itype])["InstanceTypes"]
        return int(found[0]["VCpuInfo"]["DefaultVCpus"])

    def _decide_targeted(self, rid: str, params: dict[str, Any], low: int, high: int,
                         market: str, pool: tuple[str, str, str]) -> _Launch | Response:
        r = self.reservations.get(rid)
        if r is None:
            return error("InvalidCapacityReservationId.NotFound", 400)
        zone, itype, _ = pool
        if (r.zone, r.instance_type) != (zone, itype):
            return error("InvalidParameterCombination", 400)
        if r.capacity_block != (market == CAPACITY_BLOCK):
            return error("InvalidParameterCombination", 400)
        if r.interruptible != (market == INTERRUPTIBLE):
            return error("InvalidParameterCombination", 400)
        if (r.platform, r.tenancy) != self._launches(params):  # PLATFORM AND TENANCY
            return error("InvalidParameterCombination", 400)
        if r.launch_status == "unlaunchable":
            # The code EC2 answers is not documented; a capacity refusal stands for it.
            return error("InsufficientInstanceCapacity", 500)
        group = params.get("Placement", {}).get("GroupName")
        if r.placement_group is not None and group != r.placement_group:
            return error("InvalidParameterCombination", 400)
        now = self._now()
        state = r.state_at(now)
        if state in ("scheduled", "payment-pending"):
            return error("InvalidCapacityReservationState.PendingActivation", 400)
        if state != "active":
            return error("ReservationCapacityExceeded", 400)
        if r.capacity_block and r.ends is not None and now >= r.ends - r.cutoff:
            return error("ReservationCapacityExceeded", 400)
        n = min(high, r.free)
        if n < low:
            return error("ReservationCapacityExceeded", 400)
        return _Launch(n, [(r.id, n)], pool)

    def _record_launch(self, params: dict[str, Any], launch: _Launch,
                       parsed: dict[str, Any], asked: dict[str, Any]) -> None:
        ids = [i["InstanceId"] for i in parsed.get("Instances", [])]
        nics = params.get("NetworkInterfaces") or [{}]
        self.addresses_taken += len(ids) * sum(
            1 for n in nics if n.get("InterfaceType") != "efa-only")
        token = params.get("ClientToken")
        if token:
            self.tokens[token] = ids
            self._token_params[token] = asked
        rest = iter(ids)
        for rid, n in launch.takes:
            taken = list(itertools.islice(rest, n))
            if rid is None:
                if launch.pool in self.pools:
                    self.pools[launch.pool] -= len(taken)
            else:
                self.reservations[rid].instances.update(taken)
        if self._hide_next_launch:
            for i in ids:
                self._hidden[i] = self._hide_next_launch
            self._hide_next_launch = 0

    def _release(self, instance_id: str) -> None:
        for r in self.reservations.values():
            r.instances.discard(instance_id)

    def _describe_instances_by_instance(self, params: dict[str, Any]) -> Response:
        token = params.get("NextToken") or ""
        if not token.startswith("layer-"):  # a first page: list everything from moto once
            pager = self.ec2.get_paginator("describe_instances")
            self._listing = [i for page in pager.paginate(Filters=params.get("Filters", []))
                             for r in page["Reservations"] for i in r["Instances"]]
        start = int(token.removeprefix("layer-") or 0)
        size = int(params["MaxResults"])
        page = self._listing[start:start + size]
        body: dict[str, Any] = {"Reservations": [
            {"ReservationId": "r-layer", "OwnerId": ACCOUNT, "Instances": page}]}
        if start + size < len(self._listing):
            body["NextToken"] = f"layer-{start + size}"
        return ok(body)

    def _repeat(self, ids: list[str]) -> Response:
        """EC2 answers a repeated ClientToken with the first call's instances."""
        found = self.ec2.describe_instances(InstanceIds=ids)["Reservations"]
        instances = [i for r in found for i in r["Instances"]]
        return ok({"ReservationId": "r-repeat", "OwnerId": ACCOUNT, "Instances": instances})


def _matches(r: ModelReservation, name: str, values: set[str], now: float) -> bool:
    if name == "state":
        return r.state_at(now) in values
    if name == "instance-type":
        return r.instance_type in values
    if name == "availability-zone":
        return r.zone in values
    if name.startswith("tag:"):
        return r.tags.get(name[4:]) in values
    raise AssertionError(f"the layer does not model the filter {name!r}")


def ok(body: dict[str, Any]) -> Response:
    body["ResponseMetadata"] = {"HTTPStatusCode": 200, "RequestId": "layer"}
    return AWSResponse(_URL, 200, {}, None), body


def error(code: str, status: int) -> Response:
    body = {
        "Error": {"Code": code, "Message": f"(modelled by the test layer) {code}"},
        "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "layer"},
    }
    return AWSResponse(_URL, status, {}, None), body


# The On-Demand vCPU quota an instance family counts against, by the letters its name
# starts with ("On-Demand Instance quotas", EC2 user guide).
_QUOTAS = {
    **dict.fromkeys("acdhimrtz", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) "
                                  "instances"),
    "g": "Running On-Demand G and VT instances", "vt": "Running On-Demand G and VT instances",
    "p": "Running On-Demand P instances", "inf": "Running On-Demand Inf instances",
    "f": "Running On-Demand F instances", "x": "Running On-Demand X instances",
    "dl": "Running On-Demand DL instances", "trn": "Running On-Demand Trn instances",
    "u": "Running On-Demand High Memory instances", "hpc": "Running On-Demand HPC instances",
}


def _on_demand_quota(itype: str) -> str:
    letters = re.match(r"[a-z]+", itype)
    key = letters.group(0) if letters else itype
    # im4gn, is4gen, gr6: a first letter's quota ("I", "G") when the letters name none.
    return _QUOTAS.get(key) or _QUOTAS.get(key[:1]) or f"Running On-Demand {key} instances"
