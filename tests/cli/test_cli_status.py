"""`allset status` against a running server (issue 15): groups, reservations with who uses
them, attempts and their outcomes, bookings, in text and JSON; clear one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.cli import Served, one_line, run_allset
from tests.kit.helpers import wait_until


def test_status_shows_what_the_running_server_holds(tmp_path: Path) -> None:
    served = Served([], tmp_path / "serve.log")  # the built-in demo on the simulated cloud
    try:
        wait_until(served.answers, 30)
        group = served.scale_up(2)

        def settled() -> bool:
            out = run_allset("status", "--server", served.address, "--output", "json")
            return out.returncode == 0 and bool(json.loads(out.stdout)["lastOutcomes"])

        wait_until(settled, 30)
        out = run_allset("status", "--server", served.address, "--output", "json")
        found = json.loads(out.stdout)
        assert found["acting"] is True and found["notActingBecause"] is None
        mine = next(g for g in found["groups"] if g["id"] == group)
        assert mine["target"] == 2 and sum(mine["sources"].values()) == 2
        (outcome,) = found["lastOutcomes"]
        assert outcome["result"] == "succeeded" and outcome["nodes"] == 2
        used = sum(sum(r["usedBy"].values()) for r in found["reservations"])
        assert used == mine["sources"].get("reserved", 0)

        text = run_allset("status", "--server", served.address)
        assert text.returncode == 0, text.stderr
        assert "acting: yes" in text.stdout and group in text.stdout
        assert outcome["attempt"] in text.stdout and "RESERVATION" in text.stdout
    finally:
        served.stop()


def test_status_says_in_one_line_when_it_cannot_reach_the_server() -> None:
    out = run_allset("status", "--server", "127.0.0.1:1")
    assert out.returncode == 1
    assert one_line(out.stderr).startswith("allset: --server 127.0.0.1:1: UNAVAILABLE")
    out = run_allset("status", "--server", "127.0.0.1:1", "--cacert", "ca.crt")
    assert out.returncode == 1 and "go together" in one_line(out.stderr)


def test_status_over_mtls_takes_the_operator_certificate(tmp_path: Path) -> None:
    import os
    import subprocess

    from tests.kit.cli import ALLSET, ROOT
    from tests.kit.helpers import free_port

    pki = tmp_path / "pki"
    assert run_allset("certs", "--out", str(pki), "--server-name", "localhost").returncode == 0
    address = f"127.0.0.1:{free_port()}"
    with open(tmp_path / "serve.log", "ab") as log:
        proc = subprocess.Popen(
            [str(ALLSET), "serve", "--address", address, "--tls-cert", str(pki / "server.crt"),
             "--tls-key", str(pki / "server.key"), "--tls-client-ca", str(pki / "ca.crt")],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=log)
    tls = ["--cacert", str(pki / "ca.crt"), "--cert", str(pki / "operator.crt"),
           "--key", str(pki / "operator.key"), "--server-name", "localhost"]
    try:
        wait_until(lambda: run_allset("status", "--server", address, *tls).returncode == 0, 30)
        out = run_allset("status", "--server", address, *tls, "--output", "json")
        assert json.loads(out.stdout)["acting"] is True
        # CA's own certificate gets through the handshake but not into the admin service.
        as_ca = run_allset("status", "--server", address, "--cacert", str(pki / "ca.crt"),
                           "--cert", str(pki / "client.crt"), "--key", str(pki / "client.key"),
                           "--server-name", "localhost")
        assert as_ca.returncode == 1
        assert one_line(as_ca.stderr) == (
            f'allset: --server {address}: PERMISSION_DENIED: client "CN=cluster-autoscaler" '
            "may not call allset.admin.v1.Admin/Status: it is not an operator identity "
            "(serve --operator-cn allset-operator); use the operator certificate "
            "(operator.crt from `allset certs`, or the allset-operator-tls secret)")
        plain = run_allset("status", "--server", address)  # no client certificate
        assert plain.returncode == 1
        assert one_line(plain.stderr).startswith(f"allset: --server {address} requires mTLS")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_status_inside_the_pod_over_the_admin_socket(tmp_path: Path) -> None:
    """Issue 35, item 1: `kubectl exec <pod> -- allset status --server unix:PATH` asks the
    replica itself, with no certificate, while its TCP port stays mTLS; the socket serves
    the admin service only (nothing on it can change the cloud) and only to its user."""
    import os
    import stat
    import subprocess

    from tests.kit.cli import ALLSET, ROOT
    from tests.kit.helpers import free_port

    pki = tmp_path / "pki"
    assert run_allset("certs", "--out", str(pki), "--server-name", "localhost").returncode == 0
    # Short: a Unix socket's path has at most 107 bytes, and pytest's tmp paths are long.
    run = Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp") / f"allset-{os.getpid()}"
    run.mkdir(exist_ok=True)
    sock = run / "admin.sock"
    sock.unlink(missing_ok=True)
    address = f"127.0.0.1:{free_port()}"

    def serve(address: str) -> subprocess.Popen[bytes]:
        with open(tmp_path / "serve.log", "ab") as log:
            return subprocess.Popen(
                [str(ALLSET), "serve", "--address", address,
                 "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
                 "--tls-client-ca", str(pki / "ca.crt"), "--admin-socket", str(sock)],
                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=log)

    proc = serve(address)
    try:
        local = ["status", "--server", f"unix:{sock}"]
        wait_until(lambda: run_allset(*local).returncode == 0, 30)
        out = run_allset(*local, "--output", "json")
        assert json.loads(out.stdout)["acting"] is True
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            stub = pb_grpc.CloudProviderStub(channel)
            try:
                stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="h100-a",
                                                                           delta=1), timeout=5)
                raise AssertionError("the admin socket served a CloudProvider mutation")
            except grpc.RpcError as err:
                assert err.code() is grpc.StatusCode.UNIMPLEMENTED
        # The TCP port still takes no one without a certificate.
        plain = run_allset("status", "--server", address)
        assert plain.returncode == 1 and "requires mTLS" in one_line(plain.stderr)
        proc.terminate()
        proc.wait(timeout=30)
        # A restarted container finds the old socket file in its emptyDir: it binds again.
        proc = serve(f"127.0.0.1:{free_port()}")
        wait_until(lambda: run_allset(*local).returncode == 0, 30)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        sock.unlink(missing_ok=True)
        run.rmdir()


def test_an_admin_socket_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    out = run_allset("serve", "--insecure", "--admin-socket", str(tmp_path / "no" / "a.sock"))
    assert out.returncode == 1
    assert one_line(out.stderr) == (f"allset: --admin-socket: {tmp_path / 'no'} is not a "
                                    "directory (create it, or mount one: an emptyDir in a pod)")
    long = tmp_path / ("x" * 120)
    out = run_allset("serve", "--insecure", "--admin-socket", str(long))
    assert out.returncode == 1 and "longer than the 107 bytes" in one_line(out.stderr)


POD = """\
apiVersion: v1
kind: Pod
metadata: {name: trainer-0, namespace: research}
spec:
  nodeSelector: {allset.dev/accelerator: nvidia-h100-80gb}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers:
    - {name: t, image: trainer, resources: {requests: {nvidia.com/gpu: "8", cpu: "8"}}}
