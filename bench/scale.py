"""allset's ProvisioningRequest controller at cluster scale, on the real control plane of
the e2e suite (etcd, kube-apiserver and kwok from scripts/build-kube; see docs/e2e.md).

5,000 Nodes over 1,000 node groups (seeded instances of the simulated cloud, each
registered as a kwok Node), then 1,000 ProvisioningRequests of 2-16 nodes created at once
on the simulated cloud with zero launch latency. Prints the time until all are
Provisioned, the API requests of that phase by verb and resource, allset's peak RSS and
CPU seconds, and the API requests of a minute of nothing happening afterwards.

    python -m bench.scale [--nodes 5000] [--groups 1000] [--requests 1000] [--steady 300]
                          [--replicas 2]

Two replicas by default, as deploy/ runs them: the leader and a standby that follows the
Lease and keeps its caches warm. Each names its pod in its User-Agent, so the audit log
tells their requests apart; the steady state counts both.

Aims (issue 18): all Provisioned within 60 s; steady state <= 10 API requests a minute;
RSS <= 500 MiB at 5,000 nodes.

Where the counts come from: the API server's own `apiserver_request_total` (GET /metrics,
before and after) has no label for the client, so its diff counts every client: kwok's
node heartbeats and this bench's own node registrations and polling included. allset's own
requests are counted from the API server's audit log, with a policy that records only
allset's user (the ServiceAccount deploy/ binds; allset runs with only deploy's RBAC),
once per request (stage RequestReceived).

Nodes are registered by this bench, not by tests/e2e/kubelet.py's thread: that stand-in
lists every Node and posts new ones one at a time every 0.5 s, which at 14,000 Nodes
would be what the time measures. The bench builds the same Node objects (its `node_for`)
and posts them from a pool of threads as soon as the simulated cloud's store shows the
instance running, like a fleet of kubelets booting at once. kwok makes them Ready (and
sends their heartbeats). kube-scheduler, kube-controller-manager and Kueue are not started:
no pod is created, and they would only share the two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import urllib3
import yaml

from adapters.fake.store import FakeStore
from bench.ca_loop import cpu_seconds, write_fleet
from bench.common import machine, peak_rss_mb
from bench.scale_stages import Audited, allset_delays, milestones, read_audit, render
from provider.config.load import load_config
from provider.controller import conditions as c
from provider.domain.cloud import InstanceState
from tests.e2e.allset import Allset
from tests.e2e.cluster import ControlPlane, Parts
from tests.e2e.conftest import ALLSET_USER, rbac_documents
from tests.e2e.kubelet import node_for
from tests.e2e.rest import ApiError, Rest, wait_for

NAMESPACE = "ml"
REQUESTS = "/apis/autoscaling.x-k8s.io/v1/namespaces/ml/provisioningrequests"
CLASS = "atomic-reserved.allset.dev"
KWOK_USER = "e2e-kwok"  # ControlPlane._component_kubeconfig's user for kwok
KWOK_NODE_WORKERS = 64
LEADER, STANDBY = "allset-0", "allset-1"  # the replicas' POD_NAME, in their User-Agent
METRIC = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')
LABEL = re.compile(r'(\w+)="([^"]*)"')


class Plane(ControlPlane):
    """The e2e control plane with an audit log of allset's own requests."""

    def _proc(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Any:
        if name == "kube-apiserver":
            policy = self.dir / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump({
                "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
                "rules": [
                    {"level": "Metadata", "users": [ALLSET_USER]},
                    # kwok's Node status writes: when each Node turned Ready (scale_stages)
                    {"level": "Metadata", "users": [KWOK_USER], "verbs": ["patch", "update"],
                     "resources": [{"group": "", "resources": ["nodes/status"]}]},
                    {"level": "None"}],
            }))
            argv = [*argv, f"--audit-policy-file={policy}",
                    f"--audit-log-path={self.audit_log}", "--audit-log-maxsize=0"]
        if name == "kwok":
            # kwok plays each Node's stages with 4 workers by default, so 9,000 Nodes
            # registering at once turned Ready one after another (the first run's stages:
            # Ready 110 s after registration at the median, and Provisioned with it). A
            # kubelet reports its own Node; 64 workers are closer to 9,000 kubelets.
            # KwokConfiguration's options (sigs.k8s.io/kwok pkg/apis/config/v1alpha1).
            stages = Path(next(a for a in argv if a.startswith("--config="))
                          .split("=", 1)[1])
            stages.write_text(stages.read_text() + "\n---\n" + yaml.safe_dump({
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
                # A configuration read from a file is not defaulted: kwok's defaults
                # (zz_generated.defaults.go) are spelled out, the Node workers aside.
                "options": {"cidr": "10.0.0.1/24", "enableDebuggingHandlers": True,
                            "enableContentionProfiling": False,
                            "enableProfilingHandler": True, "podPlayStageParallelism": 4,
                            "nodePlayStageParallelism": KWOK_NODE_WORKERS,
                            "nodeLeaseParallelism": 4, "podsOnNodeSyncParallelism": 1,
                            "enablePodsOnNodeSyncListPager": True,
                            "enablePodsOnNodeSyncStreamWatch": False}}))
        return super()._proc(name, argv, env)

    @property
    def audit_log(self) -> Path:
        return self.dir / "audit.log"

    def start_bench(self) -> None:
        self.start_etcd()
        self.start_apiserver()
        self.apply_crds()
        self.start_kwok()

    def crd_documents(self) -> list[dict[str, Any]]:
        """Only the ProvisioningRequest CRD: Kueue does not run here."""
        docs: list[dict[str, Any]] = []
        for path in sorted(self.parts.provreq_crds.rglob("*.yaml")):
            docs += [d for d in yaml.safe_load_all(path.read_text())
                     if d and d.get("kind") == "CustomResourceDefinition"]
        return docs

    def metrics(self) -> Counter[tuple[str, str]]:
        """apiserver_request_total by (verb, resource[/subresource]), every client."""
        http = urllib3.PoolManager(ca_certs=str(self.pki.ca), cert_file=str(self.admin.cert),
                                   key_file=str(self.admin.key), cert_reqs="CERT_REQUIRED")
        text = http.request("GET", f"{self.server}/metrics").data.decode()
        out: Counter[tuple[str, str]] = Counter()
        for line in text.splitlines():
            found = METRIC.match(line)
            if found is None:
                continue
            labels = dict(LABEL.findall(found["labels"]))
            resource = labels.get("resource", "") + (
                f"/{labels['subresource']}" if labels.get("subresource") else "")
            out[(labels.get("verb", ""), resource)] += int(float(found["value"]))
        return out


