"""Server credentials and the dev certificate authority behind `allset certs`."""

from __future__ import annotations

import datetime as dt
import errno
import ipaddress
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from provider.base.files import create_private, private_dir
from provider.service.identities import AUTOSCALER_CN, OPERATOR_CN


def server_credentials(cert: Path, key: Path, client_ca: Path) -> grpc.ServerCredentials:
    """mTLS: the server presents ``cert`` and requires a client certificate from
    ``client_ca``. The files are read again when they change (cert-manager renews them in
    place), so a rotation needs no restart: each new connection gets the current files."""
    files = _CertFiles(cert, key, client_ca)
    return grpc.dynamic_ssl_server_credentials(
        files.configuration(), files.changed, require_client_authentication=True
    )


class _CertFiles:
    def __init__(self, cert: Path, key: Path, client_ca: Path) -> None:
        self._paths = (cert, key, client_ca)
        self._stamp = self._stamps()
        self._lock = threading.Lock()

    def _stamps(self) -> tuple[tuple[int, int], ...]:
        return tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in self._paths)

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        cert, key, client_ca = (p.read_bytes() for p in self._paths)
        return grpc.ssl_server_certificate_configuration([(key, cert)],
                                                         root_certificates=client_ca)

    def changed(self) -> grpc.ServerCertificateConfiguration | None:
        """Called by gRPC before each handshake: a new configuration if the files moved."""
        with self._lock:
            try:
                stamp = self._stamps()
                if stamp == self._stamp:
                    return None
                config = self.configuration()
            except (OSError, ValueError):
                return None  # mid-write or missing: keep serving the last good files
            self._stamp = stamp
            return config


PKI_FILES = ("ca.crt", "ca.key", "server.crt", "server.key", "client.crt", "client.key",
             "operator.crt", "operator.key")


@dataclass(frozen=True, slots=True)
class Issued:
    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    if private:
        create_private(path, data)  # 0600 from creation: never readable, even for a moment
    else:
        path.write_bytes(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_dev_pki(out: Path, server_names: list[str], days: int = 365) -> dict[str, Issued]:
    """A CA, a server certificate for ``server_names``, a client certificate for CA's
    externalgrpc client and one for operators (`allset status`, `allset plan --server`),
    their subjects the two identities the server tells apart (identities.py), all
    written as PEM files under ``out`` (created 0700 if missing).
    Existing files are never overwritten: FileExistsError names the first one, and
    nothing is written."""
    for name in PKI_FILES:
        if (out / name).exists() or (out / name).is_symlink():
            raise FileExistsError(errno.EEXIST, "already exists", str(out / name))
    private_dir(out)
    now = dt.datetime.now(dt.UTC)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "allset dev CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(out / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(out / "ca.key", _pem_key(ca_key), private=True)

    def leaf(name: str, common_name: str, usage: x509.ObjectIdentifier,
             sans: list[x509.GeneralName]) -> Issued:
        key = _key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        issued = Issued(out / f"{name}.crt", out / f"{name}.key")
        _write(issued.cert, cert.public_bytes(serialization.Encoding.PEM))
        _write(issued.key, _pem_key(key), private=True)
        return issued

    sans: list[x509.GeneralName] = []
    for n in server_names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    return {
        "ca": Issued(out / "ca.crt", out / "ca.key"),
        "server": leaf("server", server_names[0], ExtendedKeyUsageOID.SERVER_AUTH, sans),
        "client": leaf("client", AUTOSCALER_CN, ExtendedKeyUsageOID.CLIENT_AUTH, []),
        "operator": leaf("operator", OPERATOR_CN, ExtendedKeyUsageOID.CLIENT_AUTH, []),
    }


def check_server_files(cert: Path, key: Path, client_ca: Path) -> str | None:
    """Why these files cannot serve mTLS, naming the flag, or None. gRPC itself only says
    "Failed to bind" when, say, the certificate and the key are swapped."""
    try:
        chain = x509.load_pem_x509_certificates(cert.read_bytes())
    except ValueError:
        swapped = b"PRIVATE KEY" in cert.read_bytes()
        return f"--tls-cert: {cert} holds no PEM certificate" + (
            " but a private key (swapped with --tls-key?)" if swapped else "")
    try:
        private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    except (ValueError, TypeError):
        swapped = b"CERTIFICATE" in key.read_bytes()
        return f"--tls-key: {key} holds no unencrypted PEM private key" + (
            " but a certificate (swapped with --tls-cert?)" if swapped else "")
    try:
        x509.load_pem_x509_certificates(client_ca.read_bytes())
    except ValueError:
        return f"--tls-client-ca: {client_ca} holds no PEM certificate"
    public = private.public_key().public_bytes(serialization.Encoding.DER,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    ours = chain[0].public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo)
    if public != ours:
        return f"--tls-key: {key} is not the key of the certificate in {cert}"
    return None