"""


DRA_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: claims, namespace: ml}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
  resourceClaims: [{name: g, resourceClaimTemplateName: big}]
  containers: [{name: c, image: x, resources: {requests: {cpu: "8"}, claims: [{name: g}]}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: big, namespace: ml}
spec:
  spec:
    devices:
      requests:
        - name: g
          exactly:
            deviceClassName: gpu.nvidia.com
            count: 8
            selectors:
              - cel:
                  expression: >-
                    device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec: {selectors: [{cel: {expression: 'device.driver == "gpu.nvidia.com"'}}]}
"""


def test_plan_in_the_running_server_and_a_dry_run_of_cas_path(tmp_path: Path) -> None:
    """`allset plan --server` plans against the server's live view: the demo's cloud lives
    in the server, so after CA took 4 nodes of cr-h100-a, the request's gang no longer gets
    them. With a Pod it says which groups CA could grow and from which source."""
    from tests.kit.cli import ROOT

    request = str(ROOT / "deploy" / "examples" / "requests" / "mixed-gang.yaml")
    served = Served([], tmp_path / "serve.log")
    try:
        wait_until(served.answers, 30)
        before = run_allset("plan", "--server", served.address, "--request", request,
                            "--output", "json")
        assert before.returncode == 0, before.stderr
        reserved = [p for p in json.loads(before.stdout)["plan"]["parts"]
                    if p["reservation"] == "cr-h100-a"]
        assert reserved, before.stdout
        with grpc.insecure_channel(served.address) as channel:
            pb_grpc.CloudProviderStub(channel).NodeGroupIncreaseSize(
                pb.NodeGroupIncreaseSizeRequest(id="h100-a", delta=4), timeout=5)

        def taken() -> bool:
            out = run_allset("plan", "--server", served.address, "--request", request,
                             "--output", "json")
            parts = json.loads(out.stdout)["plan"]["parts"]
            return not any(p["reservation"] == "cr-h100-a" for p in parts)

        wait_until(taken, 30)

        pod = tmp_path / "pod.yaml"
        pod.write_text(POD)
        dry = run_allset("plan", "--server", served.address, "--request", str(pod),
                         "--output", "json")
        assert dry.returncode == 0, dry.stderr
        groups = {g["group"]: g for g in json.loads(dry.stdout)["groups"]}
        assert groups["h100-b"]["fits"] and not groups["a100-b"]["fits"]
        assert groups["a100-b"]["why"]
        (part,) = groups["h100-b"]["increaseSize1"]["parts"]
        assert part["nodeGroup"] == "h100-b" and part["count"] == 1
        text = run_allset("plan", "--server", served.address, "--request", str(pod))
        assert "h100-b: fits; IncreaseSize(1) would launch 1 x h100-b" in text.stdout
        assert "a100-b: does not fit" in text.stdout

        # A Pod claiming its GPUs through DRA, with the objects its claim names.
        pod.write_text(DRA_POD)
        dra = run_allset("plan", "--server", served.address, "--request", str(pod),
                         "--output", "json")
        assert dra.returncode == 0, dra.stderr
        groups = {g["group"]: g for g in json.loads(dra.stdout)["groups"]}
        assert groups["h100-b"]["fits"] and not groups["a100-b"]["fits"]
        assert "memory 40Gi ≥ 80Gi is false" in json.dumps(groups["a100-b"]["why"],
                                                          ensure_ascii=False)

        both = run_allset("plan", "--server", served.address, "--config", "x.yaml",
                          "--request", str(pod))
        assert both.returncode == 1 and "one of them" in one_line(both.stderr)
        pod.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
        bad = run_allset("plan", "--server", served.address, "--request", str(pod))
        assert bad.returncode == 1 and "INVALID_ARGUMENT" in one_line(bad.stderr)
    finally:
        served.stop()


def test_one_node_and_one_plan_are_singular(tmp_path: Path) -> None:
    """Issue 35, item 9: a scale-up of one node read `1 nodes, 0 rolled back, 1 plans`."""
    served = Served([], tmp_path / "serve.log")
    try:
        wait_until(served.answers, 30)
        with grpc.insecure_channel(served.address) as channel:
            stub = pb_grpc.CloudProviderStub(channel)
            stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="cpu-a", delta=1),
                                       timeout=5)

        def settled() -> bool:
            out = run_allset("status", "--server", served.address, "--output", "json")
            return out.returncode == 0 and bool(json.loads(out.stdout)["lastOutcomes"])

        wait_until(settled, 30)
        text = run_allset("status", "--server", served.address).stdout
        (line,) = [x for x in text.splitlines() if " succeeded " in x]
        assert " 1 node, 0 rolled back, 1 plan, " in line, line
        assert "1 nodes" not in text and "1 plans" not in text
        assert "SPEND OUTSIDE RESERVATIONS: on-demand USD " in text, text
    finally:
        served.stop()
