"""CA-facing performance of `allset serve` on the simulated cloud.

For 1,000 node groups and 5,000 instances, from a real gRPC client in another process:
p50/p99 of each read RPC, the time of one CA-loop-equivalent pass (Refresh, NodeGroups,
then TargetSize, Nodes and GetOptions for every group), IncreaseSize acknowledgement
latency, and the server's peak RSS. Targets: pass < 1 s, ack p99 < 20 ms, RSS < 200 MB.

Then the same pass against bench/trivial_server (static answers built once, same gRPC
server and thread pool) and the ratio of the two: what allset adds over gRPC's own floor
(aim <= 1.1x). Both servers run at once and the passes alternate between them, so load
from other work on the machine falls on both alike.

    python -m bench.ca_loop [--groups 1000] [--instances 5000]

Two clients drive the server: a Python gRPC client (this process), and, when Go is
installed, bench/caloop, a Go client like CA's own, built on the fly from protos/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import yaml
from google.protobuf import duration_pb2

from adapters.fake.store import FakeStore
from bench.common import ROOT, machine, peak_rss_mb, percentiles, serve
from provider.domain.cloud import CapacityType, CloudInstance, InstanceState, OwnerTags
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]


def write_fleet(directory: Path, groups: int, instances: int) -> Path:
    state = directory / "cloud.db"
    nodes: list[dict[str, Any]] = []
    for i in range(groups):
        gpu = i % 4 != 3
        nodes.append({
            "id": f"g{i:04d}",
            "zone": ZONES[i % len(ZONES)],
            "instanceType": "p5.48xlarge" if gpu else "m7i.8xlarge",
            **({"gpu": {"type": "nvidia-h100-80gb", "count": 8}} if gpu else {}),
            "cpu": 191 if gpu else 31,
            "memory": "1900Gi" if gpu else "120Gi",
            "maxSize": 64,
            "price": {"onDemand": 98.32 if gpu else 1.61},
            "options": {"scaleDownUnneededTime": "20m"} if i % 2 else {},
        })
    config = {
        "cluster": "bench",
        "refreshInterval": "10m",
        "cloud": {"provider": "fake", "fake": {
            "statePath": str(state),
            "reservations": [
                {"id": f"r{z}", "zone": z, "instanceType": "p5.48xlarge", "count": 64}
                for z in ZONES
            ],
        }},
        "nodeGroups": nodes,
    }
    path = directory / "allset.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    store = FakeStore(state)
    batch = []
    for n in range(instances):
        g = nodes[n % groups]
        name = f"{g['id']}-seed-{n}"
        batch.append(CloudInstance(
            id=name, provider_id=f"fake://{g['zone']}/{name}", name=name, zone=g["zone"],
            instance_type=g["instanceType"], state=InstanceState.RUNNING,
            tags=OwnerTags("bench", g["id"], "seed", "0.0", CapacityType.ON_DEMAND,
                           committed=True),
            launched_at=time.time(),
        ))
    store.save(batch)
    store.close()
    return path


def defaults() -> pb.NodeGroupAutoscalingOptions:
    return pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=0.5, scaleDownGpuUtilizationThreshold=0.5,
        scaleDownUnneededDuration=duration_pb2.Duration(seconds=600),
        scaleDownUnreadyDuration=duration_pb2.Duration(seconds=1200),
        MaxNodeProvisionDuration=duration_pb2.Duration(seconds=900),
    )


def timed(fn: Callable[[], Any], samples: list[float]) -> Any:
    start = time.perf_counter()
    out = fn()
    samples.append(time.perf_counter() - start)
    return out


def python_client(address: str, pid: int, args: argparse.Namespace) -> None:
    rng = random.Random(1)
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.CloudProviderStub(channel)
    ids = [g.id for g in stub.NodeGroups(pb.NodeGroupsRequest()).nodeGroups]
    assert len(ids) == args.groups
    first = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=ids[0])).instances
    assert first, "seeded instances were not adopted"
    provider_ids = [f"fake://{ZONES[n % args.groups % len(ZONES)]}/"
                    f"g{n % args.groups:04d}-seed-{n}" for n in range(args.instances)]
    opts = defaults()
    reads: dict[str, Callable[[], Any]] = {
        "NodeGroups": lambda: stub.NodeGroups(pb.NodeGroupsRequest()),
        "NodeGroupTargetSize": lambda: stub.NodeGroupTargetSize(
            pb.NodeGroupTargetSizeRequest(id=rng.choice(ids))),
        "NodeGroupNodes": lambda: stub.NodeGroupNodes(
            pb.NodeGroupNodesRequest(id=rng.choice(ids))),
        "NodeGroupGetOptions": lambda: stub.NodeGroupGetOptions(
            pb.NodeGroupAutoscalingOptionsRequest(id=rng.choice(ids), defaults=opts)),
        "NodeGroupForNode": lambda: stub.NodeGroupForNode(pb.NodeGroupForNodeRequest(
            node=pb.ExternalGrpcNode(providerID=rng.choice(provider_ids)))),
        "NodeGroupTemplateNodeInfo": lambda: stub.NodeGroupTemplateNodeInfo(
            pb.NodeGroupTemplateNodeInfoRequest(id=rng.choice(ids))),
        "GPULabel": lambda: stub.GPULabel(pb.GPULabelRequest()),
        "GetAvailableGPUTypes": lambda: stub.GetAvailableGPUTypes(
            pb.GetAvailableGPUTypesRequest()),
        "Refresh": lambda: stub.Refresh(pb.RefreshRequest()),
    }
    print("\n[Python gRPC client]")
    print(f"{'read RPC':28} {'p50 ms':>8} {'p99 ms':>8}")
    for name, call in reads.items():
        samples: list[float] = []
        for _ in range(300):  # warm-up
            call()
        for _ in range(2000):
            timed(call, samples)
        p50, p99 = percentiles(samples)
        print(f"{name:28} {p50:8.3f} {p99:8.3f}")

    passes: list[float] = []
    for _ in range(args.passes):
        start = time.perf_counter()
        stub.Refresh(pb.RefreshRequest())
        stub.NodeGroups(pb.NodeGroupsRequest())
        for gid in ids:
            stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid))
            stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid))
            stub.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id=gid, defaults=opts))
        passes.append(time.perf_counter() - start)
    report_passes(passes, 2 + 3 * len(ids))

    acks: list[float] = []
    for gid in ids[:500]:
        request = pb.NodeGroupIncreaseSizeRequest(id=gid, delta=1)
        timed(lambda r=request: stub.NodeGroupIncreaseSize(r), acks)  # type: ignore[misc]
    p50, p99 = percentiles(acks)
    report_acks(len(acks), p50, p99)
    time.sleep(1.0)  # let the scale-ups run so their memory counts too
    report_rss(pid)
    channel.close()


def report_passes(passes: list[float], calls: int) -> None:
    median = sorted(passes)[len(passes) // 2]
    print(f"CA-loop pass ({calls} RPCs, {len(passes)} passes): median {median:.3f} s, "
          f"best {min(passes):.3f} s, worst {max(passes):.3f} s  -> {median:.2f}x of the 1 s aim")


def report_acks(calls: int, p50: float, p99: float) -> None:
    print(f"IncreaseSize ack ({calls} calls): p50 {p50:.3f} ms, p99 {p99:.3f} ms  "
          f"-> {p99 / 20:.2f}x of the 20 ms aim")


def report_rss(pid: int) -> None:
    rss = peak_rss_mb(pid)
    print(f"server peak RSS: {rss:.0f} MiB  -> {rss / 200:.2f}x of the 200 MB aim")


def build_go_client() -> Path | None:
    """Build bench/caloop (Go) with stubs generated from protos/; None without Go."""
    go = shutil.which("go")
    if go is None:
        return None
    bin_dir = ROOT / ".ci" / "bin"
    env = {**os.environ, "GOBIN": str(bin_dir)}
    for tool in ("google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.5",
                 "google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1"):
        subprocess.run([go, "install", tool], env=env, check=True, capture_output=True)
    from importlib import resources

    from grpc_tools import protoc

    src = ROOT / "bench" / "caloop"
    gen = src / "gen"
    gen.mkdir(exist_ok=True)
    mapping = "Mexternalgrpc.proto=allset.dev/bench/caloop/gen"
    rc = protoc.main([
        "protoc", f"-I{ROOT / 'protos'}", f"-I{resources.files('grpc_tools') / '_proto'}",
        f"--plugin=protoc-gen-go={bin_dir / 'protoc-gen-go'}",
        f"--plugin=protoc-gen-go-grpc={bin_dir / 'protoc-gen-go-grpc'}",
        f"--go_out={gen}", "--go_opt=paths=source_relative", f"--go_opt={mapping}",
        f"--go-grpc_out={gen}", "--go-grpc_opt=paths=source_relative", f"--go-grpc_opt={mapping}",
        "externalgrpc.proto",
    ])
    if rc != 0:
        raise RuntimeError("protoc failed for the Go client")
    out = bin_dir / "caloop"
    subprocess.run([go, "build", "-o", str(out), "."], cwd=src, check=True, env=env)
    return out


def go_client(binary: Path, address: str, pid: int, args: argparse.Namespace) -> None:
    result = subprocess.run(
        [str(binary), "-addr", address, "-passes", str(args.passes)],
        capture_output=True, text=True, check=True, timeout=600,
    )
    figures = json.loads(result.stdout)
    print("\n[Go gRPC client, as CA's]")
    print(f"{'read RPC':28} {'p50 ms':>8} {'p99 ms':>8}")
    for name in sorted(figures["readP50Ms"]):
        print(f"{name:28} {figures['readP50Ms'][name]:8.3f} {figures['readP99Ms'][name]:8.3f}")
    report_passes(figures["passSeconds"], figures["callsPerPass"])
    report_acks(figures["increaseCalls"], figures["increaseP50Ms"], figures["increaseP99Ms"])
    time.sleep(1.0)
    report_rss(pid)


def restore(directory: Path, pristine: Path) -> None:
    """Put the seeded cloud state back (the previous run scaled groups up)."""
    for suffix in ("", "-wal", "-shm"):
        Path(directory, "cloud.db" + suffix).unlink(missing_ok=True)
    shutil.copy(pristine, directory / "cloud.db")


@contextmanager
def trivial(args: argparse.Namespace) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """bench/trivial_server in a child process; yields it and its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.trivial_server", "--groups", str(args.groups),
         "--instances", str(args.instances)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        if not address:
            raise RuntimeError("the trivial server did not start")
        yield proc, address
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def python_passes(address: str, passes: int) -> list[float]:
    """CA-loop passes from this process's gRPC client, after one warm-up pass."""
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.CloudProviderStub(channel)
    opts = defaults()
    out: list[float] = []
    for p in range(passes + 1):
        start = time.perf_counter()
        stub.Refresh(pb.RefreshRequest())
        ids = [g.id for g in stub.NodeGroups(pb.NodeGroupsRequest()).nodeGroups]
        for gid in ids:
            stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=gid))
            stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid))
            stub.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id=gid, defaults=opts))
        if p:
            out.append(time.perf_counter() - start)
    channel.close()
    return out


