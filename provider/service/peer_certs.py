"""The client certificates allset is shown over mTLS, by identity (issue 53, item 7).

cert-manager renews Cluster Autoscaler's client certificate in its Secret, but CA reads
the files once, at start: until CA restarts it keeps presenting the old one, and an alert
on cert-manager's copy says nothing of that. allset sees the certificate at each call
(the connection's handshake is in the call's auth context) and exports when the one each
identity last presented ends; deploy/kubernetes/monitoring alerts on the autoscaler's, and
`allset restart-on-renewal` restarts CA once its certificate was renewed."""

from __future__ import annotations

import logging
import threading

from cryptography import x509
from prometheus_client import CollectorRegistry, Gauge

from provider.service.identities import Identities

log = logging.getLogger(__name__)

AUTOSCALER, OPERATOR = "autoscaler", "operator"
_KEPT = 16  # certificates remembered (one or two per identity in a quiet cluster)


class PresentedCertificates:
    def __init__(self, registry: CollectorRegistry, identities: Identities) -> None:
        self._identities = identities
        self.expiry = Gauge(
            "allset_client_certificate_expiry_timestamp_seconds",
            "When the client certificate an identity last presented ends (Unix seconds): "
            "autoscaler, Cluster Autoscaler's, which it reads only at start; operator.",
            ["identity"], registry=registry)
        self._lock = threading.Lock()
        self._ends: dict[bytes, float] = {}  # PEM -> notAfter

    def saw(self, common_name: str | None, pem: bytes | None) -> None:
        """A call came with this certificate (its subject's Common Name and PEM)."""
        if common_name is None or not pem:
            return
        if common_name in self._identities.autoscaler:
            identity = AUTOSCALER
        elif common_name in self._identities.operators:
            identity = OPERATOR
        else:
            return
        with self._lock:
            ends = self._ends.get(pem)
            if ends is None:
                try:
                    ends = x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()
                except ValueError as err:  # gRPC checked it; nothing to export if not
                    log.warning("a client certificate could not be read: %s", err)
                    return
                if len(self._ends) >= _KEPT:
                    self._ends.clear()
                self._ends[pem] = ends
        self.expiry.labels(identity).set(ends)
