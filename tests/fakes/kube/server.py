"""The HTTP face of the fake: real API paths and verbs, JSON bodies, `Status` errors, and
watches streamed as newline-delimited JSON events over chunked HTTP/1.1."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.kube import errors, resources, selectors
from tests.fakes.kube.errors import ApiError
from tests.fakes.kube.resources import Route
from tests.fakes.kube.store import Store, render

Json = dict[str, Any]

HOLD_LIMIT = 60.0  # a held request is applied after this long even if never released

# Query parameters whose meaning the fake does not implement: refused, never ignored.
UNMODELLED = ("dryRun", "resourceVersionMatch", "sendInitialEvents", "continue")


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def verb(method: str, route: Route, query: dict[str, str]) -> str:
    """The verb as RBAC and audit logs name it."""
    named = bool(route.name)
    if route.subresource and method not in ("GET", "PUT", "PATCH"):
        raise errors.method_not_allowed()
    if method == "GET":
        if named and _flag(query.get("watch")):
            raise errors.not_modelled("watch on a single-object path (use a fieldSelector)")
        return "get" if named else ("watch" if _flag(query.get("watch")) else "list")
    if method == "POST" and not named and (route.namespace or not route.resource.namespaced):
        return "create"
    if method in ("PUT", "PATCH") and named:
        return "update" if method == "PUT" else "patch"
    if method == "DELETE" and named:
        return "delete"
    if method == "DELETE":
        raise errors.not_modelled("deletecollection")
    raise errors.method_not_allowed()


def _json_body(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError as err:
        raise errors.bad_request(f"error decoding request body: {err}") from err


def handle(store: Store, name: str, route: Route, query: dict[str, str], raw: bytes,
           content_type: str) -> tuple[int, Json]:
    """Every verb but watch: (HTTP status, JSON body)."""
    for param in UNMODELLED:
        if param in query:
            raise errors.not_modelled(f"the {param} parameter")
    res, version, ns = route.resource, route.version, route.namespace
    status = route.subresource == "status"
    if name == "get":
        return 200, render(store.get(res, ns, route.name), res, version)
    if name == "list":
        keep = selectors.predicate(res, query.get("labelSelector"), query.get("fieldSelector"))
        items, rv = store.select(res, ns, keep)
        limit = int(query.get("limit") or 0)
        meta: Json = {"resourceVersion": str(rv)}
        if 0 < limit < len(items):
            # The first page of a chunked list: `limit` items, a `continue` token and the
            # count left (https://kubernetes.io/docs/reference/using-api/api-concepts/
            # #retrieving-large-results-sets-in-chunks). Asking for a later page (the
            # `continue` parameter) is not modelled and answers 501.
            meta |= {"continue": f"fakekube-page-2-at-{rv}",
                     "remainingItemCount": len(items) - limit}
            items = items[:limit]
        rendered = [render(i, res, version) for i in items]
        if not res.custom:  # built-in list items carry no type meta
            for item in rendered:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return 200, {"apiVersion": res.api_version(version), "kind": f"{res.kind}List",
                     "metadata": meta, "items": rendered}
    if name == "create":
        return 201, render(store.create(res, version, ns, _json_body(raw)), res, version)
    if name == "update":
        out = store.update(res, version, ns, route.name, _json_body(raw), status=status)
        return 200, render(out, res, version)
    if name == "patch":
        out = store.patch(res, version, ns, route.name, content_type, raw, status=status)
        return 200, render(out, res, version)
    if name == "delete":
        options = _json_body(raw)
        obj, gone = store.delete(res, ns, route.name, options)
        if gone and not res.delete_returns_object:
            details = {"name": route.name, "kind": res.plural,
                       "uid": obj["metadata"]["uid"]}
            if res.group:
                details["group"] = res.group
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Success", "details": details}
        # The apiserver answers 202 for a held deletion only when orphanDependents=false
        # was sent (handlers/delete.go); otherwise 200 with the object.
        held_202 = not gone and isinstance(options, dict) and \
            options.get("orphanDependents") is False
        return (202 if held_202 else 200), render(obj, res, version)
    raise errors.method_not_allowed()


@dataclass
class Hold:
    """One API request held at the server before it is applied: the request has arrived
    (and its client waits, or times out), and it is applied only once released, as a
    write stuck in a partition or a slow proxy lands late. One-shot: the first request
    that matches is held, later ones pass."""

    verb: str  # as RBAC names it: "update", "patch", "create", ...
    counted: str  # "provisioningrequests/status", "nodes", ...
    name: str = ""  # only a request for this object ("" for any)
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    answered: threading.Event = field(default_factory=threading.Event)
    code: int | None = None  # what the server answered once released
    dropped: bool = False  # the server stopped while holding it: never applied

    def release(self) -> None:
        self.released.set()

    def drop(self) -> None:
        self.dropped = True
        self.released.set()

    def matches(self, verb: str, route: Route) -> bool:
        return (verb, route.counted) == (self.verb, self.counted) and \
            (not self.name or self.name == route.name)


# The reasons the API server gives with these codes (apimachinery's StatusReason).
_REASONS = {403: "Forbidden", 429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout"}


@dataclass
class Fault:
    """The next ``times`` API requests of ``verb`` on ``counted`` (``name``: only for that
    object) are answered ``code`` without being applied: an API server that is
    overloaded, restarting or losing its etcd for a moment."""

    verb: str
    counted: str
    name: str = ""
    code: int = 500
    times: int = 1

    def matches(self, verb: str, route: Route) -> bool:
        return self.times > 0 and (verb, route.counted) == (self.verb, self.counted) and \
            (not self.name or self.name == route.name)

    def error(self) -> ApiError:
        return ApiError(self.code, _REASONS.get(self.code, "InternalError"),
                        f"fakekube: an injected {self.code} for this {self.verb}")


@dataclass
class Context:
    """What the handlers of one server share with the FakeKube that runs it."""

    store: Store
    watch_timeout: float
    absent: frozenset[str] = frozenset()  # API groups this cluster does not serve
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    # The same requests by (group, verb, resource): plurals alone collide (podgroups).
    calls: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    discoveries: Counter[str] = field(default_factory=Counter)  # GETs of /apis/<g>/<v>
    watchers: Counter[str] = field(default_factory=Counter)  # open watches by resource
    agents: Counter[str] = field(default_factory=Counter)  # requests by User-Agent
    connections: set[socket.socket] = field(default_factory=set)
    holds: list[Hold] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fault(self, verb: str, route: Route) -> ApiError | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(verb, route):
                    fault.times -= 1
                    return fault.error()
        return None

    def held(self, verb: str, route: Route) -> Hold | None:
        with self.lock:
            for hold in self.holds:
                if not hold.arrived.is_set() and hold.matches(verb, route):
                    hold.arrived.set()
                    return hold
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ctx: Context  # set on a per-server subclass

    def setup(self) -> None:
        super().setup()
        # Headers and body leave in separate writes: without this, Nagle's algorithm and
        # the client's delayed ACK add 40 ms to many requests.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.ctx.lock:
            self.ctx.connections.add(self.connection)

    def finish(self) -> None:
        with self.ctx.lock:
            self.ctx.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def _serve(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        with self.ctx.lock:
            self.ctx.agents[self.headers.get("User-Agent") or ""] += 1
        hold: Hold | None = None
        try:
            parts = [p for p in url.path.split("/") if p]
            if parts == ["apis"] and self.command == "GET":
                with self.ctx.lock:
                    self.ctx.discoveries["/apis"] += 1
                self._reply(200, resources.group_list(self.ctx.absent))
                return
            if len(parts) == 3 and parts[0] == "apis" and self.command == "GET":
                with self.ctx.lock:
                    self.ctx.discoveries[f"{parts[1]}/{parts[2]}"] += 1
                self._reply(200, resources.discovery(parts[1], parts[2], self.ctx.absent))
                return
            route = resources.parse(url.path, self.ctx.absent)
            name = verb(self.command, route, query)
            with self.ctx.lock:
                self.ctx.requests[(name, route.counted)] += 1
                self.ctx.calls[(route.resource.group, name, route.counted)] += 1
            failed = self.ctx.fault(name, route)
            if failed is not None:
                raise failed
            if name == "watch":
                self._watch(route, query)
                return
            hold = self.ctx.held(name, route)
            if hold is not None:
                hold.released.wait(HOLD_LIMIT)
                if hold.dropped:  # the server went away with it: the client sees a reset
                    self.close_connection = True
                    return
            code, body = handle(self.ctx.store, name, route, query, raw,
                                self.headers.get("Content-Type") or "")
        except ApiError as err:
            code, body = err.code, err.status()
        except Exception as err:  # a bug in the fake: say so loudly, in the test's output
            traceback.print_exc()
            code, body = 500, ApiError(500, "InternalError", f"fakekube bug: {err!r}").status()
        self._reply(code, body)
        if hold is not None:
            hold.code = code
            hold.answered.set()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def _reply(self, code: int, body: Json) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # --- watch ---------------------------------------------------------------------------------

    def _watch(self, route: Route, query: dict[str, str]) -> None:
        """Replay what changed after ``resourceVersion`` (or, without one, the current
        objects as ADDED), then stream changes until ``timeoutSeconds`` or server stop. A
        resourceVersion older than the kept history gets what the real server sends: a 200
        stream holding one ERROR event with a 410 Expired Status."""
        for param in UNMODELLED:
            if param in query:
                raise errors.not_modelled(f"the {param} parameter")
        res, ns, store = route.resource, route.namespace, self.ctx.store
        keep = selectors.predicate(res, query.get("labelSelector"), query.get("fieldSelector"))
        timeout = float(query.get("timeoutSeconds") or self.ctx.watch_timeout)
        deadline = time.monotonic() + timeout
        bookmarks = _flag(query.get("allowWatchBookmarks"))
        start = query.get("resourceVersion", "")
        if start not in ("", "0") and not start.isdigit():
            raise errors.bad_request(f"invalid resource version: {start!r}")
        with store.cond:
            if start not in ("", "0") and int(start) > store.rv:
                # The real server waits ~3 s for its cache to catch up, then says this.
                raise ApiError(504, "Timeout", f"Too large resource version: {start}, "
                               f"current: {store.rv}", {"causes": [{
                                   "reason": "ResourceVersionTooLarge",
                                   "message": "Too large resource version"}],
                                   "retryAfterSeconds": 1})
            if start in ("", "0"):
                items, cursor = store.select(res, ns, keep)
                lines = [{"type": "ADDED", "object": render(i, res, route.version)}
                         for i in items]
            else:
                cursor, lines = int(start), []
            seen_bookmarks = store.bookmarks
            self.ctx.watchers[route.counted] += 1
            store.cond.notify_all()
        try:
            self._stream_start()
            while self._send(lines):
                lines = []
                with store.cond:
                    while True:
                        try:
                            changes, upto = store.since(cursor, res, ns, keep)
                        except ApiError as err:
                            lines.append({"type": "ERROR", "object": err.status()})
                            done = True
                            break
                        cursor = upto
                        lines += [{"type": c.type, "object": render(c.obj, res, route.version)}
                                  for c in changes]
                        remaining = deadline - time.monotonic()
                        done = store.stopped or remaining <= 0
                        if bookmarks and (store.bookmarks != seen_bookmarks or
                                          (remaining <= 0 and not store.stopped)):
                            seen_bookmarks = store.bookmarks
                            lines.append({"type": "BOOKMARK", "object": {
                                "kind": res.kind, "apiVersion": res.api_version(route.version),
                                "metadata": {"resourceVersion": str(cursor)}}})
                        if lines or done:
                            break
                        store.cond.wait(remaining)
                if done:
                    self._send(lines)
                    break
            self._stream_end()
        finally:
            with store.cond:
                self.ctx.watchers[route.counted] -= 1
                store.cond.notify_all()

    def _stream_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _send(self, events: list[Json]) -> bool:
        """Write events, one JSON document a line; False once the client has gone."""
        if not events:
            return True
        data = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            return False
        return True

    def _stream_end(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up mid-request is not our failure


def serve(ctx: Context, port: int = 0) -> tuple[Server, threading.Thread]:
    """Serve on 127.0.0.1 (``port``, or a free one) from a daemon thread."""
    handler = type("FakeKubeHandler", (Handler,), {"ctx": ctx})
    server = Server(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fakekube",
                              daemon=True)
    thread.start()
    return server, thread
