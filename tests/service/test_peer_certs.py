"""What client certificate Cluster Autoscaler presents, as allset sees it at each call over
mTLS (issue 53, item 7): cert-manager renews CA's certificate in its Secret, but CA keeps
presenting the one it read at start; the metric follows what is presented, not the
Secret."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from provider.service.identities import AUTOSCALER_CN, OPERATOR_CN
from provider.service.server import Server
from provider.service.tls import server_credentials, write_dev_pki
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import harness

METRIC = "allset_client_certificate_expiry_timestamp_seconds"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pki")
    write_dev_pki(out, ["localhost"])
    return out


def client_cert(pki: Path, common_name: str, days: int) -> tuple[bytes, bytes, dt.datetime]:
    """A client certificate of the pki's CA ending in ``days``: (cert PEM, key PEM, end)."""
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    ends = now + dt.timedelta(days=days)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(ends)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)
            .sign(ca_key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()), ends)


@pytest.fixture
def server(pki: Path) -> Iterator[Server]:
    h = harness()
    srv = Server(h.provider, "127.0.0.1:0",
                 server_credentials(pki / "server.crt", pki / "server.key", pki / "ca.crt"))
    srv.start()
    yield srv
    srv.stop(grace=0.5)


def call(server: Server, pki: Path, cert: bytes, key: bytes) -> None:
    """One CA call (GPULabel), on a connection of its own: a new handshake."""
    creds = grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes(), key, cert)
    with grpc.secure_channel(server.address, creds, options=[
            ("grpc.ssl_target_name_override", "localhost")]) as channel:
        try:
            pb_grpc.CloudProviderStub(channel).GPULabel(pb.GPULabelRequest(), timeout=5)
        except grpc.RpcError as err:  # the operator's: refused, but it showed its certificate
            assert err.code() is grpc.StatusCode.PERMISSION_DENIED


def presented(server: Server, identity: str) -> float | None:
    return server.provider.metrics.registry.get_sample_value(METRIC, {"identity": identity})


def test_the_expiry_is_of_the_certificate_presented_not_the_renewed_one(server: Server,
                                                                      pki: Path) -> None:
    old_cert, old_key, old_end = client_cert(pki, AUTOSCALER_CN, 20)
    assert presented(server, "autoscaler") is None
    call(server, pki, old_cert, old_key)
    assert presented(server, "autoscaler") == old_end.timestamp()
    # cert-manager renewed it: until CA restarts it presents the old one, and so it reads.
    new_cert, new_key, new_end = client_cert(pki, AUTOSCALER_CN, 90)
    call(server, pki, old_cert, old_key)
    assert presented(server, "autoscaler") == old_end.timestamp()
    call(server, pki, new_cert, new_key)  # CA restarted
    assert presented(server, "autoscaler") == new_end.timestamp()


def test_each_identity_has_its_own_and_others_none(server: Server, pki: Path) -> None:
    cert, key, ends = client_cert(pki, OPERATOR_CN, 30)
    call(server, pki, cert, key)
    assert presented(server, "operator") == ends.timestamp()
    assert presented(server, "autoscaler") is None
    stranger, stranger_key, _ = client_cert(pki, "someone-else", 10)
    call(server, pki, stranger, stranger_key)  # refused: no identity of allset's
    labels = {s.labels["identity"] for m in server.provider.metrics.registry.collect()
              if m.name == METRIC for s in m.samples}
    assert labels == {"operator"}
