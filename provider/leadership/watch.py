"""One object followed by name: listed, then watched from the listed version, as client-go's
informers for one object do (a fieldSelector on metadata.name, which RBAC authorizes by
resourceNames). The Lease a standby follows and CA's route the replicas keep are both
followed this way; ``keep_following`` starts a watch again whenever it ends or fails."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

T = TypeVar("T")


def follow_named(list_call: Callable[..., Any], namespace: str, name: str, *,
                 timeout: float, timeout_seconds: int = 300,
                 opened: Callable[[Any], None] | None = None
                 ) -> Iterator[dict[str, Any] | None]:
    """The object as listed now, then each write of it until the server ends the watch
    (None: deleted, or not there yet), as plain JSON. ``list_call`` is the client's list
    of that kind in a namespace (``list_namespaced_lease``); ``timeout`` bounds the list
    and the watch's connection, and a stream silent past the server's own
    ``timeout_seconds`` is taken for dead. ``opened`` is handed each watch response (so
    another thread can shut it down). Raises when the watch fails (a 410 for a version
    too old included); the caller starts again."""
    only = f"metadata.name={name}"
    listed = json.loads(list_call(namespace, field_selector=only, _preload_content=False,
                                  _request_timeout=timeout).data)
    items = listed.get("items") or []
    yield items[0] if items else None
    version = str(listed["metadata"]["resourceVersion"])
    while True:
        response = list_call(namespace, field_selector=only, watch=True,
                             resource_version=version, timeout_seconds=timeout_seconds,
                             allow_watch_bookmarks=True, _preload_content=False,
                             _request_timeout=(timeout, timeout_seconds + timeout))
        if opened is not None:
            opened(response)
        try:
            for line in iter_resp_lines(response):
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # 410: the version is too old; list again
                    raise ApiException(status=int(obj.get("code") or 500),
                                       reason=str(obj.get("message")))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED"):
                    yield obj
                elif kind == "DELETED":
                    yield None
        finally:
            response.close()
            response.release_conn()


def keep_following(follow: Callable[[], Iterable[T]], deliver: Callable[[T], None], *,
                   stop: threading.Event, down: Callable[[], None], pause: float,
                   longest: float, what: str, meanwhile: str) -> None:
    """Hand each item ``follow`` yields to ``deliver`` until ``stop``; when the watch ends
    or fails, ``down()`` (what it delivered may be stale from here), then start it again
    after ``pause``: a watch that keeps failing costs a list and a watch each time, so
    less and less often, up to once every ``longest``. ``what`` names the object in the
    log (``the lease``), ``meanwhile`` what is done instead while it is down."""
    failures = 0
    while not stop.is_set():
        try:
            for item in follow():
                if stop.is_set():
                    return
                failures = 0
                deliver(item)
        except Exception as err:
            if stop.is_set():
                return
            failures += 1
            forbidden = isinstance(err, ApiException) and err.status == 403
            log.log(logging.WARNING if forbidden and failures == 1 else logging.INFO,
                    "watching %s failed (%s)%s: %s", what, meanwhile,
                    f"; RBAC needs list and watch on {what}" if forbidden else "", err)
        down()
        stop.wait(min(pause * 2.0 ** min(max(failures - 1, 0), 10), longest))
