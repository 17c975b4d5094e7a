"""ProvisioningRequests at scale: 100 requests of 8 nodes each, created at once, served by
the controller (real client, our fake Kubernetes API on 127.0.0.1) on the simulated cloud
with zero launch latency; a "kubelet" thread registers a Ready Node for each running
instance as soon as it sees it (a request is Provisioned once its Nodes are registered,
Ready and labelled). Prints the time until every request is terminal and checks that no
reservation slot was promised twice. Aim: under 10 s.

    python -m bench.provreq [--requests 100] [--nodes 8] [--workers 16] [--steady 60]

Then, with every request Provisioned and booked, it counts the API requests the controller
makes in ``--steady`` seconds of nothing happening (aim: no more than 10 a minute,
whatever the number of requests and nodes).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter

from kubernetes import client

from adapters.fake import FakeCloud
from adapters.registry import create_adapter
from bench.common import machine
from provider.app import Provider
from provider.base.clock import SystemClock
from provider.config import load_config_text
from provider.controller import conditions as c
from provider.controller.controller import Controller
from provider.controller.kube import KubeApi
from provider.domain.cloud import InstanceState
from tests.fakes.kube import FakeKube, objects

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]


def config(workers: int) -> str:
    groups, reservations = [], []
    for i, zone in enumerate(ZONES):
        reservations.append(f"      - {{id: r{i}, zone: {zone}, instanceType: p5.48xlarge, "
                            f"count: 40}}")
        groups.append(f"""  - id: h100-{i}
    zone: {zone}
    instanceType: p5.48xlarge
    gpu: {{type: nvidia-h100-80gb, count: 8}}
    cpu: 191
    memory: 1900Gi
    maxSize: 400
    price: {{onDemand: 98.32}}""")
    return ("cluster: bench\ncloud:\n  provider: fake\n  fake:\n    reservations:\n"
            + "\n".join(reservations) + "\nnodeGroups:\n" + "\n".join(groups)
            + f"\nprovisioningRequests: {{workers: {workers}, resync: 1s}}\n")


def join(kube: FakeKube, cloud: FakeCloud, stop: threading.Event) -> None:
    """Kubelets joining: a Ready Node for each running instance, at once."""
    joined: set[str] = set()
    while not stop.wait(0.1):
        for inst in cloud.live_instances():
            if inst.state is InstanceState.RUNNING and inst.name not in joined:
                kube.create(objects.node(inst.name, provider_id=inst.provider_id))
                joined.add(inst.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--steady", type=float, default=60.0,
                        help="seconds of steady state to count API requests in")
    parser.add_argument("--resync", type=float, default=30.0,
                        help="the controller's resync period (config default 30s)")
    args = parser.parse_args()
    cfg = load_config_text(config(args.workers), "<bench>")
    clock = SystemClock()
    cloud = create_adapter(cfg, clock)
    assert isinstance(cloud, FakeCloud)
    provider = Provider(cfg, cloud, clock)
    provider.start()
    with FakeKube() as kube, kube.client() as api:
        template = objects.pod_template("ml", "workers", {"nvidia.com/gpu": "8", "cpu": "96"})
        template["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
        kube.create(template)
        controller = Controller(provider, KubeApi(api), workers=args.workers,
                                resync_seconds=args.resync)
        controller.start()
        kube.wait_for_watchers(1)
        stop = threading.Event()
        kubelets = threading.Thread(target=join, args=(kube, cloud, stop), daemon=True)
        kubelets.start()
        custom = client.CustomObjectsApi(api)
        start = time.perf_counter()
        for i in range(args.requests):
            custom.create_namespaced_custom_object(
                "autoscaling.x-k8s.io", "v1", "ml", "provisioningrequests",
                objects.provisioning_request("ml", f"job-{i:03d}", {"workers": args.nodes}))

        def terminal() -> tuple[int, int]:
            done = failed = 0
            for obj in kube.list("provisioningrequests", "ml"):
                conds = c.read((obj.get("status") or {}).get("conditions"))
                if conds.get(c.PROVISIONED) is not None and conds[c.PROVISIONED].true:
                    done += 1
                elif conds.get(c.FAILED) is not None and conds[c.FAILED].true:
                    failed += 1
            return done, failed

        while sum(terminal()) < args.requests:
            if time.perf_counter() - start > 300:
                raise SystemExit("not every request became terminal within 300 s")
            time.sleep(0.05)
        elapsed = time.perf_counter() - start
        done, failed = terminal()
        settle = time.perf_counter()
        while True:  # the last Node labels and status writes land
            kube.reset_counts()
            time.sleep(3.0)
            if not sum(kube.requests.values()) or time.perf_counter() - settle > 120:
                break
        settled = time.perf_counter() - settle
        kube.reset_counts()
        time.sleep(args.steady)
        steady = Counter(kube.requests)
        stop.set()
        kubelets.join()
        controller.stop()
    provider.stop()

    live = [i for i in cloud.all_instances() if i.state is not InstanceState.TERMINATED]
    per_reservation = Counter(i.tags.reservation for i in live if i.tags.reservation)
    per_request = Counter(i.tags.request for i in live)
    over = {r: n for r, n in per_reservation.items() if n > 40}
    print(f"ProvisioningRequests: {args.requests} requests x {args.nodes} nodes, "
          f"{args.workers} workers, zero launch latency ({machine()})")
    print(f"  all terminal after {elapsed:.2f} s ({done} provisioned, {failed} failed) "
          f"-> {elapsed / 10:.2f}x of the 10 s aim")
    print(f"  nodes: {len(live)} ({sum(per_reservation.values())} from 4 reservations of 40 "
          f"slots, {len(live) - sum(per_reservation.values())} on demand)")
    print(f"  reservation slots used: {dict(sorted(per_reservation.items()))}; "
          f"over-booked: {over or 'none'}")
    wrong = {r: n for r, n in per_request.items() if n != args.nodes}
    print(f"  requests with other than {args.nodes} nodes: {wrong or 'none'}")
    per_minute = sum(steady.values()) * 60 / args.steady
    by_verb = ", ".join(f"{verb} {resource}: {n}" for (verb, resource), n in
                        sorted(steady.items())) or "none"
    print(f"  writes after the last Provisioned (Node labels, statuses) ended within "
          f"{settled:.1f} s")
    print(f"  steady state ({args.steady:.0f} s, resync {args.resync:g} s, every request "
          f"booked): {per_minute:.1f} API requests/min ({by_verb}); aim <= 10/min "
          f"-> {per_minute / 10:.2f}x")


if __name__ == "__main__":
    main()
