"""One request no longer stalls autoscaling for everyone (issue 32, finding 2).

    python -m bench.plan_limits [--runs 200] [--calls 400] [--groups 200]

1. A request of 2^31-1 pods: the time from the request (with its PodTemplate) to its
   refusal, parsed and planned through the planner's front door, median and p99 over
   --runs runs, with the gang's layout known (the same ask again) and not (a new ask every
   run). Aim: under 10 ms.
2. CA's IncreaseSize over real gRPC on 127.0.0.1 (allset's server in this process, CA's
   client in a child process), p50/p99 over --calls calls: with no request being planned,
   then while 8 worst-case requests are planned over and over by 8 threads, each the way
   an attempt plans (Ledger.plan: a view, the plan built through the requests' planning
   gate, the claim; then the claim is let go), in the planning process as `allset serve`
   builds them (provider/attempts/planning.py). Worst case, at the new limits: 32 pod
   sets (the most a request has), their counts at the most the fleet's maxSize holds, GPU
   pod sets asking through DRA claims, topology none (one domain of every group), and a
   new ask every plan (64 per phase, parsed before it as a service parses a request once;
   only the all-at-once phase plans more and reuses them). Then, for comparison, the same load
   planned in-process (as before the planning process), one at a time and with the gate
   off (the 8 plans computing at once). Aim: p99 under 20 ms with the load.

Prints the machine, the date, figures and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import yaml

from adapters.registry import create_adapter
from bench.common import ROOT, heading, percentiles
from provider.app import Provider
from provider.attempts.planning import InProcess, Planner, PlanProcess
from provider.base.clock import SystemClock
from provider.cli.serve import favour_ca_latency
from provider.config import load_config_text
from provider.domain.demand import Demand
from provider.domain.devices.catalog import MODELS
from provider.domain.plan import Infeasible, Plan
from provider.domain.provreq import MAX_COUNT, MAX_POD_SETS, demand_from
from provider.planner.answer import plan
from provider.planner.layout import layout
from provider.service.server import Server

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
GPU_LABEL = "nvidia.com/gpu.product"
# instance type: (GPU type, GPUs, CPUs, memory GiB, on-demand price); a third are CPU-only
SHAPES = {
    "p5.48xlarge": ("nvidia-h100-80gb", 8, 191, 1900, 98.32),
    "p4d.24xlarge": ("nvidia-a100-40gb", 8, 95, 1100, 32.77),
    "m7i.8xlarge": (None, 0, 31, 120, 1.61),
}
LOADS = 8  # worst-case requests planned at once
ASKS = 64  # distinct worst-case requests per phase (more than a phase plans)
CA_GROUP = "ca-cpu"  # the group CA scales up, one node a call


def fleet_config(groups: int) -> str:
    """``groups`` node groups over four zones, each with its own price (so no two are
    interchangeable and the planner cannot merge them), reservations in every zone."""
    nodes: list[dict[str, Any]] = []
    types = list(SHAPES)
    for i in range(groups):
        itype = types[i % len(types)]
        gpu, gpus, cpu, mem, price = SHAPES[itype]
        nodes.append({
            "id": f"g{i:04d}", "zone": ZONES[i % len(ZONES)], "instanceType": itype,
            **({"gpu": {"type": gpu, "count": gpus}} if gpu else {}),
            "cpu": cpu, "memory": f"{mem}Gi", "maxSize": 8 + i % 9,
            "price": {"onDemand": round(price * (1 + i / 1000), 4)},
            **({"taints": [{"key": "nvidia.com/gpu", "value": "present",
                            "effect": "NoSchedule"}]} if gpu else {}),
        })
    # Tainted: the requests' pods never land on CA's group.
    nodes.append({"id": CA_GROUP, "zone": ZONES[0], "instanceType": "m7i.large", "cpu": 2,
                  "memory": "8Gi", "maxSize": 100_000, "price": {"onDemand": 0.1},
                  "taints": [{"key": "ca", "value": "only", "effect": "NoSchedule"}]})
    reservations = [{"id": f"r-{t}-{z}", "zone": z, "instanceType": t, "count": 16}
                    for z in ZONES for t in types[:2]]
    return yaml.safe_dump({
        "cluster": "bench", "gpuLabel": GPU_LABEL, "refreshInterval": "10m",
        "cloud": {"provider": "fake", "fake": {"reservations": reservations}},
        "nodeGroups": nodes}, sort_keys=False)


def template(name: str, requests: dict[str, str], gpu: str | None,
             claim: int) -> dict[str, Any]:
    """A pod of one container; a GPU pod selects its GPU type by label, or by a claim."""
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {
        "requests": requests, "limits": requests}}]}
    if gpu or claim:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    if gpu:
        spec["nodeSelector"] = {GPU_LABEL: gpu}
    if claim:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{claim}"}]
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"namespace": "ml", "name": name}, "template": {"spec": spec}}


def request(counts: dict[str, int]) -> dict[str, Any]:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"namespace": "ml", "name": "worst"},
            "spec": {"provisioningClassName": "atomic-reserved.allset.dev",
                     "parameters": {"topology": "none"},
                     "podSets": [{"podTemplateRef": {"name": n}, "count": c}
                                 for n, c in counts.items()]}}


class Claims:
    """DRA objects for the GPU pod sets: one claim of k GPUs of the pod set's type."""

    def __init__(self) -> None:
        self.templates: dict[str, dict[str, Any]] = {}

    def add(self, gpus: int, product: str) -> int:
        key = len(self.templates) + 1
        self.templates[f"gpus-{key}"] = {"spec": {"spec": {"devices": {"requests": [{
            "name": "gpus", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": gpus,
                "selectors": [{"cel": {"expression":
                    f'device.attributes["gpu.nvidia.com"].productName == "{product}"'}}]}}]}}}}
        return key

    def resource_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.templates.get(name)

    def resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def device_class(self, name: str) -> dict[str, Any] | None:
        return {"spec": {"selectors": [{"cel": {
            "expression": 'device.driver == "gpu.nvidia.com"'}}]}}


