"""Hostile tenants beside ordinary ones (issue 51): no request can stall allset.

    python -m bench.hostile [--runs 5] [--ordinary 12] [--calls 600] [--hostile 8]

1. The time from a request with a hostile DRA selector (or number) to its typed refusal,
   in the serving process as the controller does it: the request parsed with its DRA
   objects (`demand_from`), then the planner's front door's refusal (`never_fits`, which
   evaluates its selectors on every kind of device of the fleet). Each run's selector is
   new (a constant changed), so no verdict of an earlier run is reused. Aim: under 1 s.
   Beside them, the slowest selectors found within every bound, which are answered (not
   refused): the time to their answer.
2. The whole service as `allset serve` runs it, in three processes: allset (the gRPC server
   on 127.0.0.1, the ProvisioningRequest controller with its real client, plans and
   judging in their child processes), the cluster (the project's fake Kubernetes API, a
   "kubelet" thread registering a Ready Node for each running instance of the simulated
   cloud, which the two share through its file, and the tenants), and CA's client calling
   IncreaseSize. An ordinary request (one 8-GPU node) is created, timed to Provisioned,
   deleted, --ordinary times in a row, while CA's client makes --calls calls: first alone;
   then beside --hostile hostile requests made once (refused, left standing); made again
   as each is refused (their tenants insist); and, for comparison, as many requests made
   again that are invalid without any selector (an unknown topology). Aim: IncreaseSize
   p99 and the ordinary request's time to Provisioned within 1.2x of the run alone.

Prints the machine, the load, figures and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from bench.common import ROOT, heading, percentiles
from bench.plan_limits import CA_GROUP, increase_size
from provider.app import Provider
from provider.attempts.planning import PlanProcess
from provider.base.clock import SystemClock
from provider.cli.serve import favour_ca_latency
from provider.config import load_config_text
from provider.controller import conditions as c
from provider.controller.controller import Controller
from provider.controller.kube import KubeApi
from provider.domain.cloud import InstanceState
from provider.domain.devices.from_api import DocumentObjects
from provider.domain.plan import Infeasible
from provider.domain.provreq import BadRequest, demand_from
from provider.planner.limits import never_fits
from provider.service.server import Server
from tests.fakes.kube import FakeKube, objects

NS = "ml"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
DRIVER = "gpu.nvidia.com"
CLASS = f'device.driver == "{DRIVER}"'
MEMORY = f'device.capacity["{DRIVER}"].memory'


def config() -> str:
    groups = [f"""  - id: {gpu}-{i}
    zone: {zone}
    instanceType: {itype}
    gpu: {{type: {gpu}, count: 8}}
    cpu: 191
    memory: 1900Gi
    maxSize: 400
    taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]
    price: {{onDemand: {price}}}""" for i, zone in enumerate(ZONES)
              for gpu, itype, price in (("nvidia-h100-80gb", "p5.48xlarge", 98.32),
                                        ("nvidia-a100-40gb", "p4d.24xlarge", 32.77))]
    ca = f"""  - id: {CA_GROUP}
    zone: {ZONES[0]}
    instanceType: m7i.large
    cpu: 2
    memory: 8Gi
    maxSize: 100000
    taints: [{{key: ca, value: only, effect: NoSchedule}}]
    price: {{onDemand: 0.1}}"""
    return ("cluster: bench\ncloud:\n  provider: fake\nnodeGroups:\n" + "\n".join(groups)
            + "\n" + ca + "\nprovisioningRequests: {workers: 16, resync: 5s}\n")


def ones(n: int) -> str:
    return "[" + ",".join(["1"] * n) + "]"


FORTY = "[" + ",".join(str(i) for i in range(1, 41)) + "]"
# Each takes a number k that makes it new. The first is the review's 411-byte selector.
HOSTILE: dict[str, Callable[[int], str]] = {
    "411-byte nested .all() (over allset's estimate)": lambda k: (
        f"{FORTY}.all(x, {FORTY}.all(y, {FORTY}.all(z, x*y + z > {k} && {CLASS})))"),
    "at the estimate's bound, runs out of its steps": lambda k: (
        f"{ones(10)}.all(x, {ones(180)}.size() > {k})"),
    "quantity() per element, over the request's steps": lambda k: (
        f"{ones(10)}.all(x, {ones(80)}.size() > {k} && "
        f'{MEMORY}.compareTo(quantity("80Gi")) >= 0)'),
    "string functions per element, over the request's steps": lambda k: (
        f"{ones(9)}.all(x, {ones(90)}.size() > {k} && "
        f'device.attributes["{DRIVER}"].productName.lowerAscii().startsWith("nvidia"))'),
}
# Within every bound: evaluated whole and answered, the slowest shapes found (each on the
# 16 kinds of device of the fleet: 8 GPUs of 2 models, which differ in their index).
ANSWERED: dict[str, Callable[[int], str]] = {
    "quantity() over 15 elements, on 16 kinds of device": lambda k: (
        f'[{",".join(str(i) for i in range(k, k + 15))}].all(x, '
        f'{MEMORY}.compareTo(quantity("80Gi")) >= 0)'),
    "literal of 40 elements, on 16 kinds of device": lambda k: (
        f'[{",".join(str(i) for i in range(k, k + 40))}].exists(x, x == 1)'),
}
ODD_NUMBERS = {"bookingDurationSeconds '\u00b2'": {"bookingDurationSeconds": "\u00b2"},
               "bookingDurationSeconds 255 nines": {"bookingDurationSeconds": "9" * 255},
               "maxWaitSeconds a week and a second": {"maxWaitSeconds": "604801"}}


def workers_template(claim: bool = False) -> dict[str, Any]:
    template = objects.pod_template(NS, "workers", {"cpu": "96", "memory": "64Gi", **(
        {} if claim else {"nvidia.com/gpu": "8"})})
    spec = template["template"]["spec"]
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    if claim:
        template["metadata"]["name"] = "claiming"
        spec["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "gpus"}]
    return template


def dra_request(selector: str) -> tuple[dict[str, Any], dict[str, Any], DocumentObjects]:
    template = workers_template(claim=True)
    docs = [objects.resource_claim_template(NS, "gpus", objects.device_request(
                "g", DRIVER, selector, count=8)),
            objects.device_class(DRIVER, CLASS)]
    return (objects.provisioning_request(NS, "job", {"claiming": 1}),
            {"claiming": template}, DocumentObjects(docs))


def answer_time(provider: Provider, request: dict[str, Any], templates: dict[str, Any],
                dra: DocumentObjects) -> tuple[float, str]:
    """Seconds from the request to the answer of the planner's front door, and what."""
    start = time.perf_counter()
    try:
        demand, _ = demand_from(request, templates, dra)
    except BadRequest:
        return time.perf_counter() - start, "InvalidRequest (when read)"
    refused = never_fits(demand, provider.matcher)
    took = time.perf_counter() - start
    if isinstance(refused, Infeasible):
        return took, f"{refused.primary.code} (before planning)"
    return took, "answered: planned next"


