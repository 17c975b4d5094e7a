"""Where the simulated cloud is less tidy than a constant: each node boots in its own time,
a plain resize's launch failure is seen only a while later, and a node that ran for a few
seconds is billed the cloud's minimum.

Every draw comes from the run's seed (``World(trace, seed=...)``), and the same seed always
repeats the same run. A boot time is drawn for the node's identity (the k-th node launched
for a job, or in a group), not from one stream in launch order: two strategies, or two
set-ups of one, then meet the same boot times for the same nodes (common random numbers),
so a comparison between them measures their decisions rather than which draws each
happened to get. Failure delays keep their own stream: how many boots a strategy draws
does not shift when its failures are seen."""

from __future__ import annotations

import math
import random

# Cluster Autoscaler lists its cloud at most once a minute: `refreshInterval = 1 *
# time.Minute` in cloudprovider/aws/aws_manager.go and cloudprovider/gce/gce_manager.go
# (tag cluster-autoscaler-1.36.1). A failed launch is seen at the first refresh after the
# cloud records it.
PROVIDER_REFRESH = 60.0


class BootTimes:
    """Seconds from launch to a running node: the trace's ``bootSeconds`` times a
    log-normal factor exp(N(0, spread)), kept within [1 / maxFactor, maxFactor].

    The median is ``bootSeconds`` and the tail is long to the right, as boots are: a slow
    image pull or driver start adds minutes, nothing makes a boot much faster. The default
    spread (0.2: 90% of boots within about 0.72x-1.39x the median) is our choice; we found
    no published distribution of GPU node boot times to cite."""

    def __init__(self, median: float, spread: float, max_factor: float, seed: int) -> None:
        self._median = median
        self._spread = spread
        self._bound = math.log(max_factor)
        self._seed = seed

    def draw(self, node: str) -> float:
        """The boot time of the node named ``node`` (e.g. "j00042/3": the job's 4th)."""
        if self._spread == 0 or self._median == 0:
            return self._median
        factor = random.Random(f"boot/{self._seed}/{node}").gauss(0.0, self._spread)
        return self._median * math.exp(min(self._bound, max(-self._bound, factor)))


class FailureDelays:
    """How long after a plain resize Cluster Autoscaler learns that part of it failed.

    The resize itself returns at once: AWS `SetDesiredCapacity` and GCE
    `instanceGroupManagers.resize` only record the new target. The group then tries to
    launch; on a capacity or quota error AWS records a *Failed* scaling activity and GCE an
    error on the managed instance (`lastAttempt.errors`, e.g. ZONE_RESOURCE_POOL_EXHAUSTED
    or QUOTA_EXCEEDED). CA sees it at its next cloud refresh: on AWS its ASG cache checks
    `DescribeScalingActivities` and marks the missing instances as placeholders with an
    OutOfResources error (cloudprovider/aws/auto_scaling_groups.go,
    createPlaceholdersForDesiredNonStartedInstances; aws_cloud_provider.go, tag
    cluster-autoscaler-1.36.1); on GCE the MIG's instance errors are mapped to the same
    error class (cloudprovider/gce/autoscaling_gce_client.go). Then the scale-up counts as
    failed: the group backs off and its target size is cut back.

    Modelled: the cloud records the failure ``reported`` seconds after the resize (how soon
    is not documented; the default 30 s is our choice), and CA sees it at a refresh drawn
    uniformly within the following minute."""

    def __init__(self, reported: float, seed: int) -> None:
        self._reported = reported
        self._rng = random.Random(f"failure/{seed}")

    def draw(self) -> float:
        return self._reported + self._rng.uniform(0.0, PROVIDER_REFRESH)


def billed_seconds(ran: float, reserved: bool, minimum: float) -> float:
    """Seconds a node that ran ``ran`` seconds is billed for.

    On demand, a Linux instance is billed per second with a 60-second minimum (AWS, "EC2
    On-Demand Pricing": per-second billing) and a VM at least one minute (GCE, "VM instance
    pricing": billing model). AWS bills from the running state (EC2 user guide, "Instance
    state changes": pending is not billed), so a node terminated while still pending may in
    fact cost nothing: charging the minimum is the upper bound, chosen so the simulation
    never flatters a strategy that rolls nodes back.
    A reserved node costs nothing more (the reservation is paid whether used or not); it
    held its slot for the seconds it ran."""
    return ran if reserved else max(ran, minimum)