class Audit:
    """allset's requests from the audit log: counts by (verb, resource) past an offset."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def mark(self) -> int:
        return self._path.stat().st_size if self._path.exists() else 0

    def audited(self, offset: int, end: int) -> list[Audited]:
        with self._path.open("rb") as handle:
            handle.seek(offset)
            return read_audit(handle.read(end - offset).splitlines())

    def since(self, offset: int, replica: str | None = None, end: int | None = None
              ) -> Counter[tuple[str, str]]:
        """allset's requests past ``offset`` (up to ``end``, a mark); one replica's only
        when ``replica`` names its pod (allset's User-Agent carries it:
        provider/cli/serve.kube_client)."""
        out: Counter[tuple[str, str]] = Counter()
        if not self._path.exists():
            return out
        with self._path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(-1 if end is None else max(0, end - offset))
            for line in data.splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line still being written
                if (event.get("user") or {}).get("username") != ALLSET_USER:
                    continue
                if replica is not None and f"({replica})" not in event.get("userAgent", ""):
                    continue
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", event.get("requestURI", "?")) + (
                    f"/{ref['subresource']}" if ref.get("subresource") else "")
                out[(event.get("verb", "?"), resource)] += 1
        return out


class Registrar:
    """Kubelets: a Node for every running instance of the simulated cloud, posted from a
    pool of threads as soon as the store shows it (tests/e2e/kubelet.py's Node objects)."""

    def __init__(self, plane: Plane, allset: Allset, threads: int = 32) -> None:
        loaded = allset.config()
        self._rest = plane.rest
        self._state = allset.state
        self._groups = {g.id: g for g in loaded.groups}
        self._gpu_label = loaded.schema.gpu_label
        self._store = FakeStore(self._state)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="kubelet")
        self._posted: set[str] = set()
        self.registered = 0
        self.registered_at: dict[str, float] = {}  # Node name -> epoch seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._pool.shutdown(wait=True)
        self._store.close()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.sync()

    def sync(self) -> int:
        # Only the ids every time, and in full only what is new: at 14,000 instances a
        # full load every 0.25 s was a fifth of the machine's CPU (bench time, not allset's).
        fresh = self._store.ids(InstanceState.RUNNING) - self._posted
        # In launch order, as machines boot: a gang is whole once its last Node is, so an
        # order that scattered each gang's Nodes would hold every gang back to the end.
        new = sorted((i for i in self._store.instances(fresh)
                      if i.state is InstanceState.RUNNING
                      and i.tags.node_group in self._groups),
                     key=lambda i: (i.launched_at, i.id))
        self._posted |= fresh  # another group's instance is never posted: not read again
        for inst in new:
            node = node_for(inst, self._groups[inst.tags.node_group], self._gpu_label)
            self._pool.submit(self._post, node)
        return len(new)

    def _post(self, node: dict[str, Any]) -> None:
        try:
            self._rest.call("POST", "/api/v1/nodes", node)
        except ApiError as err:
            if err.status != 409:
                print(f"  registering {node['metadata']['name']} failed: {err}")
                return
        with self._lock:
            self.registered += 1
            self.registered_at[node["metadata"]["name"]] = time.time()

    def wait_all(self, count: int, timeout: float) -> float:
        start = time.monotonic()
        wait_for(f"{count} Nodes registered", lambda: self.registered >= count, timeout)
        return time.monotonic() - start