def worst_case(provider: Provider, k: int) -> Demand:
    """32 pod sets at the most the fleet's maxSize holds; ``k`` makes the ask new (its CPU
    requests differ from every earlier one), so nothing of an earlier plan is reused."""
    sets: dict[str, int] = {}
    templates: dict[str, dict[str, Any]] = {}
    claims = Claims()
    per = MAX_POD_SETS // 4  # pod sets per kind: h100, a100 (through claims), two CPU
    for i in range(MAX_POD_SETS):
        kind = i // per
        milli = 1000 + (k * MAX_POD_SETS + i) % 997  # a new ask per plan
        name = f"ps{i:02d}"
        if kind < 2:
            gpu = "nvidia-h100-80gb" if kind == 0 else "nvidia-a100-40gb"
            gpus = (1, 2, 4, 8)[i % 4]
            key = claims.add(gpus, MODELS[gpu].product) if kind == 1 else 0
            requests = {"cpu": f"{milli}m", "memory": "8Gi",
                        **({} if key else {"nvidia.com/gpu": str(gpus)})}
            templates[name] = template(name, requests, None if key else gpu, key)
        else:
            templates[name] = template(name, {"cpu": f"{milli * (kind - 1)}m",
                                              "memory": "4Gi"}, None, 0)
        sets[name] = 1
    demand, _ = demand_from(request(sets), templates, claims)
    return at_the_bound(demand, provider)


def at_the_bound(demand: Demand, provider: Provider) -> Demand:
    """Each pod set's count as large as the refusal allows: the pod sets that share groups
    share those groups' maxSize evenly, so together they need every node the groups hold."""
    groups = provider.matcher.groups
    found = layout(demand, provider.matcher)
    sharing: dict[frozenset[str], list[int]] = {}
    most: list[int] = []
    for i, candidates in enumerate(found.candidates):
        arcs = {c.group: c.pods_per_node for c in candidates if c.pods_per_node > 0}
        most.append(max(arcs.values(), default=1))
        sharing.setdefault(frozenset(arcs), []).append(i)
    sets = list(demand.pod_sets)
    for hosts, members in sharing.items():
        nodes = sum(groups[g].max_size for g in hosts) // len(members)
        for i in members:
            sets[i] = dataclasses.replace(sets[i], count=max(1, nodes * most[i]))
    return dataclasses.replace(demand, pod_sets=tuple(sets))


def refusal(provider: Provider, runs: int) -> None:
    template_ = template("workers", {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                         "nvidia-h100-80gb", 0)
    view, sizes = provider.ledger.view(), provider.fleet.occupied()

    def once(cpu: str) -> float:
        t = dict(template_)
        t["template"] = {"spec": {**template_["template"]["spec"], "containers": [
            {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": "64Gi",
                                                        "nvidia.com/gpu": "1"}}}]}}
        start = time.perf_counter()
        demand, _ = demand_from(request({"workers": MAX_COUNT}), {"workers": t})
        result = plan(demand, view, provider.matcher, sizes)
        took = time.perf_counter() - start
        assert isinstance(result, Infeasible) and "can never fit" in result.summary()
        return took

    print(f"\n1. refusing a request of {MAX_COUNT:,} pods (parse + the planner's front door),"
          f" {runs} runs")
    print(f"   {'gang layout':<38} {'median ms':>10} {'p99 ms':>8}  aim < 10 ms")
    asks: list[tuple[str, Callable[[int], str]]] = [
        ("known (the same ask again)", lambda i: "8"),
        ("new every run (a walk of the groups)", lambda i: f"{8000 + i}m")]
    for label, cpu in asks:
        samples = [once(cpu(i)) for i in range(runs)]
        p50, p99 = percentiles(samples)
        print(f"   {label:<38} {p50:10.2f} {p99:8.2f}  {p99 / 10:.2f}x of aim")


