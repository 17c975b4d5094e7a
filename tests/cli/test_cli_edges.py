"""Clean edges (issue 53, item 8), through the console script: Ctrl-C ends every command
with one line and status 130, with no traceback and no "leaked semaphore" after an
interrupted scale-up; `--log-format json` makes every line JSON, gRPC's own and the banner
included; `allset plan` refuses fields its request's types do not have, naming the
field's path and the one it most likely meant, as config errors now do."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from provider.cli.stderr_relay import record
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.cli import ALLSET, ROOT, one_line, run_allset
from tests.kit.helpers import free_port, wait_until

DEMO_CONFIG = ROOT / "deploy" / "examples" / "simulated.yaml"


def _start(*args: str) -> subprocess.Popen[str]:
    """The command in a process group of its own, as a shell runs a job: the Ctrl-C of
    a terminal reaches the whole group (the planning process and any helper too)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.Popen([str(ALLSET), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                            start_new_session=True)


def _ctrl_c(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGINT)


def _finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """stdout and stderr to their end: that is when every process holding them (the
    resource tracker, which would warn of leaked semaphores, among them) has ended."""
    try:
        return proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


@pytest.fixture
def silent_server() -> Iterator[socket.socket]:
    """A TCP listener that accepts and never answers: a client's call waits on it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(60)
        yield listener


REQUEST = """\
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata: {name: train, namespace: default}
spec:
  provisioningClassName: atomic-reserved.allset.dev
  podSet%s:
    - podTemplateRef: {name: gpu}
      count: 2
---
apiVersion: v1
kind: PodTemplate
metadata: {name: gpu, namespace: default}
template:
  spec:
    nodeSelect%s: {allset.dev/node-group: h100-a}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
            - matchExpressions:
                - {key: allset.dev/fabric, operat%s: In, values: [pg-a]}
    containers:
      - name: main
        image: trainer
        resources: {limits: {nvidia.com/gpu: 8}}
"""


def _request(tmp_path: Path, *, typos: bool) -> Path:
    path = tmp_path / "request.yaml"
    path.write_text(REQUEST % (("", "r", "r") if typos else ("s", "or", "or")))
    return path


# --- Ctrl-C --------------------------------------------------------------------------------


@pytest.mark.timeout(120)  # each command starts in ~2 s alone; a loaded machine is slower
@pytest.mark.parametrize("command", ["status", "instances", "plan"])
def test_ctrl_c_while_waiting_on_a_server(command: str, tmp_path: Path,
                                          silent_server: socket.socket) -> None:
    address = f"127.0.0.1:{silent_server.getsockname()[1]}"
    extra = ["--request", str(_request(tmp_path, typos=False))] if command == "plan" else []
    proc = _start(command, "--server", address, *extra)
    conn, _ = silent_server.accept()  # the command is inside its call now
    with conn:
        _ctrl_c(proc)
        _, err = _finish(proc)
    assert proc.returncode == 130, err
    assert one_line(err) == "allset: interrupted"


@pytest.mark.timeout(120)  # 3 s of simulation's CPU, then Ctrl-C
def test_ctrl_c_in_simulate() -> None:
    proc = _start("simulate", "--generate", "1", "--jobs", "2300", "--strategy", "allset")
    wait_until(lambda: _cpu_seconds(proc.pid) > 3.0, 60)  # well into the run
    _ctrl_c(proc)
    out, err = _finish(proc)
    assert proc.returncode == 130, err
    assert one_line(err) == "allset: interrupted"
    assert out == ""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serving(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    address = f"127.0.0.1:{free_port()}"
    proc = _start("serve", "--address", address, "--state-dir", str(tmp_path / "state"),
                  *args)
    return proc, address


def _answers(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=2)
            return True
        except grpc.RpcError:
            return False


@pytest.mark.timeout(120)  # serve starts in ~3 s quiet (its planning process too)
@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_in_serve_during_a_scale_up(presses: int, tmp_path: Path) -> None:
    """Once: the scale-up finishes, allset stops, 130. Twice: allset ends at once (the
    attempt is left for recovery), and multiprocessing's resource tracker found no
    semaphore name left behind (it warned of five: the planning pool's queues)."""
    proc, address = _serving(tmp_path, "--insecure")
    wait_until(lambda: _answers(address), 60)
    with grpc.insecure_channel(address) as channel:
        pb_grpc.CloudProviderStub(channel).NodeGroupIncreaseSize(
            pb.NodeGroupIncreaseSizeRequest(id="h100-a", delta=6), timeout=10)
    _ctrl_c(proc)
    if presses == 2:
        time.sleep(0.2)  # while the scale-up drains (the demo launches in 0.5 s)
        _ctrl_c(proc)
    _, err = _finish(proc)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "leaked semaphore" not in err, err
    if presses == 1:
        assert proc.returncode == 130, err
        assert "succeeded in" in err  # the scale-up in flight finished first
    else:
        assert proc.returncode in (1, 130), err  # 130 when the drain was already over


# --- --log-format json ---------------------------------------------------------------------


@pytest.mark.timeout(120)  # serve starts in ~3 s quiet
def test_json_logs_make_every_line_json(tmp_path: Path) -> None:
    """gRPC's C core logs a refused handshake through absl straight to fd 2; the banner
    was a plain line on stdout."""
    certs = tmp_path / "certs"
    assert run_allset("certs", "--out", str(certs), "--server-name", "localhost"
                      ).returncode == 0
    proc, address = _serving(tmp_path, "--log-format", "json",
                             "--tls-cert", str(certs / "server.crt"),
                             "--tls-key", str(certs / "server.key"),
                             "--tls-client-ca", str(certs / "ca.crt"))
    try:
        wait_until(lambda: _listening(address), 90)
        # A plaintext client against mTLS: refused in the handshake, which gRPC logs.
        assert not _answers(address)
    finally:
        proc.send_signal(signal.SIGTERM)
    out, err = _finish(proc)
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in (out + err).splitlines()]  # every line
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any(r["message"].startswith("allset: serving") for r in records)
    grpc_lines = [r for r in records if r["logger"] == "grpc"]
    assert any("Handshake failed" in r["message"] for r in grpc_lines), records


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as probe:
        return probe.connect_ex((host, int(port))) == 0


def test_json_errors_are_json(tmp_path: Path) -> None:
    done = run_allset("--log-format", "json", "validate", "--config",
                      str(tmp_path / "missing.yaml"))
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    found = json.loads(line)
    assert found["level"] == "ERROR" and "missing.yaml" in found["message"]


def test_a_c_core_line_becomes_a_record() -> None:
    found = record("E1207 17:52:13.036123   15285 ssl_transport_security.cc:2563] Handshake "
                   "failed with error SSL_ERROR_SSL", 0.0)
    assert (found["level"], found["logger"], found["source"]) == (
        "ERROR", "grpc", "ssl_transport_security.cc:2563")
    assert found["message"] == "Handshake failed with error SSL_ERROR_SSL"
    assert record("Traceback (most recent call last):", 0.0)["logger"] == "stderr"


# --- unknown fields ------------------------------------------------------------------------


def test_plan_refuses_unknown_fields(tmp_path: Path) -> None:
    request = _request(tmp_path, typos=True)
    for where in (["--config", str(DEMO_CONFIG)], ["--server", "127.0.0.1:1"]):
        done = run_allset("plan", *where, "--request", str(request))
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [
            f"allset: {request}:",
            "  ProvisioningRequest train: spec.podSet: unknown field (did you mean podSets?)",
            "  PodTemplate gpu: template.spec.nodeSelectr: unknown field (did you mean "
            "nodeSelector?)",
            "  PodTemplate gpu: template.spec.affinity.nodeAffinity."
            "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]."
            "matchExpressions[0].operatr: unknown field (did you mean operator?)",
        ]


def test_plan_takes_the_same_request_spelt_right(tmp_path: Path) -> None:
    done = run_allset("plan", "--config", str(DEMO_CONFIG), "--request",
                      str(_request(tmp_path, typos=False)))
    assert done.returncode in (0, 2), done.stderr  # planned (a plan, or why there is none)
    assert "unknown field" not in done.stderr


def test_config_errors_say_what_was_meant(tmp_path: Path) -> None:
    config = tmp_path / "allset.yaml"
    config.write_text(DEMO_CONFIG.read_text().replace("maxSize:", "maxSzie:", 1))
    done = run_allset("validate", "--config", str(config))
    assert done.returncode == 1
    assert any(line.endswith(".maxSzie: unknown key (did you mean maxSize?); allowed keys: "
                             "aws, bootTime, capacityTypes, cpu, devices, ephemeralStorage, "
                             "fabric, gcp, gpu, id, instanceType, labels, maxSize, memory, "
                             "minSize, options, pods, price, reservations, reservedNodes, "
                             "scaleUp, taints, zone") for line in done.stderr.splitlines())