def refusals(provider: Provider, runs: int) -> None:
    print(f"\n1. from a hostile request to its typed refusal, in-process, {runs} runs each "
          "(a new selector every run)")
    print(f"   {'request':<54} {'median s':>8} {'max s':>7}  answer (aim < 1 s)")
    counter = itertools.count(1)

    def selector(make: Callable[[int], str]) -> tuple[float, str]:
        return answer_time(provider, *dra_request(make(next(counter))))

    def numbers(params: dict[str, str]) -> tuple[float, str]:
        request = objects.provisioning_request(NS, "job", {"workers": 1}, parameters=params)
        return answer_time(provider, request, {"workers": workers_template()},
                           DocumentObjects([]))

    rows: list[tuple[str, Callable[[], tuple[float, str]]]] = [
        *((label, functools.partial(selector, make))
          for label, make in {**HOSTILE, **ANSWERED}.items()),
        *((label, functools.partial(numbers, params)) for label, params in ODD_NUMBERS.items())]
    for label, run in rows:
        samples = [run() for _ in range(runs)]
        times = [t for t, _ in samples]
        print(f"   {label:<54} {statistics.median(times):8.3f} {max(times):7.3f}  "
              f"{samples[-1][1]}")


class Hostiles:
    """``count`` hostile requests kept open: one Failed is deleted and made again, new."""

    def __init__(self, kube: FakeKube, api: client.ApiClient, count: int, mode: str,
                 prefix: str) -> None:
        self._kube, self._count, self._prefix = kube, count, prefix
        # "once": made and refused, left standing; "churn": each one refused is made again;
        # "benign": churned too, but each is invalid without a selector or a number (an
        # unknown topology): the cost of any tenant's churn.
        self._mode = mode
        self._custom = client.CustomObjectsApi(api)
        self._made = itertools.count(1)
        self._stop = threading.Event()
        self.created = 0
        self._thread = threading.Thread(target=self._run, name="hostiles", daemon=True)

    def start(self) -> None:
        for slot in range(self._count):
            self._create(slot)
        if self._mode != "once":
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _create(self, slot: int) -> None:
        k = next(self._made)
        name = f"{self._prefix}{slot}"
        kinds = list(HOSTILE.values())
        if self._mode == "benign":
            body = objects.provisioning_request(NS, name, {"workers": 1},
                                                parameters={"topology": "rack"})
        elif slot % 4 == 3:  # a quarter of them odd or huge numbers
            params = list(ODD_NUMBERS.values())[k % len(ODD_NUMBERS)]
            body = objects.provisioning_request(NS, name, {"workers": 1}, parameters=params)
        else:
            claim = f"gpus-{name}"
            if self._kube.get("resourceclaimtemplates", claim, NS) is not None:
                self._kube.delete("resourceclaimtemplates", claim, NS)
            self._kube.create(objects.resource_claim_template(NS, claim, objects.device_request(
                "g", DRIVER, kinds[k % len(kinds)](k), count=8)))
            template = workers_template(claim=True)
            template["metadata"]["name"] = name
            template["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = claim
            if self._kube.get("podtemplates", name, NS) is not None:
                self._kube.delete("podtemplates", name, NS)
            self._kube.create(template)
            body = objects.provisioning_request(NS, name, {name: 1})
        self._custom.create_namespaced_custom_object("autoscaling.x-k8s.io", "v1", NS,
                                                     "provisioningrequests", body)
        self.created += 1

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for slot in range(self._count):
                obj = self._kube.get("provisioningrequests", f"{self._prefix}{slot}", NS)
                if obj is None:
                    self._create(slot)
                    continue
                conds = c.read((obj.get("status") or {}).get("conditions"))
                failed = conds.get(c.FAILED)
                if failed is not None and failed.true and \
                        not obj["metadata"].get("deletionTimestamp"):
                    self._kube.delete("provisioningrequests", f"{self._prefix}{slot}", NS)


def join(kube: FakeKube, cloud: FakeCloud, stop: threading.Event) -> None:
    """Kubelets joining: a Ready Node for each running instance of the simulated cloud
    (shared with allset's process through its file), at once."""
    joined: set[str] = set()
    while not stop.wait(0.05):
        for inst in cloud.live_instances():
            if inst.state is InstanceState.RUNNING and inst.name not in joined:
                kube.create(objects.node(inst.name, provider_id=inst.provider_id))
                joined.add(inst.name)


def provisioned_in(kube: FakeKube, custom: client.CustomObjectsApi, name: str) -> float:
    start = time.perf_counter()
    custom.create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", NS, "provisioningrequests",
        objects.provisioning_request(NS, name, {"workers": 1}))
    while True:
        obj = kube.get("provisioningrequests", name, NS)
        conds = c.read(((obj or {}).get("status") or {}).get("conditions"))
        if conds.get(c.PROVISIONED) is not None and conds[c.PROVISIONED].true:
            took = time.perf_counter() - start
            break
        if time.perf_counter() - start > 120:
            raise SystemExit(f"{name} not Provisioned within 120 s: {obj}; nodes "
                             f"{[n['metadata']['name'] for n in kube.list('nodes')]}")
        time.sleep(0.01)
    kube.delete("provisioningrequests", name, NS)
    return took


