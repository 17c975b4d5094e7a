"""The gRPC server: externalgrpc servicer, health and reflection, mTLS, graceful stop."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from provider.app import Provider
from provider.service.admin import AdminPlans, add_admin
from provider.service.authz import Authorization
from provider.service.health import Health
from provider.service.identities import Identities
from provider.service.peer_certs import PresentedCertificates
from provider.service.servicer import CloudProviderServicer
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CloudProvider"].full_name
# Health services for kubelet: the process serves (liveness), its first cloud listing is
# in (readiness, leader or standby). "" and SERVICE_NAME read SERVING only while this
# replica acts: what a client of the CloudProvider service wants to know.
LIVE = "allset.live"
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
READY = "allset.ready"


class Server:
    def __init__(
        self,
        provider: Provider,
        address: str,
        credentials: grpc.ServerCredentials | None,
        *,
        max_workers: int = 16,
        health_address: str = "",
        identities: Identities | None = None,
        admin_socket: str = "",
    ) -> None:
        self.provider = provider
        self._stopping = False
        # Over mTLS each method is for one identity (service/identities.py). Plaintext
        # carries no identity to check: it serves loopback only, unless told otherwise.
        identities = identities or Identities()
        self.certificates = PresentedCertificates(provider.metrics.registry, identities)
        interceptors = [] if credentials is None else [
            Authorization(identities, observe=self.certificates.saw)]
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
            interceptors=interceptors,
            options=[("grpc.so_reuseport", 0)],
        )
        pb_grpc.add_CloudProviderServicer_to_server(CloudProviderServicer(provider), self._server)
        self._admin = add_admin(self._server, provider)
        self._health = Health()  # its status changes never wait on a Watch client
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, HEALTH_SERVICE, reflection.SERVICE_NAME), self._server
        )
        if credentials is None:
            self.port = self._server.add_insecure_port(address)
        else:
            self.port = self._server.add_secure_port(address, credentials)
        if self.port == 0:
            raise OSError(f"cannot listen on {address}")
        host = address.rsplit(":", 1)[0]
        self.address = f"{host}:{self.port}"
        # Kubelet's gRPC probes present no client certificate, so with mTLS on the main
        # port they get a plaintext port that serves health and nothing else.
        self._probe: grpc.Server | None = None
        self.health_address = ""
        if health_address:
            self._probe = grpc.server(ThreadPoolExecutor(max_workers=2,
                                                         thread_name_prefix="probe"))
            health_pb2_grpc.add_HealthServicer_to_server(self._health, self._probe)
            port = self._probe.add_insecure_port(health_address)
            if port == 0:
                raise OSError(f"cannot listen on {health_address}")
            self.health_address = f"{health_address.rsplit(':', 1)[0]}:{port}"
        # The admin service alone, plaintext, on a Unix socket inside the pod: what
        # `kubectl exec <pod> -- allset status --server unix:PATH` asks. Whoever may exec
        # into the pod (Kubernetes RBAC on pods/exec) or runs as its user may read it; it
        # cannot change the cloud (no CloudProvider service here), and needs no certificate
        # or NetworkPolicy rule: it never leaves the pod.
        self._local: grpc.Server | None = None
        self._local_admin: AdminPlans | None = None
        self.admin_socket = admin_socket
        if admin_socket:
            self._local = grpc.server(ThreadPoolExecutor(max_workers=2,
                                                         thread_name_prefix="admin-local"))
            self._local_admin = add_admin(self._local, provider)
            if self._local.add_insecure_port(f"unix:{admin_socket}") == 0:
                raise OSError(f"cannot listen on unix:{admin_socket}")

    def start(self) -> None:
        """Listen at once (probes and CA get a clear answer), but report SERVING only while
        the provider may act (fleet read, lease held); otherwise CA's calls are refused
        with UNAVAILABLE."""
        for name in ("", SERVICE_NAME, READY):
            self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self._health.set(LIVE, health_pb2.HealthCheckResponse.SERVING)
        self._server.start()
        if self._probe is not None:
            self._probe.start()
        if self._local is not None:
            self._local.start()
            os.chmod(self.admin_socket, 0o600)  # the pod's user only (gRPC honours umask)
        self.provider.start()
        self.provider.watch_serving(self._serving)
        if not self.provider.acting():
            log.warning("allset listening on %s, not serving: %s", self.address,
                        self.provider.not_ready_reason())

    def _serving(self, acting: bool) -> None:
        """Health follows whether this process may act: its fleet read, and the lease
        held (a standby is not Ready, so CA's Service reaches only the leader)."""
        if self._stopping:
            return
        serving, not_serving = (health_pb2.HealthCheckResponse.SERVING,
                                health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", SERVICE_NAME):
            self._health.set(name, serving if acting else not_serving)
        self._health.set(READY, serving if self.provider.ready.is_set() else not_serving)
        if acting:
            log.info("allset serving %s on %s", SERVICE_NAME, self.address)

    def refuse(self) -> None:
        """The first step of a shutdown: health goes NOT_SERVING and no new scale-up is
        taken, before anything else drains (the ones in flight go on)."""
        self._stopping = True
        self._health.enter_graceful_shutdown()
        self.provider.scaleups.refusing = True

    def stop(self, grace: float = 10.0) -> bool:
        """Health goes NOT_SERVING, scale-ups in flight finish (commit or roll back), then
        the server stops, letting RPCs in progress complete: all within ``grace`` seconds.
        Returns whether the provider drained (Provider.stop): False leaves attempts still
        running, for the caller to end the process without handing the lease over."""
        deadline = time.monotonic() + grace
        self.refuse()
        # Even at --grace 0 an idle pool gets a moment to join (within the exit margin).
        drained = self.provider.stop(timeout=max(grace, 1.0))
        left = max(0.0, deadline - time.monotonic())
        # A handler that ignores its cancellation would keep the stop from completing:
        # the wait is bounded too (the process's exit is bounded by lifecycle.shutdown).
        if not self._server.stop(left).wait(left + 1.0):
            log.warning("gRPC handlers still running %.0fs after the stop", left + 1.0)
        if self._probe is not None:
            self._probe.stop(0).wait(1.0)
        if self._local is not None:
            self._local.stop(0).wait(1.0)
        if self._local_admin is not None:
            self._local_admin.shutdown()
        self._admin.shutdown()
        log.info("allset stopped" if drained else
                 "allset stopped serving; attempts still in flight are left for recovery")
        return drained

    def wait(self, timeout: float | None = None) -> bool:
        return bool(self._server.wait_for_termination(timeout))