def fleet_config(directory: Path, groups: int, nodes: int, workers: int,
                 leader_election: bool = True) -> Path:
    """bench/ca_loop's fleet (1,000 groups, 3 in 4 of them 8-GPU, maxSize 64, seeded
    committed instances) on a zero-latency simulated cloud, as the controller serves it;
    electing a leader on a Lease as a deployment of replicas does (the default timing)."""
    path = write_fleet(directory, groups, nodes)
    config = yaml.safe_load(path.read_text())
    config.pop("refreshInterval")  # the default, as an operator would run it
    config["cloud"]["fake"].update({"launchLatencySeconds": 0, "bootSeconds": 0})
    config["provisioningRequests"] = {"workers": workers}
    if leader_election:
        config["leaderElection"] = {"mode": "on", "namespace": "allset"}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def standby_config(seeded: Path, directory: Path) -> Path:
    """The leader's config for a standby replica, on its own copy of the seeded simulated
    cloud. Replicas share one cloud; the simulated one is shared between processes by
    reading its whole store on every call (fake.shared), which at 14,000 instances would be
    the simulation's cost in the leader's launches, not a standby's. A standby launches
    nothing, and what it asks the API server does not depend on its cloud's contents."""
    import sqlite3

    config = yaml.safe_load(seeded.read_text())
    state = directory / "cloud.db"
    with sqlite3.connect(config["cloud"]["fake"]["statePath"]) as source, \
            sqlite3.connect(state) as copy:
        source.backup(copy)
    config["cloud"]["fake"]["statePath"] = str(state)
    path = directory / "allset.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def request(name: str, pods: int) -> dict[str, Any]:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"provisioningClassName": CLASS,
                     "podSets": [{"podTemplateRef": {"name": "worker"}, "count": pods}]}}


