"""Shared bench helpers: run `allset serve` as a child process, percentiles, RSS."""

from __future__ import annotations

import datetime as dt
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import grpc

from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(config: Path, extra: Sequence[str] = ()) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`allset serve` in a child process; yields it and its address once it answers."""
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "provider.cli", "--log-level", "warning", "serve", "--insecure",
         "--config", str(config), "--address", address, *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        channel = grpc.insecure_channel(address)
        stub = pb_grpc.CloudProviderStub(channel)
        deadline = time.monotonic() + 120
        while True:
            try:
                stub.GPULabel(pb.GPULabelRequest(), timeout=1)
                break
            except grpc.RpcError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    raise RuntimeError(f"allset serve did not come up: {err}") from None
                time.sleep(0.05)
        channel.close()
        yield proc, address
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size (VmHWM) of a live process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds from samples in seconds."""
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return p50 * 1000, p99 * 1000


def heading(name: str) -> str:
    """The first line a bench prints: which, on what, when, and the machine's load."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{name} on {machine()}, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, "
            f"load average {load}")


def machine() -> str:
    return f"{os.cpu_count()} cpus, Python {sys.version.split()[0]}, grpcio {grpc.__version__}"
