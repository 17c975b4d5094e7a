"""Mistakes a person makes at the command line or in a file: one line that says what,
where and what to do, and a non-zero exit, never a traceback (issue 15, item 6). Every
test runs the real `allset` console script."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider.service.tls import write_dev_pki
from tests.kit.cli import ALLSET, ROOT, one_line, run_allset
from tests.kit.helpers import free_port

NOT_UTF8 = b"cluster: c\n# caf\xe9\n"
SIMULATED = str(ROOT / "deploy" / "examples" / "simulated.yaml")
REQUEST = str(ROOT / "deploy" / "examples" / "requests" / "mixed-gang.yaml")


def fails(*args: str) -> str:
    result = run_allset(*args)
    assert result.returncode == 1, result
    return one_line(result.stderr)


@pytest.fixture
def latin1(tmp_path: Path) -> Path:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(NOT_UTF8)
    return path


def test_config_not_utf8(latin1: Path, tmp_path: Path) -> None:
    expected = f"allset: {latin1}: config file is not UTF-8 text (byte 0xe9 at offset 16)"
    assert fails("serve", "--insecure", "--config", str(latin1),
                 "--state-dir", str(tmp_path)) == expected
    assert fails("plan", "--config", str(latin1), "--request", REQUEST) == expected


def test_request_and_trace_not_utf8(latin1: Path) -> None:
    assert fails("plan", "--config", SIMULATED, "--request", str(latin1)) == (
        f"allset: --request: {latin1}: request is not UTF-8 text (byte 0xe9 at offset 16)")
    assert fails("simulate", "--trace", str(latin1)) == (
        f"allset: {latin1}: trace is not UTF-8 text (byte 0xe9 at offset 16)")


@pytest.fixture
def taken() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_port_in_use(taken: str, tmp_path: Path) -> None:
    in_use = "the port is in use (another allset, or another program)"
    assert fails("serve", "--insecure", "--address", taken, "--state-dir", str(tmp_path)) == (
        f"allset: --address: cannot listen on {taken}: {in_use}")
    assert fails("serve", "--insecure", "--address", f"127.0.0.1:{free_port()}",
                 "--health-address", taken, "--state-dir", str(tmp_path)) == (
        f"allset: --health-address: cannot listen on {taken}: {in_use}")
    assert fails("serve", "--insecure", "--metrics-address", taken,
                 "--state-dir", str(tmp_path)) == (
        f"allset: --metrics-address: cannot listen on {taken}: {in_use}")


def test_the_config_is_checked_before_the_ports(taken: str, tmp_path: Path) -> None:
    """A wrong config and a port in use: the config's mistake is the one reported (the
    port was checked first, so a newcomer fixed the port only to meet the config)."""
    config = tmp_path / "bad.yaml"
    config.write_text("cluster: c\ncloud: {provider: fake}\nnodeGroups: []\n")
    line = fails("serve", "--insecure", "--config", str(config), "--address", taken,
                 "--metrics-address", taken, "--state-dir", str(tmp_path))
    assert line.startswith(f"allset: {config}: nodeGroups: "), line
    assert "cannot listen" not in line


@pytest.mark.parametrize("address", ["127.0.0.1:notaport", "localhost", "::1:8086",
                                     "127.0.0.1:70000"])
def test_bad_address(address: str) -> None:
    assert fails("serve", "--insecure", "--address", address) == (
        f"allset: --address: {address!r} is not host:port (e.g. 127.0.0.1:8086, [::1]:8086 "
        "or 0.0.0.0:8086)")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pki") / "certs"
    write_dev_pki(out, ["localhost"])
    return out


def test_certificate_and_key_swapped(pki: Path) -> None:
    assert fails("serve", "--tls-cert", str(pki / "server.key"), "--tls-key",
                 str(pki / "server.crt"), "--tls-client-ca", str(pki / "ca.crt")) == (
        f"allset: --tls-cert: {pki}/server.key holds no PEM certificate but a private key "
        "(swapped with --tls-key?)")
    assert fails("serve", "--tls-cert", str(pki / "server.crt"), "--tls-key",
                 str(pki / "client.key"), "--tls-client-ca", str(pki / "ca.crt")) == (
        f"allset: --tls-key: {pki}/client.key is not the key of the certificate in "
        f"{pki}/server.crt")


def test_plot_is_checked_before_the_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert fails("simulate", "--generate", "1", "--plot", str(tmp_path / "no" / "f.png")) == (
        f"allset: --plot: {tmp_path}/no is not a directory")
    line = fails("simulate", "--generate", "1", "--plot", str(tmp_path / "f.txt"))
    assert line.startswith(f"allset: --plot: {tmp_path}/f.txt: the name must end in one of ")
    assert ".png" in line


def test_certs_days_and_unwritable_out(tmp_path: Path) -> None:
    assert fails("certs", "--out", str(tmp_path / "c"), "--server-name", "x",
                 "--days", "-1") == "allset: --days: -1 is not between 1 and 36500"
    assert not (tmp_path / "c").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert fails("certs", "--out", str(blocker / "c"), "--server-name", "x") == (
        f"allset: --out: cannot write {blocker}/c: Not a directory")


def test_output_into_a_closed_pipe_is_quiet() -> None:
    """`allset instances --output json | head`: the reader goes away early."""
    read, write = os.pipe()
    os.close(read)  # gone before the first byte: every write fails with EPIPE
    try:
        done = subprocess.run([str(ALLSET), "instances", "--output", "json"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr  # as if killed by SIGPIPE, like `cat`
    # Nothing about the pipe (and JSON output carries no private-cloud note: scripts).
    assert done.stderr == ""


def test_a_config_without_cloud_is_refused(tmp_path: Path) -> None:
    """It used to run on the simulated cloud, quietly (issue 15, item 7)."""
    cfg = tmp_path / "allset.yaml"
    cfg.write_text("cluster: c\nnodeGroups:\n"
                   "  - {id: g, zone: z, instanceType: t, cpu: 1, memory: 1Gi, maxSize: 2}\n")
    expected = (f"allset: {cfg}: cloud: required key is missing; set cloud.provider to aws or "
                "gcp, or to fake for the simulated cloud (nothing real is launched)")
    assert fails("serve", "--insecure", "--config", str(cfg),
                 "--state-dir", str(tmp_path / "state")) == expected
    assert fails("plan", "--config", str(cfg), "--request", REQUEST) == expected



def test_grace_out_of_range(tmp_path: Path) -> None:
    """--grace bounds how long a SIGTERM may take: negative or absurd is refused."""
    for grace in ("-1", "nan", "86400"):
        assert fails("serve", "--insecure", "--address", f"127.0.0.1:{free_port()}",
                     "--grace", grace, "--state-dir", str(tmp_path)) == (
            f"allset: --grace: {float(grace):g} is not between 0 and 3600 seconds")


def test_identity_flags(pki: Path, tmp_path: Path) -> None:
    """--autoscaler-cn and --operator-cn name client certificates (issue 35, item 2)."""
    assert fails("serve", "--insecure", "--operator-cn", "me", "--state-dir",
                 str(tmp_path)) == (
        "allset: --autoscaler-cn and --operator-cn name client certificates: they apply "
        "with mTLS, not --insecure (plaintext has no identity)")
    assert fails("serve", "--tls-cert", str(pki / "server.crt"), "--tls-key",
                 str(pki / "server.key"), "--tls-client-ca", str(pki / "ca.crt"),
                 "--operator-cn", "cluster-autoscaler", "--state-dir", str(tmp_path)) == (
        "allset: --autoscaler-cn and --operator-cn both name cluster-autoscaler: an "
        "operator's certificate must not be able to change the cloud")


def _with_state_path(tmp_path: Path, state_path: str) -> Path:
    config = tmp_path / "sim.yaml"
    text = Path(SIMULATED).read_text()
    assert "    # statePath: state/cloud.db\n" in text
    config.write_text(text.replace("    # statePath: state/cloud.db\n",
                                   f"    statePath: {state_path}\n"))
    return config


def test_a_state_path_that_cannot_be_created_is_a_config_error(tmp_path: Path) -> None:
    """The README's /var/lib/allset for a user who may not create it ended in a
    FileNotFoundError traceback (issue 35, item 3): here a directory under a file."""
    (tmp_path / "blocker").write_text("")
    config = _with_state_path(tmp_path, "blocker/sub/cloud.db")
    line = (f"allset: {config}: cloud.fake.statePath: cannot create or open "
            f"{tmp_path}/blocker/sub/cloud.db: Not a directory ({tmp_path}/blocker/sub); give "
            "a file allset may create (its directory too) or one it wrote before (a relative "
            "path is relative to the config file)")
    assert fails("serve", "--insecure", "--config", str(config), "--address",
                 f"127.0.0.1:{free_port()}", "--state-dir", str(tmp_path / "state")) == line
    # Every command that opens the simulated cloud says the same.
    assert fails("instances", "--config", str(config)) == line
    assert fails("plan", "--config", str(config), "--request", REQUEST) == line


def test_a_state_path_that_is_not_allsets_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a database, but someone's notes\n" * 100)
    (tmp_path / "a-directory").mkdir()
    for name, reason in (("notes.txt", "file is not a database"),
                         ("a-directory", "unable to open database file")):
        config = _with_state_path(tmp_path, name)
        assert fails("instances", "--config", str(config)).startswith(
            f"allset: {config}: cloud.fake.statePath: cannot create or open "
            f"{tmp_path}/{name}: {reason}; "), name
    assert (tmp_path / "notes.txt").read_text().startswith("not a database")
