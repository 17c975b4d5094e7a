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
