"""Why a client command could not reach a running allset, named by the flag to fix.

gRPC's own words for a TLS mistake are its handshaker's ("Socket closed", "Hostname
Verification Check failed", WRONG_VERSION_NUMBER), all under UNAVAILABLE. When a call
fails so, the same connection is tried again with the standard library's ssl, whose
errors are typed (SSLCertVerificationError.verify_code, SSLError.reason), one step at a
time: does the server speak TLS, does --cacert sign its certificate, is it for the name
dialled, does it take the client certificate."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH = (62, 64)
_TIMEOUT = 5.0
OPERATOR_HINT = "an operator certificate: operator.crt from `allset certs`, or the " \
    "allset-operator-tls secret"


@dataclass(frozen=True, slots=True)
class ClientTls:
    cacert: Path
    cert: Path
    key: Path
    server_name: str | None  # --server-name: the name the certificate is checked against


def file_problem(tls: ClientTls) -> str | None:
    """What is wrong with the files themselves, found without the network."""
    try:
        _context(tls.cacert)
    except ssl.SSLError:
        return f"--cacert: {tls.cacert} holds no PEM certificate"
    try:
        _context(None).load_cert_chain(tls.cert, tls.key)
    except ssl.SSLError as err:
        if err.reason == "KEY_VALUES_MISMATCH":
            return f"--key: {tls.key} is not the key of the certificate in {tls.cert}"
        return f"--cert, --key: {tls.cert} and {tls.key} are not a PEM certificate and its " \
            f"unencrypted key ({err.reason})"
    return None


def explain(server: str, host: str, port: int, tls: ClientTls | None) -> str | None:
    """One line naming the flag to fix, or None when TLS is not the trouble (then gRPC's
    own message, a refused connection say, is the one to show)."""
    try:
        speaks_tls, names = _speaks_tls(host, port)
    except OSError:
        return None  # not even TCP: gRPC's message says so
    if tls is None:
        if speaks_tls:
            return (f"--server {server} requires mTLS: give --cacert, --cert and --key "
                    f"({OPERATOR_HINT})")
        return None
    if not speaks_tls:
        return (f"--server {server} answers in plaintext, not TLS (allset serve --insecure): "
                "leave out --cacert, --cert and --key")
    name = tls.server_name or host
    try:
        _handshake(host, port, _context(tls.cacert), name)
    except ssl.SSLCertVerificationError as err:
        if err.verify_code in _NAME_MISMATCH:
            which = ", ".join(names) or "(no names)"
            return (f"--server-name: the server's certificate is for {which}, not {name}: "
                    f"dial one of those in --server, or add --server-name {names[0]}"
                    if names else "--server-name: the server's certificate names no host")
        return (f"--cacert: {tls.cacert} did not sign the server's certificate "
                f"({err.verify_message})")
    except (OSError, ssl.SSLError):
        return None
    context = _context(tls.cacert)
    context.load_cert_chain(tls.cert, tls.key)
    try:
        accepted = _handshake(host, port, context, name)
    except (OSError, ssl.SSLError):
        accepted = False
    if not accepted:
        return (f"--cert: the server refused {tls.cert} (not signed by the CA it trusts, "
                f"its --tls-client-ca); give {OPERATOR_HINT}")
    return None


def _context(cacert: Path | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_alpn_protocols(["h2"])  # what a gRPC server expects to be offered
    if cacert is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cacert)
    return context


def _handshake(host: str, port: int, context: ssl.SSLContext, name: str) -> bool:
    """A handshake, then whether the server keeps the connection: with TLS 1.3 a server
    that refuses the client's certificate says so only after the client's side is done,
    by closing; one that accepts it sends its HTTP/2 settings."""
    with socket.create_connection((host, port), timeout=_TIMEOUT) as raw, \
            context.wrap_socket(raw, server_hostname=name) as conn:
        try:
            return conn.recv(1) != b""
        except TimeoutError:
            return True  # still open: taken


def _speaks_tls(host: str, port: int) -> tuple[bool, list[str]]:
    """Whether the server completes a TLS handshake, and the names its certificate is for."""
    from cryptography import x509

    with socket.create_connection((host, port), timeout=_TIMEOUT) as raw:
        try:
            with _context(None).wrap_socket(raw, server_hostname=host) as conn:
                der = conn.getpeercert(binary_form=True)
        except (ssl.SSLError, ConnectionError):
            return False, []
    if not der:
        return True, []
    cert = x509.load_der_x509_certificate(der)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return True, []
    names = [str(n) for n in sans.get_values_for_type(x509.DNSName)]
    return True, names + [str(a) for a in sans.get_values_for_type(x509.IPAddress)]
