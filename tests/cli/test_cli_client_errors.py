"""The client side's mistakes, each one line naming the flag to fix (issue 35, item 7):
`allset status` (and `plan --server`, the same call) against real servers on 127.0.0.1,
through the console script."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from provider.service.server import Server
from provider.service.tls import server_credentials, write_dev_pki
from tests.kit.cli import Served, one_line, run_allset
from tests.kit.helpers import harness, wait_until

HINT = ("an operator certificate: operator.crt from `allset certs`, or the "
        "allset-operator-tls secret")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pki") / "certs"
    write_dev_pki(out, ["localhost"])  # for the name, not 127.0.0.1
    write_dev_pki(out / "other", ["localhost"])  # another CA
    return out


@pytest.fixture(scope="module")
def mtls(pki: Path) -> Iterator[str]:
    srv = Server(harness().provider, "127.0.0.1:0",
                 server_credentials(pki / "server.crt", pki / "server.key", pki / "ca.crt"))
    srv.start()
    yield srv.address
    srv.stop(grace=0.5)


@pytest.fixture(scope="module")
def plaintext() -> Iterator[str]:
    srv = Server(harness().provider, "127.0.0.1:0", None)
    srv.start()
    yield srv.address
    srv.stop(grace=0.5)


def status(*args: str) -> str:
    """The one line a failed `allset status` prints (exit 1, no traceback, nothing else:
    not gRPC's own log lines either)."""
    out = run_allset("status", *args)
    assert out.returncode == 1, out
    return one_line(out.stderr)


def tls(pki: Path, name: str = "operator", ca: Path | None = None) -> list[str]:
    return ["--cacert", str(ca or pki / "ca.crt"), "--cert", str(pki / f"{name}.crt"),
            "--key", str(pki / f"{name}.key")]


def test_the_operator_certificate_with_the_certificates_name_is_served(
        mtls: str, pki: Path) -> None:
    out = run_allset("status", "--server", mtls, *tls(pki), "--server-name", "localhost",
                     "--output", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["acting"] is True


def test_no_certificates_against_mtls(mtls: str) -> None:
    # Was: UNAVAILABLE: failed to connect to all addresses; ... Socket closed
    assert status("--server", mtls) == (
        f"allset: --server {mtls} requires mTLS: give --cacert, --cert and --key ({HINT})")


def test_a_certificate_for_localhost_dialled_as_127_0_0_1(mtls: str, pki: Path) -> None:
    # Was: ... Hostname Verification Check failed.
    assert status("--server", mtls, *tls(pki)) == (
        "allset: --server-name: the server's certificate is for localhost, not 127.0.0.1: "
        "dial one of those in --server, or add --server-name localhost")


def test_tls_to_a_plaintext_server(plaintext: str, pki: Path) -> None:
    # Was: ... WRONG_VERSION_NUMBER, and gRPC's own handshake log lines.
    assert status("--server", plaintext, *tls(pki), "--server-name", "localhost") == (
        f"allset: --server {plaintext} answers in plaintext, not TLS (allset serve "
        "--insecure): leave out --cacert, --cert and --key")


def test_a_cacert_that_did_not_sign_the_server(mtls: str, pki: Path) -> None:
    line = status("--server", mtls, *tls(pki, ca=pki / "other" / "ca.crt"),
                  "--server-name", "localhost")
    assert line.startswith(f"allset: --cacert: {pki}/other/ca.crt did not sign the server's "
                           "certificate ("), line


def test_a_client_certificate_the_server_does_not_trust(mtls: str, pki: Path) -> None:
    assert status("--server", mtls, *tls(pki / "other"), "--cacert", str(pki / "ca.crt"),
                  "--server-name", "localhost") == (
        f"allset: --cert: the server refused {pki}/other/operator.crt (not signed by the CA "
        f"it trusts, its --tls-client-ca); give {HINT}")


def test_a_key_that_is_not_the_certificates(mtls: str, pki: Path) -> None:
    assert status("--server", mtls, "--cacert", str(pki / "ca.crt"), "--cert",
                  str(pki / "operator.crt"), "--key", str(pki / "client.key")) == (
        f"allset: --key: {pki}/client.key is not the key of the certificate in "
        f"{pki}/operator.crt")


@pytest.mark.parametrize("server", ["localhost", "127.0.0.1", ":8086"])
def test_a_server_without_a_port_is_not_dialled_on_443(server: str) -> None:
    example = f"{server}:8086" if ":" not in server else "127.0.0.1:8086"
    expected = (f"allset: --server: {server!r} is not host:port; give the port allset serves "
                f"on (8086 unless its --address says otherwise), e.g. {example}")
    assert status("--server", server) == expected
    out = run_allset("plan", "--server", server, "--request", "r.yaml")
    assert out.returncode == 1 and one_line(out.stderr) == expected


def test_serve_with_a_kubeconfig_that_is_not_there(tmp_path: Path) -> None:
    """Was: the controller retried "no such file" every few seconds, forever."""
    out = run_allset("serve", "--insecure", "--address", "127.0.0.1:0", "--kubeconfig",
                     str(tmp_path / "nope"), "--state-dir", str(tmp_path / "state"),
                     timeout=30)
    assert out.returncode == 1
    assert one_line(out.stderr) == (
        f"allset: --kubeconfig: cannot read {tmp_path}/nope: No such file or directory")


@pytest.mark.parametrize(("text", "why"), [
    ("clusters: [\n", "not YAML: line 2, column 1: expected the node content, but found "
                       "'<stream end>'"),
    ("{}\n", "Expected key current-context in kube-config"),
    ("- a list\n", "not a mapping of clusters, contexts and users"),
    ("current-context: dev\ncontexts: []\n",
     "Expected object with name dev in kube-config/contexts list"),
    ("current-context: dev\ncontexts:\n- name: dev\n  context: {cluster: k, user: u}\n"
     "clusters: []\nusers: []\n", "Expected object with name k in kube-config/clusters list"),
])
def test_serve_with_a_kubeconfig_it_cannot_use(tmp_path: Path, text: str, why: str) -> None:
    """Was: the controller retried the loader's error (a ParserError, "Expected key
    current-context") every few seconds, forever."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(text)
    out = run_allset("serve", "--insecure", "--address", "127.0.0.1:0", "--kubeconfig",
                     str(kubeconfig), "--state-dir", str(tmp_path / "state"), timeout=30)
    assert out.returncode == 1
    assert one_line(out.stderr) == (
        f"allset: --kubeconfig: {kubeconfig} is not a usable kubeconfig: {why}")


def test_log_flags_after_the_command(tmp_path: Path) -> None:
    assert status("--server", "localhost", "--log-level", "debug").startswith(
        "allset: --server: 'localhost' is not host:port")
    served = Served(["--log-format", "json", "--log-level", "info",
                     "--state-dir", str(tmp_path / "state")], tmp_path / "serve.log")
    try:
        wait_until(served.answers, 30)
    finally:
        served.stop()
    logged = [line for line in served.text().splitlines() if line.startswith("{")]
    assert logged, served.text()
    assert all(json.loads(line)["message"] for line in logged)
