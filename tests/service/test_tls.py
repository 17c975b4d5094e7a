"""mTLS: a client with a certificate from the configured CA gets in; others do not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from provider.service.server import Server
from provider.service.tls import server_credentials, write_dev_pki
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.helpers import harness


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pki")
    write_dev_pki(out, ["localhost", "127.0.0.1"])
    write_dev_pki(out / "other", ["localhost"])  # an unrelated CA
    return out


@pytest.fixture
def tls_server(pki: Path) -> Iterator[Server]:
    h = harness()
    creds = server_credentials(pki / "server.crt", pki / "server.key", pki / "ca.crt")
    srv = Server(h.provider, "127.0.0.1:0", creds)
    srv.start()
    yield srv
    srv.stop(grace=0.5)


def _stub(server: Server, creds: grpc.ChannelCredentials) -> pb_grpc.CloudProviderStub:
    # The certificate is for "localhost"; CA checks the name in its cloud-config address.
    channel = grpc.secure_channel(
        server.address, creds, options=[("grpc.ssl_target_name_override", "localhost")]
    )
    return pb_grpc.CloudProviderStub(channel)


def test_client_with_certificate_is_served(tls_server: Server, pki: Path) -> None:
    creds = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / "client.key").read_bytes(),
        certificate_chain=(pki / "client.crt").read_bytes(),
    )
    groups = _stub(tls_server, creds).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
    assert [g.id for g in groups.nodeGroups] == ["gpu", "gpu-b", "cpu"]


def test_client_without_certificate_is_refused(tls_server: Server, pki: Path) -> None:
    creds = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.crt").read_bytes())
    with pytest.raises(grpc.RpcError) as info:
        _stub(tls_server, creds).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_client_certificate_from_another_ca_is_refused(tls_server: Server, pki: Path) -> None:
    creds = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / "other" / "client.key").read_bytes(),
        certificate_chain=(pki / "other" / "client.crt").read_bytes(),
    )
    with pytest.raises(grpc.RpcError) as info:
        _stub(tls_server, creds).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_health_port_answers_probes_without_a_certificate(pki: Path) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    h = harness()
    creds = server_credentials(pki / "server.crt", pki / "server.key", pki / "ca.crt")
    srv = Server(h.provider, "127.0.0.1:0", creds, health_address="127.0.0.1:0")
    srv.start()
    try:
        probe = grpc.insecure_channel(srv.health_address)
        reply = health_pb2_grpc.HealthStub(probe).Check(health_pb2.HealthCheckRequest(),
                                                         timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:  # and nothing else
            pb_grpc.CloudProviderStub(probe).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        srv.stop(grace=0.5)


def test_rotated_certificates_are_served_without_a_restart(tmp_path: Path) -> None:
    first = tmp_path / "tls"
    write_dev_pki(first, ["localhost"])
    h = harness()
    srv = Server(h.provider, "127.0.0.1:0",
                 server_credentials(first / "server.crt", first / "server.key", first / "ca.crt"))
    srv.start()

    def ask(pki: Path) -> grpc.StatusCode | None:
        creds = grpc.ssl_channel_credentials(
            root_certificates=(pki / "ca.crt").read_bytes(),
            private_key=(pki / "client.key").read_bytes(),
            certificate_chain=(pki / "client.crt").read_bytes(),
        )
        try:
            _stub(srv, creds).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
            return None
        except grpc.RpcError as err:
            code: grpc.StatusCode = err.code()
            return code

    try:
        assert ask(first) is None
        old = tmp_path / "old"
        import shutil

        shutil.copytree(first, old)
        # A new CA and certificates moved in place (allset certs never overwrites files).
        write_dev_pki(tmp_path / "next", ["localhost"])
        for new in (tmp_path / "next").iterdir():
            new.replace(first / new.name)
        assert ask(first) is None  # the new client certificate is accepted
        assert ask(old) == grpc.StatusCode.UNAVAILABLE  # one from the old CA no longer is
    finally:
        srv.stop(grace=0.5)


def test_plaintext_client_is_refused(tls_server: Server) -> None:
    channel = grpc.insecure_channel(tls_server.address)
    with pytest.raises(grpc.RpcError) as info:
        pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


# --- who may call what (issue 35, item 2) ----------------------------------------------------


def _as(pki: Path, name: str) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / f"{name}.key").read_bytes(),
        certificate_chain=(pki / f"{name}.crt").read_bytes(),
    )


def _call(server: Server, creds: grpc.ChannelCredentials, method: str,
          request: bytes = b"") -> grpc.StatusCode | None:
    """The status of one call, None when it was served. Raw bytes in, no stub: what the
    server refuses before decoding anything is what these tests are about."""
    channel = grpc.secure_channel(server.address, creds,
                                  options=[("grpc.ssl_target_name_override", "localhost")])
    try:
        channel.unary_unary(method)(request, timeout=5)
        return None
    except grpc.RpcError as err:
        code: grpc.StatusCode = err.code()
        if code is grpc.StatusCode.PERMISSION_DENIED:
            _DETAILS[method] = err.details()
        return code
    finally:
        channel.close()


_DETAILS: dict[str, str] = {}
CLOUD = "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider"


def _signed_by_the_ca(pki: Path, out: Path, common_name: str) -> Path:
    """A client certificate from the allset CA with a Common Name of neither identity."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))
    out.mkdir(exist_ok=True)
    (out / f"{common_name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / f"{common_name}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (out / "ca.crt").write_bytes((pki / "ca.crt").read_bytes())
    return out


def test_cas_certificate_calls_cloudprovider_but_not_the_admin_service(
        tls_server: Server, pki: Path) -> None:
    from provider.service.admin import PLAN_METHOD, STATUS_METHOD

    ca = _as(pki, "client")
    assert _call(tls_server, ca, f"{CLOUD}/NodeGroups") is None
    increase = pb.NodeGroupIncreaseSizeRequest(id="gpu", delta=1).SerializeToString()
    assert _call(tls_server, ca, f"{CLOUD}/NodeGroupIncreaseSize", increase) is None
    for method in (STATUS_METHOD, PLAN_METHOD):
        assert _call(tls_server, ca, method, b"{}") == grpc.StatusCode.PERMISSION_DENIED
    assert _DETAILS[STATUS_METHOD].startswith(
        'client "CN=cluster-autoscaler" may not call allset.admin.v1.Admin/Status: it is not '
        "an operator identity (serve --operator-cn allset-operator)")


def test_the_operator_certificate_reads_but_changes_nothing(tls_server: Server,
                                                            pki: Path) -> None:
    import json

    from provider.service.admin import STATUS_METHOD

    operator = _as(pki, "operator")
    channel = grpc.secure_channel(tls_server.address, operator,
                                  options=[("grpc.ssl_target_name_override", "localhost")])
    with channel:
        found = json.loads(channel.unary_unary(STATUS_METHOD)(b"{}", timeout=5))
    assert found["acting"] is True
    assert _call(tls_server, operator, f"{CLOUD}/NodeGroups") is None
    assert _call(tls_server, operator, f"{CLOUD}/NodeGroupTargetSize",
                 pb.NodeGroupTargetSizeRequest(id="gpu").SerializeToString()) is None
    for name in ("NodeGroupIncreaseSize", "NodeGroupDeleteNodes",
                 "NodeGroupDecreaseTargetSize", "Cleanup", "Refresh"):
        method = f"{CLOUD}/{name}"
        assert _call(tls_server, operator, method) == grpc.StatusCode.PERMISSION_DENIED, name
        assert _DETAILS[method].startswith(
            f'client "CN=allset-operator" may not call {method[1:]}: it is an operator '
            "identity"), _DETAILS[method]
    # Nothing was launched on its behalf.
    assert tls_server.provider.fleet.view("gpu").target_size == 0


def test_a_certificate_of_neither_identity_gets_only_health(tls_server: Server, pki: Path,
                                                             tmp_path: Path) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from provider.service.admin import STATUS_METHOD

    stranger = _as(_signed_by_the_ca(pki, tmp_path / "pki", "someone"), "someone")
    assert _call(tls_server, stranger, f"{CLOUD}/NodeGroups") == \
        grpc.StatusCode.PERMISSION_DENIED
    assert "neither the autoscaler identity (serve --autoscaler-cn cluster-autoscaler) " \
        "nor an operator identity" in _DETAILS[f"{CLOUD}/NodeGroups"]
    assert _call(tls_server, stranger, STATUS_METHOD) == grpc.StatusCode.PERMISSION_DENIED
    channel = grpc.secure_channel(tls_server.address, stranger,
                                  options=[("grpc.ssl_target_name_override", "localhost")])
    with channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                          timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_identities_are_the_serve_flags(pki: Path, tmp_path: Path) -> None:
    from provider.service.admin import STATUS_METHOD
    from provider.service.identities import Identities

    h = harness()
    creds = server_credentials(pki / "server.crt", pki / "server.key", pki / "ca.crt")
    srv = Server(h.provider, "127.0.0.1:0", creds,
                 identities=Identities(operators=frozenset({"someone"})))
    srv.start()
    try:
        someone = _as(_signed_by_the_ca(pki, tmp_path / "pki", "someone"), "someone")
        assert _call(srv, someone, STATUS_METHOD) is None
        assert _call(srv, _as(pki, "operator"), STATUS_METHOD) == \
            grpc.StatusCode.PERMISSION_DENIED
    finally:
        srv.stop(grace=0.5)


def test_every_cloudprovider_method_is_read_only_or_the_autoscalers() -> None:
    """The operator's allowlist names real methods, and leaves out every one that changes
    the cloud or sets off a cloud call."""
    from provider.service.identities import READ_ONLY

    methods = set(pb.DESCRIPTOR.services_by_name["CloudProvider"].methods_by_name)
    assert methods >= READ_ONLY
    assert methods - READ_ONLY == {"NodeGroupIncreaseSize", "NodeGroupDeleteNodes",
                                   "NodeGroupDecreaseTargetSize", "Cleanup", "Refresh"}
