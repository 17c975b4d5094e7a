"""`allset serve` as a subprocess on the simulated cloud, with its ProvisioningRequest
controller pointed at the e2e API server. The cloud's statePath outlives restarts of allset,
as a real cloud does."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from provider.config.load import LoadedConfig, load_config
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.e2e.procs import Proc, free_port
from tests.e2e.rest import wait_for

ROOT = Path(__file__).resolve().parents[2]
BOOT_SECONDS = 1.0

# One node group (or pair) per scenario, so scenarios sharing the session's cloud do not
# take each other's capacity. Zones and instance types keep them apart in the planner too.
CONFIG = """\
cluster: e2e
refreshInterval: 1s
reconcile: {{orphanGrace: 1s}}
attempts: {{deadline: 30s}}
provisioningRequests: {{workers: 4, initialBackoff: 2s, maxBackoff: 4s, resync: 2s}}
gangs: {{resync: 2s}}
cloud:
  provider: fake
  fake:
    statePath: {state}
    shared: {shared}
    launchLatencySeconds: 0.1
    bootSeconds: {boot}
    reservations:
      - {{id: r-job, zone: us-east-1a, instanceType: p5.48xlarge, count: 2}}
      - {{id: r-scarce, zone: us-east-1c, instanceType: p4d.24xlarge, count: 1}}
      - {{id: r-crash, zone: us-east-1d, instanceType: p5.48xlarge, count: 1}}
      - {{id: r-failover, zone: us-east-1e, instanceType: p5.48xlarge, count: 1}}
      - {{id: r-dra-a100, zone: us-east-1f, instanceType: p4d.24xlarge, count: 2}}
      - {{id: r-reuse, zone: us-east-1h, instanceType: p5.48xlarge, count: 1}}
      - {{id: cb-limit, zone: us-east-1g, instanceType: p5.48xlarge, count: 2,
         kind: capacity-block, targeted: true, startsAt: {cb_start}, endsAt: {cb_end}}}
      - {{id: cb-trn2, zone: us-east-1l, instanceType: trn2.48xlarge, count: 2,
         kind: capacity-block, targeted: true, startsAt: {cb_start}, endsAt: {cb_end}}}
    stockouts:
      - {{zone: us-east-1c, instanceType: p4d.24xlarge, capacityType: on-demand}}
