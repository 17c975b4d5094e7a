"""Starting the controller without betting the process on the API server.

CA's provider (the gRPC service) must keep serving while the API server is down, the
kubeconfig is not there yet, or RBAC is wrong: those are the controller's problems, and
ProvisioningRequests simply wait. So the controller is built and started in a thread
that retries with backoff and says, in one line per try, what is wrong."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("allset.controller")


class Startable(Protocol):
    def start(self) -> None: ...
    def stop(self, timeout: float = 30.0) -> bool: ...  # True: none of its threads runs


class StartFailed(Exception):
    """A reason the controller could not start, already worded for an operator."""


class RetryingStart:
    """Calls ``build`` then ``start`` on what it built until both succeed or ``stop``.
    ``build`` runs again after a failure of its own (a kubeconfig that appears later);
    once it succeeded, only ``start`` is retried (the controller is built once)."""

    def __init__(self, build: Callable[[], Startable], *, initial: float = 2.0,
                 maximum: float = 60.0, explain: Callable[[BaseException], str] = str,
                 ) -> None:
        self._build = build
        self._initial, self._maximum = initial, maximum
        self._explain = explain
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.controller: Startable | None = None
        self.started = threading.Event()
        self.failures = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="provreq-start", daemon=True)
        self._thread.start()

    def run_once(self) -> bool:
        """One try; True once the controller runs."""
        try:
            with self._lock:
                if self._stop.is_set():
                    return False
                if self.controller is None:
                    self.controller = self._build()
                self.controller.start()
                if self._stop.is_set():
                    # stop() gave up on this try while it hung on the API server: what
                    # it just started must not run on after the stop.
                    self.controller.stop(0.0)
                    return False
                self.started.set()
            log.info("ProvisioningRequest controller is up%s",
                     f" after {self.failures} failed tries" if self.failures else "")
            return True
        except Exception as err:  # anything: the gRPC service must outlive it
            self.failures += 1
            delay = self.delay()
            log.error("ProvisioningRequest controller not started: %s; retrying in %.0fs "
                      "(the gRPC service for Cluster Autoscaler keeps serving)",
                      self._explain(err), delay)
            return False

    def delay(self) -> float:
        """Seconds before the next try: doubling from ``initial`` up to ``maximum``."""
        return min(self._maximum, self._initial * 2.0 ** max(0, self.failures - 1))

    def _run(self) -> None:
        while not self.run_once():
            if self._stop.wait(self.delay()):
                return

    def stop(self, timeout: float = 30.0) -> bool:
        """Within ``timeout``: True when no controller thread still runs (one that does
        may be in an attempt, so the caller must not hand its lease over)."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        # A try hung on the API server (an outage) holds the lock: wait a moment, not the
        # whole grace, which the scale-ups' drain needs more. Such a try stops what it
        # starts once it returns (run_once).
        wait = timeout if self.started.is_set() else min(timeout, 1.0)
        if self._thread is not None:
            self._thread.join(wait)
        if not self._lock.acquire(timeout=max(0.0, min(wait, deadline - time.monotonic()))):
            # A try still hangs on the API server; the process exits without it. Nothing
            # started, so nothing of the controller acts on the cloud.
            return True
        try:
            if self.started.is_set() and self.controller is not None:
                return self.controller.stop(max(0.0, deadline - time.monotonic()))
            return True
        finally:
            self._lock.release()


def explain(err: BaseException) -> str:
    """One line for what the Kubernetes client raised (its own messages run to a page)."""
    from kubernetes.client.rest import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError, MaxRetryError

    if isinstance(err, StartFailed | ConfigException):
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    if isinstance(err, ApiException):
        hint = {401: " (are the credentials valid?)",
                403: " (does the service account have allset's RBAC?)",
                404: " (is the ProvisioningRequest CRD installed?)"}.get(err.status or 0, "")
        return f"the API server answered {err.status} {err.reason}{hint}"
    if isinstance(err, MaxRetryError):
        pool = err.pool
        where = f"{pool.host}:{pool.port}" if pool is not None else "the API server"
        reason = str(err.reason).rsplit(": ", 1)[-1] if err.reason else "no answer"
        return f"cannot reach the API server at {where}: {reason}"
    if isinstance(err, HTTPError | OSError):
        return f"cannot reach the API server: {err}"
    return f"{type(err).__name__}: {err}"