class Cpu:
    """CPU seconds of each process of the run, to say where the wall time went: the control
    plane, kwok, allset and this bench (its registrar threads and polling) share the cores."""

    def __init__(self, plane: Plane, allset_pids: dict[str, int]) -> None:
        self._pids = {name: proc.popen.pid for name, proc in plane.procs.items()
                      if proc.popen is not None and proc.alive}
        self._pids.update(allset_pids)
        self.names = [*self._pids, "bench"]
        self._first = self._read()
        self._last = self._first

    def _read(self) -> list[float]:
        return [cpu_seconds(pid) for pid in self._pids.values()] + [time.process_time()]

    def since(self) -> list[float]:
        now = self._read()
        out = [b - a for a, b in zip(self._last, now, strict=True)]
        self._last = now
        return out

    def total(self) -> list[float]:
        return [b - a for a, b in zip(self._first, self._read(), strict=True)]


def state_of(request: dict[str, Any]) -> str:
    conds = c.read((request.get("status") or {}).get("conditions"))
    for name in (c.FAILED, c.PROVISIONED):
        if conds.get(name) is not None and conds[name].true:
            return name
    return "pending"


class Progress:
    """Each request's state, from a watch of the requests (the events since the last look)
    rather than a list of all of them every second: a list of 1,000 requests a second was
    API server and bench CPU that the measured time shared."""

    def __init__(self, rest: Rest) -> None:
        self._rest = rest
        self._state: dict[str, str] = {}
        self._version = self._list()

    def _list(self) -> str:
        listed = self._rest.call("GET", REQUESTS)
        self._state = {obj["metadata"]["name"]: state_of(obj) for obj in listed["items"]}
        return str(listed["metadata"]["resourceVersion"])

    def poll(self) -> Counter[str]:
        """Waits about a second for events (the server ends the watch)."""
        try:
            events = self._rest.watch_events(
                f"{REQUESTS}?resourceVersion={self._version}&allowWatchBookmarks=true", 1)
        except ApiError as err:
            if err.status != 410:
                raise
            events = [{"type": "ERROR"}]
        for event in events:
            if event["type"] == "ERROR":  # 410: the version is too old; list again
                self._version = self._list()
                break
            obj = event["object"]
            self._version = str(obj["metadata"]["resourceVersion"])
            name = obj["metadata"].get("name")
            if event["type"] == "DELETED":
                self._state.pop(name, None)
            elif event["type"] in ("ADDED", "MODIFIED"):
                self._state[name] = state_of(obj)
        return Counter(self._state.values())


def show(title: str, counts: Counter[tuple[str, str]], top: int = 12) -> None:
    total = sum(counts.values())
    print(f"  {title}: {total}")
    for (verb, resource), n in counts.most_common(top):
        print(f"    {verb:8} {resource:40} {n:7}")
    if len(counts) > top:
        print(f"    ... {len(counts) - top} more kinds")


def diff(after: Counter[tuple[str, str]], before: Counter[tuple[str, str]]
         ) -> Counter[tuple[str, str]]:
    return Counter({k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)})


