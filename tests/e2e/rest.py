"""A small REST client for the e2e suite: any group and kind through discovery, server-side
apply for big CRDs, and waiting for a condition. The suite talks to the API server the way a
user's tools do; allset itself uses the official client (provider/controller/kube.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import urllib3

Obj = dict[str, Any]
T = TypeVar("T")


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:600]}")
        self.status = status
        self.body = body


class Rest:
    def __init__(self, server: str, ca: str = "", cert: str = "", key: str = "") -> None:
        """TLS with a client certificate; plain HTTP (our fake API server) without one."""
        self.server = server
        timeout = urllib3.Timeout(connect=5, read=60)
        # A connection kept for each of up to 32 threads (bench/scale's kubelets): urllib3
        # keeps one by default and closes the others after their call, a TLS handshake a
        # request that the API server paid for as well.
        pool: dict[str, Any] = {"retries": False, "timeout": timeout, "maxsize": 32}
        self._http = urllib3.PoolManager(ca_certs=ca, cert_file=cert, key_file=key,
                                         cert_reqs="CERT_REQUIRED", **pool) if cert else \
            urllib3.PoolManager(**pool)
        self._kinds: dict[tuple[str, str], tuple[str, bool]] = {}

    # --- raw -----------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json") -> Obj:
        data = None if body is None else json.dumps(body).encode()
        response = self._http.request(method, self.server + path, body=data,
                                      headers={"Content-Type": content_type,
                                               "Accept": "application/json"})
        text = response.data.decode()
        if response.status >= 400:
            raise ApiError(response.status, text)
        out: Obj = json.loads(text) if text else {}
        return out

    def first_watch_event(self, path: str) -> tuple[int, Obj]:
        """Open a watch and return its HTTP status and its first event (or error body)."""
        response = self._http.request("GET", self.server + path, preload_content=False,
                                      headers={"Accept": "application/json"})
        try:
            if response.status >= 400:
                return int(response.status), json.loads(response.read() or b"{}")
            line = b""
            while not line.endswith(b"\n"):
                chunk = response.read(1)
                if not chunk:
                    break
                line += chunk
            return int(response.status), json.loads(line or b"{}")
        finally:
            response.release_conn()

    def watch_events(self, path: str, timeout_seconds: int = 2) -> list[Obj]:
        """Every event of a watch the server ends after ``timeout_seconds``. From an
        older resourceVersion the server replays what happened since, so a state that
        lasted a moment (a label put on and taken off) is seen without polling for it."""
        sep = "&" if "?" in path else "?"
        response = self._http.request(
            "GET", f"{self.server}{path}{sep}watch=true&timeoutSeconds={timeout_seconds}",
            preload_content=False, headers={"Accept": "application/json"})
        try:
            if response.status >= 400:
                raise ApiError(int(response.status), response.read().decode())
            body = response.read().decode()
        finally:
            response.release_conn()
        return [json.loads(line) for line in body.splitlines() if line.strip()]

    # --- by kind ---------------------------------------------------------------------------

    def path(self, api_version: str, kind: str, namespace: str | None = None,
             name: str | None = None) -> str:
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{plural}"
        return base + (f"/{name}" if name else "")

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        key = (api_version, kind)
        if key not in self._kinds:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for res in self.call("GET", base)["resources"]:
                if "/" not in res["name"]:
                    self._kinds[(api_version, res["kind"])] = (res["name"], res["namespaced"])
        if key not in self._kinds:
            raise KeyError(f"{kind} is not served in {api_version}")
        return self._kinds[key]

    def forget_discovery(self) -> None:
        self._kinds.clear()

    def create(self, obj: Mapping[str, Any]) -> Obj:
        meta = obj["metadata"]
        return self.call("POST", self.path(obj["apiVersion"], obj["kind"],
                                           meta.get("namespace")), obj)

    def apply(self, obj: Mapping[str, Any], manager: str = "allset-e2e") -> Obj:
        """Server-side apply (kubectl's client-side apply cannot hold Kueue's 1.4 MB CRD in
        its last-applied annotation)."""
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        return self.call("PATCH", f"{path}?fieldManager={manager}&force=true", obj,
                         "application/apply-patch+yaml")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        return self.call("GET", self.path(api_version, kind, namespace, name))

    def find(self, api_version: str, kind: str, name: str,
             namespace: str | None = None) -> Obj | None:
        try:
            return self.get(api_version, kind, name, namespace)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             selector: str = "") -> list[Obj]:
        path = self.path(api_version, kind, namespace)
        if selector:
            path += f"?labelSelector={selector}"
        items: list[Obj] = self.call("GET", path)["items"]
        return items

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
               propagation: str = "Background") -> None:
        try:
            self.call("DELETE", self.path(api_version, kind, namespace, name),
                      {"propagationPolicy": propagation})
        except ApiError as err:
            if err.status != 404:
                raise

    def merge_patch(self, api_version: str, kind: str, name: str, patch: Mapping[str, Any],
                    namespace: str | None = None, subresource: str = "") -> Obj:
        path = self.path(api_version, kind, namespace, name) + (f"/{subresource}"
                                                                 if subresource else "")
        return self.call("PATCH", path, patch, "application/merge-patch+json")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 120.0,
             every: float = 0.5, explain: Callable[[], str] | None = None) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    detail = explain() if explain else repr(last)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}: {detail}")


def condition(obj: Mapping[str, Any] | None, ctype: str) -> Obj | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            found: Obj = cond
            return found
    return None


def is_true(obj: Mapping[str, Any] | None, ctype: str) -> bool:
    cond = condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"