def go_passes(binary: Path, address: str, passes: int) -> list[float]:
    result = subprocess.run(
        [str(binary), "-addr", address, "-passes", str(passes), "-increases", "0"],
        capture_output=True, text=True, check=True, timeout=600,
    )
    figures: list[float] = json.loads(result.stdout)["passSeconds"]
    return figures


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compare(config: Path, binary: Path | None, args: argparse.Namespace) -> None:
    """allset and the trivial server side by side, passes alternating between them.

    Wall time of a pass is what CA waits; on a machine shared with other work it moves
    with the load, so the servers' CPU seconds per pass are printed too (each run of a
    client is 3 passes, the first a warm-up)."""
    clients: list[tuple[str, Callable[[str], list[float]]]] = []
    if binary is not None:
        clients.append(("Go", lambda a: go_passes(binary, a, 2)))
    clients.append(("Python", lambda a: python_passes(a, 2)))
    print(f"\n[allset against a trivial server: {args.rounds} alternating rounds of 2 passes, "
          f"load average {os.getloadavg()[0]:.1f}]")
    print(f"{'client':8} {'pass s: allset':>15} {'trivial':>8} {'ratio':>6}   "
          f"{'server CPU s/pass: allset':>26} {'trivial':>8} {'ratio':>6}   aim")
    with serve(config) as (ours_proc, address), trivial(args) as (floor_proc, floor):
        for name, run in clients:
            wall: dict[int, list[float]] = {ours_proc.pid: [], floor_proc.pid: []}
            cpu: dict[int, list[float]] = {ours_proc.pid: [], floor_proc.pid: []}
            for r in range(args.rounds):
                # Alternate who goes first, so neither always follows the other's garbage.
                order = [(ours_proc.pid, address), (floor_proc.pid, floor)]
                for pid, target in (order if r % 2 == 0 else order[::-1]):
                    before = cpu_seconds(pid)
                    wall[pid].extend(run(target))
                    cpu[pid].append((cpu_seconds(pid) - before) / 3)
            a, t = (statistics.median(wall[p]) for p in (ours_proc.pid, floor_proc.pid))
            ca, ct = (statistics.median(cpu[p]) for p in (ours_proc.pid, floor_proc.pid))
            print(f"{name:8} {a:15.3f} {t:8.3f} {a / t:5.2f}x   {ca:26.3f} {ct:8.3f} "
                  f"{ca / ct:5.2f}x   <= 1.1x")
    print(f"(load average after: {os.getloadavg()[0]:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=5_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=6,
                        help="alternating rounds of the comparison with the trivial server")
    parser.add_argument("--only-ratio", action="store_true",
                        help="skip the per-RPC figures; run only the comparison")
    args = parser.parse_args()
    print(f"allset CA-facing bench: {args.groups} groups, {args.instances} instances "
          f"({machine()})")
    with tempfile.TemporaryDirectory() as tmp:
        config = write_fleet(Path(tmp), args.groups, args.instances)
        pristine = Path(tmp) / "cloud.db.orig"
        shutil.copy(Path(tmp) / "cloud.db", pristine)
        binary = build_go_client()
        if not args.only_ratio:
            with serve(config) as (proc, address):
                python_client(address, proc.pid, args)
            if binary is None:
                print("\n(Go is not installed: the Go client run is skipped)")
            else:
                restore(Path(tmp), pristine)
                with serve(config) as (proc, address):
                    go_client(binary, address, proc.pid, args)
        restore(Path(tmp), pristine)
        compare(config, binary, args)


if __name__ == "__main__":
    main()