CLIENT = """
import json, sys, time
import grpc
from provider.wire import externalgrpc_pb2 as pb, externalgrpc_pb2_grpc as pb_grpc
address, group, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
stub = pb_grpc.CloudProviderStub(grpc.insecure_channel(address))
stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=group), timeout=30)
samples = []
for _ in range(calls):
    start = time.perf_counter()
    stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=group, delta=1), timeout=30)
    samples.append(time.perf_counter() - start)
    time.sleep(0.005)
print(json.dumps(samples))
"""


def increase_size(address: str, calls: int) -> list[float]:
    """CA's client in a child process (its own GIL), timing IncreaseSize calls."""
    out = subprocess.run([sys.executable, "-c", CLIENT, address, CA_GROUP, str(calls)],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    samples: list[float] = json.loads(out.stdout)
    return samples


@contextmanager
def planning(provider: Provider, planner: Planner, gate: AbstractContextManager[object] | None,
             asks: list[Demand], planned: list[float]) -> Iterator[None]:
    """LOADS threads planning worst-case requests over and over, as attempts do, each the
    next of ``asks`` (built beforehand: a service parses a request once, not per plan)."""
    stop = threading.Event()
    taken = iter(range(10**9))
    lock = threading.Lock()

    def loop(n: int) -> None:
        while not stop.is_set():
            with lock:
                k = next(taken)
            demand = asks[k % len(asks)]
            attempt = f"bench-{n}-{k}"

            def build(view: Any, d: Demand = demand) -> Plan | Infeasible:
                return planner.plan(d, view, provider.fleet.occupied())

            start = time.perf_counter()
            provider.ledger.plan(attempt, build, planning=gate)
            planned.append(time.perf_counter() - start)
            provider.ledger.release(attempt)

    threads = [threading.Thread(target=loop, args=(n,), daemon=True) for n in range(LOADS)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


def ca_latency(provider: Provider, address: str, calls: int) -> None:
    print(f"\n2. CA's IncreaseSize({CA_GROUP}, 1) over gRPC on 127.0.0.1, {calls} calls; "
          f"{LOADS} worst-case requests planned meanwhile")
    print(f"   {'load':<40} {'p50 ms':>7} {'p99 ms':>7} {'p99 ratio':>10} "
          f"{'plans':>6} {'plan p50 s':>10}  aim p99 < 20 ms")
    base: float | None = None
    here = InProcess(provider.matcher)
    phases: list[tuple[str, Planner | None, AbstractContextManager[object] | None]] = [
        ("none", None, None),
        (f"{LOADS} planned in the planning process", provider.planner, provider.gangs.planning),
        (f"{LOADS} planned in-process, one at a time", here, provider.gangs.planning),
        (f"{LOADS} planned in-process, all at once", here, None),
    ]
    for phase, (label, planner, gate) in enumerate(phases):
        planned: list[float] = []
        if planner is None:
            samples = increase_size(address, calls)
        else:
            # New asks for every phase: no layout or match of an earlier one is reused.
            asks = [worst_case(provider, phase * ASKS + k) for k in range(ASKS)]
            with planning(provider, planner, gate, asks, planned):
                samples = increase_size(address, calls)
        p50, p99 = percentiles(samples)
        base = p99 if base is None else base
        plans = f"{len(planned):6d}" if planner else f"{'-':>6}"
        per_plan = f"{sorted(planned)[len(planned) // 2]:10.2f}" if planned else f"{'-':>10}"
        print(f"   {label:<40} {p50:7.2f} {p99:7.2f} {p99 / base:9.1f}x {plans} {per_plan}"
              f"  {p99 / 20:.2f}x of aim")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--groups", type=int, default=200)
    args = parser.parse_args()
    print(heading("bench.plan_limits"))
    config = load_config_text(fleet_config(args.groups), "bench.yaml")
    clock = SystemClock()
    planner = PlanProcess(config.groups, config.schema.gpu_label)  # as `allset serve` has
    provider = Provider(config, create_adapter(config, clock), clock, planner=planner)
    server = Server(provider, "127.0.0.1:0", None)
    server.start()
    favour_ca_latency()  # as `allset serve` does once started
    try:
        while not provider.acting():
            time.sleep(0.05)
        print(f"fleet: {args.groups} node groups in {len(ZONES)} zones (each its own price, "
              f"maxSize 8-16), {CA_GROUP} for CA's calls")
        refusal(provider, args.runs)
        ca_latency(provider, server.address, args.calls)
    finally:
        server.stop(grace=1.0)
        planner.close()


if __name__ == "__main__":
    main()