def tenants(config_path: str) -> None:
    """The cluster's side, in a process of its own (as the API server and the tenants are
    not allset's): the fake API server, kubelets, the hostile and the ordinary tenants.
    Prints the server's URL, then per "phase LABEL HOSTILE ORDINARY" line read, the
    ordinary requests' times to Provisioned as a JSON line."""
    with FakeKube() as kube, kube.client() as api:
        kube.create(workers_template())
        kube.create(objects.device_class(DRIVER, CLASS))
        stop = threading.Event()
        cfg = load_config_text(Path(config_path).read_text(), config_path)
        cloud = create_adapter(cfg, SystemClock())
        assert isinstance(cloud, FakeCloud)
        threading.Thread(target=join, args=(kube, cloud, stop), daemon=True).start()
        print(kube.url, flush=True)
        custom = client.CustomObjectsApi(api)
        for line in sys.stdin:
            _, label, hostile, ordinary, mode = line.split()
            kube.wait_for_watchers(1)
            hostiles = Hostiles(kube, api, int(hostile), mode, f"{label}-h") \
                if int(hostile) else None
            if hostiles is not None:
                hostiles.start()
                time.sleep(1.0)  # they are being refused when the measuring starts
            times = [provisioned_in(kube, custom, f"{label}-{i}")
                     for i in range(int(ordinary))]
            if hostiles is not None:
                hostiles.stop()
            print(json.dumps({"times": times, "hostile": hostiles.created if hostiles
                              else 0}), flush=True)
        stop.set()


