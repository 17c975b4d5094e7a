"""The allset command: serve starts and stops cleanly; bad input is a clear error."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc

from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.cli import own_defaults
from tests.kit.helpers import free_port, wait_until
from tests.kit.paths import ROOT

ALLSET = [sys.executable, "-m", "provider.cli"]


def allset(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ALLSET, *own_defaults(args)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, check=False)


def test_serve_demo_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    proc = subprocess.Popen(
        [*ALLSET, "serve", "--insecure", "--address", f"127.0.0.1:{port}",
         "--state-dir", str(tmp_path), "--metrics-address", f"127.0.0.1:{metrics_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = pb_grpc.CloudProviderStub(channel)

        def up() -> bool:
            try:
                stub.NodeGroups(pb.NodeGroupsRequest(), timeout=1)
                return True
            except grpc.RpcError:
                return False

        wait_until(up, timeout=30)
        groups = [g.id for g in stub.NodeGroups(pb.NodeGroupsRequest()).nodeGroups]
        assert groups == ["h100-a", "h100-b", "a100-b", "trn2-c", "cpu-a"]
        stub.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="h100-a", delta=2))
        channel.close()

        def counted() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
                text = r.read().decode()
            return 'allset_attempts_total{outcome="succeeded",reason=""} 1.0' in text

        wait_until(counted, timeout=30)
        assert (tmp_path / "demo" / "attempts.db").is_file()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "on 127.0.0.1:" in out and "[plaintext]" in out
    # The scale-up in flight when SIGTERM arrived finished before the process exited.
    assert "scale-up" in err and "succeeded" in err and "allset stopped" in err


def test_serve_refuses_to_guess_about_tls() -> None:
    result = allset("serve")
    assert result.returncode == 1
    assert "--tls-cert, --tls-key and --tls-client-ca" in result.stderr
    assert "--insecure" in result.stderr
    result = allset("serve", "--insecure", "--tls-cert", "x.pem")
    assert result.returncode == 1 and "cannot be combined" in result.stderr


def test_serve_with_bad_config_names_file_and_field(tmp_path: Path) -> None:
    cfg = tmp_path / "allset.yaml"
    cfg.write_text("cluster: c\ncloud: {provider: fake}\nnodeGroups:\n"
                   "  - {id: g, zone: z, instanceType: t, cpu: 1, memory: 1Gi, maxSize: 2,"
                   " minSize: 3}\n")
    result = allset("serve", "--insecure", "--config", str(cfg))
    assert result.returncode == 1
    assert f"{cfg}: nodeGroups[0] (id g): minSize (3) must be <= maxSize (2)" in result.stderr


def test_certs_writes_pki_and_cloud_config(tmp_path: Path) -> None:
    result = allset("certs", "--out", str(tmp_path), "--server-name", "allset.allset.svc",
                    "--address", "allset.allset.svc:8086")
    assert result.returncode == 0, result.stderr
    for name in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key",
                 "operator.crt", "operator.key"):
        assert (tmp_path / name).is_file()
    assert oct((tmp_path / "client.key").stat().st_mode & 0o777) == "0o600"
    assert "address: allset.allset.svc:8086" in result.stdout
    assert f"cert: {tmp_path}/client.crt" in result.stdout
    # The status command it prints takes the operator's certificate, not CA's.
    assert (f"allset status --server allset.allset.svc:8086 --cacert {tmp_path}/ca.crt "
            f"--cert {tmp_path}/operator.crt --key {tmp_path}/operator.key") in result.stdout


def test_console_script_is_installed() -> None:
    bindir = Path(sys.executable).parent
    assert (bindir / "allset").exists()


def test_insecure_refuses_a_non_loopback_address() -> None:
    # Plaintext gRPC on every interface would let anyone reach IncreaseSize (issue 12,
    # finding 12): refused before anything starts, naming the way out.
    from tests.kit.cli import one_line, run_allset

    for address in ("0.0.0.0:8086", "[::]:8086", ":8086", "10.1.2.3:8086", "allset.example:1"):
        result = run_allset("serve", "--insecure", "--address", address)
        assert result.returncode == 1, (address, result.stderr)
        line = one_line(result.stderr)
        assert f"--address {address} is not loopback" in line
        assert "--insecure-bind-any" in line
    result = run_allset("serve", "--insecure-bind-any")
    assert result.returncode == 1
    assert one_line(result.stderr) == "allset: --insecure-bind-any only applies with --insecure"


def test_loopback_addresses() -> None:
    from provider.service.address import is_loopback

    for ok in ("127.0.0.1:8086", "127.3.4.5:1", "[::1]:8086", "localhost:8086",
               "LOCALHOST:1", "unix:/run/allset.sock"):
        assert is_loopback(ok), ok
    for bad in ("0.0.0.0:8086", "[::]:8086", ":8086", "8086", "192.168.0.1:80",
                "localhost.evil.example:80", "127.0.0.1:http", "[::ffff:10.0.0.1]:1"):
        assert not is_loopback(bad), bad