def quiet(audit: Audit, seconds: float, limit: float) -> float:
    """Wait until allset has made no API request for ``seconds`` (at most ``limit``),
    its Lease renewals aside (a leader renews every retry period, whatever else it does)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        mark = audit.mark()
        time.sleep(seconds)
        if not [k for k in audit.since(mark) if k[1] != "leases"]:
            break
    return time.monotonic() - start


def parts() -> Parts:
    import subprocess
    import sys

    from tests.e2e.allset import ROOT

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build-kube"), "--check"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the e2e parts are not built (scripts/build-kube): {done.stderr}")
    return Parts.from_manifest(json.loads(done.stdout))


def run(args: argparse.Namespace, directory: Path) -> None:
    plane = Plane(parts(), directory)
    allset: Allset | None = None
    standby: Allset | None = None
    registrar: Registrar | None = None
    try:
        t0 = time.monotonic()
        plane.start_bench()
        rest = plane.rest
        for doc in rbac_documents():
            rest.apply(doc)
        rest.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        rest.create({"apiVersion": "v1", "kind": "PodTemplate",
                     "metadata": {"name": "worker", "namespace": NAMESPACE},
                     "template": {"spec": {
                         "tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "w", "image": "busybox", "resources": {
                             "requests": {"nvidia.com/gpu": "8", "cpu": "96"},
                             "limits": {"nvidia.com/gpu": "8"}}}]}}})
        print(f"control plane up in {time.monotonic() - t0:.1f} s")

        kubeconfig = plane.client_kubeconfig("allset", plane.server, ALLSET_USER)
        allset = Allset(directory / "allset", kubeconfig, env={"POD_NAME": LEADER})
        seeded = fleet_config(directory / "allset", args.groups, args.nodes, args.workers,
                              args.leader_election == "on")
        allset.config_path = seeded
        assert load_config(seeded).groups
        if args.replicas == 2:
            standby = Allset(directory / "allset-1", kubeconfig, env={"POD_NAME": STANDBY})
            standby.config_path = standby_config(seeded, standby.dir)
        registrar = Registrar(plane, allset)
        t0 = time.monotonic()
        registrar.sync()
        took = registrar.wait_all(args.nodes, 900)
        print(f"{args.nodes} Nodes registered in {took:.1f} s "
              f"({args.nodes / took:.0f}/s, 32 threads)")
        wait_for("kwok to make every Node Ready", lambda: ready_nodes(plane) >= args.nodes,
                 600, every=2)
        seeding = time.monotonic() - t0
        print(f"all Ready after {seeding:.1f} s")

        audit = Audit(plane.audit_log)
        start_mark = audit.mark()
        t0 = time.monotonic()
        allset.start()
        assert allset.proc is not None and allset.proc.popen is not None
        pid = allset.proc.popen.pid
        pids = {"allset": pid}
        if standby is not None:
            standby.start(standby=True)  # once the first replica leads, as it does now
            assert standby.proc is not None and standby.proc.popen is not None
            pids["standby"] = standby.proc.popen.pid
        registrar.start()
        settled = quiet(audit, 5.0, 600)
        print(f"allset up and its startup writes done (the seeded Nodes' capacity-source "
              f"labels) in {time.monotonic() - t0:.1f} s (quiet for 5 s after "
              f"{settled:.1f} s); RSS {peak_rss_mb(pid):.0f} MiB, CPU "
              f"{cpu_seconds(pid):.1f} s")
        show("allset's API requests at startup (audit log)", audit.since(start_mark))
        if standby is not None:
            show(f"of which the standby's ({STANDBY}; CPU {cpu_seconds(pids['standby']):.1f}"
                 f" s, RSS {peak_rss_mb(pids['standby']):.0f} MiB)",
                 audit.since(start_mark, STANDBY), 6)

        rng = random.Random(1)
        sizes = [rng.randint(args.min_nodes, args.max_nodes) for _ in range(args.requests)]
        before = plane.metrics()
        mark = audit.mark()
        cpu0 = cpu_seconds(pid)
        print(f"\ncreating {args.requests} ProvisioningRequests of {args.min_nodes}-"
              f"{args.max_nodes} nodes ({sum(sizes)} nodes in all) at once "
              f"(load average {os.getloadavg()[0]:.1f})")
        progress = Progress(rest)
        created_at: dict[str, float] = {}

        def create(i: int) -> None:
            rest.call("POST", REQUESTS, request(f"job-{i:04d}", sizes[i]))
            created_at[f"job-{i:04d}"] = time.time()

        cpu = Cpu(plane, pids)
        start, began = time.monotonic(), time.time()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(args.requests)))
        created = time.monotonic() - start
        last = Counter[str]()
        print("  every 15 s: seconds, Provisioned, Nodes registered | CPU seconds since the "
              "line before of " + ", ".join(cpu.names))
        shown = start
        while True:
            last = progress.poll()
            now = time.monotonic()
            done = last[c.PROVISIONED] + last[c.FAILED] >= args.requests
            if done or now - shown >= 15:
                shown = now
                print(f"  {now - start:5.0f} {last[c.PROVISIONED]:5} {registrar.registered:6} |"
                      + "".join(f" {s:6.1f}" for s in cpu.since()))
            if done:
                break
            if now - start > args.timeout:
                print(f"  not all terminal within {args.timeout:.0f} s: {dict(last)}")
                break
        elapsed = time.monotonic() - start
        print("  CPU seconds in all: " + ", ".join(
            f"{name} {s:.1f}" for name, s in zip(cpu.names, cpu.total(), strict=True))
            + f" ({os.cpu_count()} cores x {elapsed:.0f} s = "
              f"{(os.cpu_count() or 1) * elapsed:.0f})")
        cpu1 = cpu_seconds(pid)
        after = plane.metrics()
        print(f"  created in {created:.1f} s; all terminal after {elapsed:.1f} s "
              f"({last[c.PROVISIONED]} Provisioned, {last[c.FAILED]} Failed) -> "
              f"{elapsed / 60:.2f}x of the 60 s aim; {registrar.registered} Nodes now")
        # What this machine needs for the burst's Nodes alone, measured on it before allset
        # started: registering them and kwok making them Ready, nothing else running.
        print(f"  this machine's floor without allset (an estimate: the seeding's rate, "
              f"scaled): the seeding registered {args.nodes} "
              f"Nodes and kwok made them Ready in {seeding:.1f} s "
              f"({args.nodes / seeding:.0f}/s); the burst's {sum(sizes)} Nodes at that rate "
              f"take {sum(sizes) * seeding / args.nodes:.1f} s before any request of "
              f"allset's")
        print(f"  allset CPU in that time: {cpu1 - cpu0:.1f} s; peak RSS "
              f"{peak_rss_mb(pid):.0f} MiB (aim <= 500 MiB)")
        show("allset's API requests (audit log, its user only)", audit.since(mark))
        if standby is not None:
            show(f"of which the standby's ({STANDBY}; RSS "
                 f"{peak_rss_mb(pids['standby']):.0f} MiB)", audit.since(mark, STANDBY), 6)
        stages_end = audit.mark()
        show("apiserver_request_total diff (every client: kwok, the bench's Node "
             "registrations and polling)", diff(after, before))

        print("\nwhere the time went (audit log: allset's requests and kwok's Node status "
              "writes; the bench's clock for its creates and Node registrations)")
        gangs: dict[str, list[str]] = {}
        for node in rest.call("GET", "/api/v1/nodes")["items"]:
            value = ((node["metadata"].get("labels") or {}).get(c.BOOKING_LABEL))
            if value:
                gangs.setdefault(value, []).append(node["metadata"]["name"])
        nodes_of = {name: gangs.get(c.booking_value(NAMESPACE, name), [])
                    for name in created_at}
        audited = audit.audited(mark, stages_end)
        stages = milestones(audited, allset=ALLSET_USER, kwok=KWOK_USER,
                            created=created_at, registered=registrar.registered_at,
                            nodes_of=nodes_of)
        delays = allset_delays(stages, registered=registrar.registered_at, audited=audited,
                               allset=ALLSET_USER, nodes_of=nodes_of)
        print("\n".join(render(stages, began, delays)))

        settle = quiet(audit, 5.0, 300)
        print(f"\nallset quiet for 5 s after {settle:.1f} s more (the last Node labels)")
        before = plane.metrics()
        mark = audit.mark()
        cpu0 = cpu_seconds(pid)
        time.sleep(args.steady)
        end = audit.mark()  # one end for every count below
        steady = audit.since(mark, end=end)
        per_minute = sum(steady.values()) * 60 / args.steady
        everyone = diff(plane.metrics(), before)
        lease = sum(n for (verb, resource), n in audit.since(mark, LEADER, end).items()
                    if (verb, resource) == ("update", "leases"))
        print(f"  steady state, {args.steady:.0f} s of nothing happening, every request "
              f"booked: allset {per_minute:.1f} API requests/min (aim <= 10), of which "
              f"{lease * 60 / args.steady:.1f} renew its leader Lease (leader election "
              f"{args.leader_election}) {dict(steady) or ''}; allset CPU "
              f"{cpu_seconds(pid) - cpu0:.1f} s")
        if standby is not None:
            mine = audit.since(mark, STANDBY, end)
            leader = sum(audit.since(mark, LEADER, end).values())
            print(f"  of which the standby's ({STANDBY}): "
                  f"{sum(mine.values()) * 60 / args.steady:.1f}/min {dict(mine) or ''}; "
                  f"the leader's: {leader * 60 / args.steady:.1f}/min")
        show("  apiserver_request_total diff in that time (every client)", everyone, 6)

        lease_now = rest.find("coordination.k8s.io/v1", "Lease", "allset", "allset")
        holder = str(((lease_now or {}).get("spec") or {}).get("holderIdentity") or "")
        if args.leader_election == "on" and not holder.startswith(LEADER):
            print(f"\n  THE LEASE MOVED: held by {holder or 'nobody'}, not {LEADER}; figures "
                  f"above mix two leaders (a renewal missed on a loaded host?)")
        print(f"\nallset peak RSS {peak_rss_mb(pid):.0f} MiB, CPU {cpu_seconds(pid):.1f} s "
              f"since it started; load average {os.getloadavg()[0]:.1f}")
    finally:
        if registrar is not None:
            registrar.stop()
        if standby is not None:
            standby.stop()
        if allset is not None:
            allset.stop()
        plane.stop()


def ready_nodes(plane: Plane) -> int:
    items = plane.rest.call("GET", "/api/v1/nodes")["items"]
    return sum(1 for n in items if any(
        cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in (n.get("status") or {}).get("conditions") or []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--min-nodes", type=int, default=2)
    parser.add_argument("--max-nodes", type=int, default=16)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--steady", type=float, default=300.0,
                        help="seconds of the steady-state window: as long as a watch lasts "
                             "(300 s) so its renewal and the periodic checks are counted")
    parser.add_argument("--leader-election", choices=("on", "off"), default="on",
                        help="elect on a Lease (default timing) as replicas do")
    parser.add_argument("--replicas", type=int, choices=(1, 2), default=2,
                        help="allset replicas: two as deploy/ runs them (a leader and a "
                             "standby that follows it), or one")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--keep", help="directory to keep logs in (default: a temporary one)")
    args = parser.parse_args()
    if args.replicas == 2 and args.leader_election == "off":
        parser.error("--replicas 2 needs --leader-election on: two replicas without an "
                     "election would both act")
    # A SIGTERM (timeout(1), a CI limit) unwinds like Ctrl-C, so run()'s finally stops the
    # control plane, kwok and allset rather than leaving them running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"allset at scale on a real control plane: {args.nodes} Nodes, {args.groups} "
          f"groups, {args.requests} requests ({machine()}, load average "
          f"{os.getloadavg()[0]:.1f})")
    if args.keep:
        directory = Path(args.keep)
        directory.mkdir(parents=True, exist_ok=True)
        run(args, directory)
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            run(args, Path(tmp))


if __name__ == "__main__":
    main()