def service(hostile: int, ordinary: int, calls: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    cloud_db = str(workdir / "cloud.db")
    text = config().replace("  provider: fake\n",
                            f"  provider: fake\n  fake: {{statePath: {cloud_db}, shared: true}}\n")
    config_path = workdir / "allset.yaml"
    config_path.write_text(text)
    cfg = load_config_text(text, str(config_path))
    clock = SystemClock()
    cloud = create_adapter(cfg, clock)
    planner = PlanProcess(cfg.groups, cfg.schema.gpu_label)  # as `allset serve` has it
    provider = Provider(cfg, cloud, clock, planner=planner)
    server = Server(provider, "127.0.0.1:0", None)
    server.start()
    favour_ca_latency()
    cluster = subprocess.Popen([sys.executable, "-m", "bench.hostile", "--tenants",
                                str(config_path)],
                               cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    assert cluster.stdin is not None and cluster.stdout is not None
    print(f"\n2. the whole service (allset, the API server with the tenants, and CA: three "
          f"processes): IncreaseSize({CA_GROUP}, 1) over gRPC, {calls} calls, and an "
          f"ordinary request (one 8-GPU node) to Provisioned, {ordinary} in a row")
    print(f"   {'beside':<34} {'CA p50 ms':>9} {'CA p99 ms':>9} {'ratio':>6} "
          f"{'Provisioned s':>13} {'max s':>6} {'ratio':>6} {'hostile made':>12}")
    try:
        while not provider.acting():
            time.sleep(0.05)
        url = cluster.stdout.readline().strip()
        with client.ApiClient(client.Configuration(host=url)) as api:
            controller = Controller(provider, KubeApi(api), workers=16, resync_seconds=5.0)
            controller.start()
            base: tuple[float, float] | None = None
            phases = (("nothing", 0, "none"),
                      (f"{hostile} hostile, made once", hostile, "once"),
                      (f"{hostile} hostile, made again", hostile, "churn"),
                      (f"{hostile} invalid, made again", hostile, "benign"))
            for n, (label, count, mode) in enumerate(phases):
                samples: list[float] = []
                ca = threading.Thread(target=lambda into=samples: into.extend(
                    increase_size(server.address, calls)))
                cluster.stdin.write(f"phase ord{n} {count} {ordinary} {mode}\n")
                cluster.stdin.flush()
                ca.start()
                found = json.loads(cluster.stdout.readline())
                ca.join()
                p50, p99 = percentiles(samples)
                median, most = statistics.median(found["times"]), max(found["times"])
                base = base or (p99, median)
                print(f"   {label:<34} {p50:9.2f} {p99:9.2f} {p99 / base[0]:5.2f}x "
                      f"{median:13.3f} {most:6.3f} {median / base[1]:5.2f}x "
                      f"{found['hostile']:12d}")
            controller.stop()
    finally:
        cluster.stdin.close()
        cluster.wait(30)
        server.stop(grace=1.0)
        planner.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ordinary", type=int, default=12)
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--hostile", type=int, default=8)
    parser.add_argument("--tenants", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tenants:
        tenants(args.tenants)
        return
    print(heading("bench.hostile"))
    cfg = load_config_text(config(), "<bench>")
    clock = SystemClock()
    provider = Provider(cfg, create_adapter(cfg, clock), clock)
    refusals(provider, args.runs)
    service(args.hostile, args.ordinary, args.calls)


if __name__ == "__main__":
    main()