nodeGroups:
  - {{id: job, zone: us-east-1a, instanceType: p5.48xlarge, maxSize: 4,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: mend, zone: us-east-1a, instanceType: p5.48xlarge, maxSize: 4,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  # test_reuse: one reserved slot, the rest on demand; idle nodes are booked again.
  - {{id: reuse, zone: us-east-1h, instanceType: p5.48xlarge, maxSize: 4,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: gang-gpu-a, zone: us-east-1a, instanceType: g6.12xlarge, maxSize: 4,
     gpu: {{type: nvidia-l4, count: 4}}, cpu: 47, memory: 180Gi, price: {{onDemand: 4.6}}}}
  - {{id: gang-gpu-b, zone: us-east-1b, instanceType: g6.12xlarge, maxSize: 4,
     gpu: {{type: nvidia-l4, count: 4}}, cpu: 47, memory: 180Gi, price: {{onDemand: 4.6}}}}
  - {{id: gang-cpu-a, zone: us-east-1a, instanceType: c7i.4xlarge, maxSize: 4, cpu: 15,
     memory: 30Gi, labels: {{e2e.allset.dev/role: gang-cpu}}, price: {{onDemand: 0.71}}}}
  - {{id: gang-cpu-b, zone: us-east-1b, instanceType: c7i.4xlarge, maxSize: 4, cpu: 15,
     memory: 30Gi, labels: {{e2e.allset.dev/role: gang-cpu}}, price: {{onDemand: 0.71}}}}
  - {{id: scarce, zone: us-east-1c, instanceType: p4d.24xlarge, maxSize: 4,
     gpu: {{type: nvidia-a100-40gb, count: 8}}, cpu: 95, memory: 1100Gi,
     price: {{onDemand: 32.77}}}}
  - {{id: nojoin, zone: us-east-1a, instanceType: m7i.2xlarge, maxSize: 4, cpu: 7,
     memory: 30Gi, price: {{onDemand: 0.4}}}}
  - {{id: crash, zone: us-east-1d, instanceType: p5.48xlarge, maxSize: 4,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}}}}
  - {{id: failover, zone: us-east-1e, instanceType: p5.48xlarge, maxSize: 6,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}}}}
  - {{id: direct, zone: us-east-1a, instanceType: m7i.8xlarge, maxSize: 8, cpu: 31,
     memory: 120Gi, price: {{onDemand: 1.61}}}}
  # test_dra: the A100 group (40 GiB GPUs) is the cheapest and has free reserved slots, so
  # only the pods' DRA claims keep their requests off it.
  - {{id: dra-h100-a, zone: us-east-1f, instanceType: p5.48xlarge, maxSize: 4,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}}, labels: {{e2e.allset.dev/role: dra}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: dra-h100-b, zone: us-east-1f, instanceType: p5.48xlarge, maxSize: 4,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}}, labels: {{e2e.allset.dev/role: dra}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: dra-a100, zone: us-east-1f, instanceType: p4d.24xlarge, maxSize: 4,
     gpu: {{type: nvidia-a100-40gb, count: 8}}, cpu: 95, memory: 1100Gi,
     price: {{onDemand: 32.77}}, labels: {{e2e.allset.dev/role: dra}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  # test_gangs: a GPU and a CPU group per gang API, a GPU group too small for a gang of
  # three, and a group whose nodes never register (a gang deleted while it waits).
  - {{id: native-h100, zone: us-east-1b, instanceType: p5.48xlarge, maxSize: 4,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: native-cpu, zone: us-east-1b, instanceType: c7i.4xlarge, maxSize: 4, cpu: 15,
     memory: 30Gi, price: {{onDemand: 0.71}}}}
  - {{id: cosched-h100, zone: us-east-1b, instanceType: p5.48xlarge, maxSize: 4,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: cosched-cpu, zone: us-east-1b, instanceType: c7i.4xlarge, maxSize: 4, cpu: 15,
     memory: 30Gi, price: {{onDemand: 0.71}}}}
  - {{id: small-h100, zone: us-east-1b, instanceType: p5.48xlarge, maxSize: 2,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: gang-nojoin, zone: us-east-1b, instanceType: m7i.2xlarge, maxSize: 4, cpu: 7,
     memory: 30Gi, price: {{onDemand: 0.4}}}}
  # test_gangs (Kubernetes 1.37): a CompositePodGroup's GPU and CPU groups.
  - {{id: composite-h100, zone: us-east-1b, instanceType: p5.48xlarge, maxSize: 4,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: composite-cpu, zone: us-east-1b, instanceType: c7i.4xlarge, maxSize: 4, cpu: 15,
     memory: 30Gi, price: {{onDemand: 0.71}}}}
  # test_kueue_releases (Kueue 0.19): a Job evicted once its nodes run it, one evicted
  # while its nodes never register, and the two flavors of a ConcurrentAdmission queue.
  - {{id: evict-h100, zone: us-east-1i, instanceType: p5.48xlarge, maxSize: 2,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: evict-nojoin, zone: us-east-1i, instanceType: m7i.2xlarge, maxSize: 4, cpu: 7,
     memory: 30Gi, price: {{onDemand: 0.4}}}}
  - {{id: variant-a, zone: us-east-1j, instanceType: p5.48xlarge, maxSize: 2,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  - {{id: variant-b, zone: us-east-1k, instanceType: p5.48xlarge, maxSize: 2,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191, memory: 1900Gi,
     price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
  # test_gang_webhook: CPU-only gangs raced against CA's per-pod scale-up (room for a gang
  # launched twice, so a double launch shows as nodes rather than as a refusal).
  - {{id: race-cpu, zone: us-east-1b, instanceType: c7i.2xlarge, maxSize: 8, cpu: 7,
     memory: 15Gi, price: {{onDemand: 0.36}}}}
  # test_accelerators: Trainium2 nodes advertising the Neuron device plugin's resources,
  # a capacity block of two of them, and CPU nodes beside them for the gang's other pod.
  - {{id: neuron-trn2, zone: us-east-1l, instanceType: trn2.48xlarge, maxSize: 3,
     reservations: [cb-trn2], gpu: {{type: aws-trainium2-96gb, count: 16, cores: 4}},
     cpu: 191, memory: 1900Gi, price: {{onDemand: 44.7}},
     taints: [{{key: aws.amazon.com/neuron, value: present, effect: NoSchedule}}]}}
  - {{id: neuron-cpu, zone: us-east-1l, instanceType: c7i.2xlarge, maxSize: 2, cpu: 7,
     memory: 15Gi, price: {{onDemand: 0.36}}}}
  # test_kueue_path: a capacity block open from before the session to 3 h after its start;
  # the Workload's maximumExecutionTimeSeconds decides whether a Job may use it.
  - {{id: limit, zone: us-east-1g, instanceType: p5.48xlarge, maxSize: 4, bootTime: 1s,
     reservations: [cb-limit], gpu: {{type: nvidia-h100-80gb, count: 8}}, cpu: 191,
     memory: 1900Gi, price: {{onDemand: 98.32}},
     taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
"""


class Allset:
    """One `allset serve`. Replicas share another's simulated cloud (``state``, read on
    every call) and name themselves in ``env`` (POD_NAME, the Lease holder)."""

    def __init__(self, directory: Path, kubeconfig: Path, state: Path | None = None,
                 extra: str = "", env: dict[str, str] | None = None) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.state = state or directory / "cloud.db"
        self.config_path = directory / "allset.yaml"
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        self.config_path.write_text(CONFIG.format(
            cb_start=(now - dt.timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
            cb_end=(now + dt.timedelta(hours=3)).isoformat().replace("+00:00", "Z"),
            state=self.state, boot=BOOT_SECONDS,
            shared="true" if state is not None else "false") + extra)
        self.kubeconfig = kubeconfig
        self.env = env or {}
        self.proc: Proc | None = None
        self.address = ""
        # With TLS: ``serve`` flags (certificates, identities) and what CA dials with.
        self.tls_args: list[str] = []
        self.credentials: grpc.ChannelCredentials | None = None
        self.admin_socket: Path | None = None
        # The admission webhook that marks gang pods (``serve --webhook-*``), on a port kept
        # across restarts, where the API server's webhook configuration points.
        self.webhook: tuple[Path, Path] | None = None  # its certificate and key
        self.webhook_port = free_port()

    def config(self) -> LoadedConfig:
        return load_config(self.config_path)

    def start(self, failpoints: str = "", standby: bool = False) -> None:
        """Start and wait until it serves CA (a ``standby`` only until it is alive: it
        answers CA with UNAVAILABLE while another replica leads)."""
        self.address = f"127.0.0.1:{free_port()}"
        env = {**os.environ, **self.env, "ALLSET_FAILPOINTS": failpoints,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                            os.environ.get("PYTHONPATH")]))}
        tls = self.tls_args or ["--insecure"]
        socket = ["--admin-socket", str(self.admin_socket)] if self.admin_socket else []
        if self.webhook is not None:
            socket += [f"--webhook-address=127.0.0.1:{self.webhook_port}",
                       f"--webhook-cert={self.webhook[0]}", f"--webhook-key={self.webhook[1]}"]
        self.proc = Proc("allset", [
            sys.executable, "-m", "provider.cli", "serve", *tls, *socket,
            "--address", self.address, "--config", str(self.config_path),
            "--state-dir", str(self.dir / "state"), "--kubeconfig", str(self.kubeconfig),
        ], self.dir / "allset.log", env).start()
        stub = self.stub()

        def up() -> bool:
            assert self.proc is not None
            self.proc.check_alive()
            try:
                if standby:
                    health = health_pb2_grpc.HealthStub(self.channel())
                    return bool(health.Check(health_pb2.HealthCheckRequest(
                        service="allset.live"), timeout=1).status ==
                        health_pb2.HealthCheckResponse.SERVING)
                stub.GPULabel(pb.GPULabelRequest(), timeout=1)
                return True
            except grpc.RpcError:
                return False

        wait_for("allset serve to answer gRPC", up, 60)

    def channel(self) -> grpc.Channel:
        if self.credentials is None:
            return grpc.insecure_channel(self.address)
        return grpc.secure_channel(self.address, self.credentials)

    def stub(self) -> pb_grpc.CloudProviderStub:
        return pb_grpc.CloudProviderStub(self.channel())

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(30)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    def log(self) -> str:
        return self.proc.tail(200) if self.proc is not None else ""
