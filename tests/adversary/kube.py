"""A replica's network path to the Kubernetes API server, below the real client: every
HTTP request an incarnation makes (the controller's, the elector's Lease calls, the
leader's EndpointSlice writes) passes :class:`KubeLink`, which

* yields to the scheduler before it is sent, and refuses it with Crashed once the
  incarnation is dead, so a dead process never writes again;
* models a partition from the API server: ``refuse`` fails each call at once (never sent,
  as a refused connection), ``hang`` holds it "in the network": its caller waits until its
  own timeout (simulated time), then sees a read timeout while the request stays held;
  when the partition heals, every held request either lands (is applied then, late, its
  answer going to a caller still waiting) or is dropped (never applied; a waiting caller
  sees the connection reset). Both orders happen: the heal before or after the caller gave
  up;
* records, at the fake server, each write that changes a ProvisioningRequest's attempt
  record (``allset.dev/attempt``, ``allset.dev/planned-nodes``): who sent it, under which
  lease epoch, and what the Lease said when it landed (for I10).

The real KubeApi, KubeLeaseStore and LeaderEndpoint run above it unchanged: the fence,
the timeouts and the resourceVersion preconditions are theirs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError

from provider.controller.gang import ATTEMPT_DETAIL, PLANNED_DETAIL
from tests.adversary.sched import Crashed, current, yield_point
from tests.fakes.kube import FakeKube

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
Record = tuple[str, str | None, str | None]  # (uid, attempt, planned nodes)


class Sender(Protocol):
    """What the link needs of the incarnation sending: whether it lives, who it is and
    the lease epoch it acts under now."""

    alive: bool

    @property
    def tag(self) -> str: ...
    def identity(self) -> str: ...
    def epoch(self) -> int: ...
    def leading(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class RecordWrite:
    """One write that changed an attempt record, as the fake server applied it."""

    step: int
    key: str
    before: Record | None
    after: Record | None
    sender: str  # the incarnation's tag
    identity: str
    epoch: int  # the sender's lease epoch when it sent the request
    lease: tuple[str | None, int]  # (holder, transitions) at the server when it landed
    late: bool  # landed after its caller had given up on it
    later_written: bool  # a later epoch had written this request before it landed

    @property
    def deposed(self) -> bool:
        return self.lease != (self.identity, self.epoch)


@dataclass(eq=False)
class Held:
    sender: Sender
    method: str
    path: str
    send: Callable[[], Any]
    epoch: int
    leading: bool
    born: float  # when the task that sent it began: what it wrote, it had read since
    state: str = "held"  # held | landed | dropped
    abandoned: bool = False  # its caller timed out
    response: Any = None
    error: BaseException | None = None


@dataclass(eq=False)
class Ledger:
    """What the links of one world record (shared by every replica's link)."""

    kube: FakeKube
    lease: Callable[[], tuple[str | None, int]]
    step: Callable[[], int]
    log: Callable[[str], None] = lambda text: None
    writes: list[RecordWrite] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    # request uid -> the latest lease epoch under which allset wrote it
    written_in: dict[str, int] = field(default_factory=dict)
    # request key -> when the task behind the last write of it began (its reads are since)
    prepared: dict[str, float] = field(default_factory=dict)
    # Kueue Workload name -> the last step a read of it by allset was answered 403 (its
    # RBAC without Kueue's rule): whether a request's owner is a variant, allset cannot know.
    workload_denied: dict[str, int] = field(default_factory=dict)

    def records(self) -> dict[str, Record]:
        out = {}
        for r in self.kube.list("provisioningrequests"):
            meta = r["metadata"]
            details = (r.get("status") or {}).get("provisioningClassDetails") or {}
            out[f"{meta['namespace']}/{meta['name']}"] = (
                str(meta.get("uid")), details.get(ATTEMPT_DETAIL), details.get(PLANNED_DETAIL))
        return out


class KubeLink:
    def __init__(self, ledger: Ledger, now: Callable[[], float]) -> None:
        self.ledger = ledger
        self._now = now
        self.partition: str | None = None  # None, "refuse" or "hang"
        # A cut that starts as the next status write of a ProvisioningRequest goes out (an
        # ambush: a partition can begin at any moment, and this one is the one that hurts:
        # the status carries the attempt record).
        self.armed = False
        self.heal_at: float | None = None  # a cut that heals by itself then (a blip)
        self.blip: float | None = None  # a blip this long starts at a request's next read
        self.held: list[Held] = []

    # --- installing on a client -----------------------------------------------------------

    def install(self, api: Any, sender: Sender) -> None:
        """Route every request of this ApiClient through the link."""
        rest = api.rest_client
        real = rest.request

        def request(method: str, url: str, headers: Any = None, body: Any = None,
                    post_params: Any = None, _request_timeout: Any = None) -> Any:
            def send() -> Any:
                return real(method, url, headers=headers, body=body, post_params=post_params,
                            _request_timeout=_request_timeout)
            return self._request(sender, method.upper(), url, send, _request_timeout)

        rest.request = request

    # --- partitions -----------------------------------------------------------------------

    def heal(self, land: bool) -> tuple[int, int]:
        """The partition ends: every held request lands (``land``) or is dropped. Returns
        (held requests, of which their caller had already given up)."""
        self.partition = None
        self.armed = False
        self.heal_at = None
        self.blip = None
        held, self.held = self.held, []
        lease = self.ledger.lease()
        for h in held:
            if h.method in WRITES and "/provisioningrequests" in h.path and h.leading and \
                    lease != (h.sender.identity(), h.epoch):
                # What broke a Provisioned gang (finding 1): a leader's request write held
                # past its deposition.
                self.ledger.counts["request writes of a deposed leader held to the heal"] += 1
            if land:
                self._land(h)
            else:
                h.state = "dropped"
        late = sum(1 for h in held if h.abandoned)
        tag = "landed" if land else "dropped"
        self.ledger.counts[f"held requests {tag}"] += len(held)
        self.ledger.counts[f"held requests {tag} after the caller gave up"] += late
        return len(held), late

    # --- one request ----------------------------------------------------------------------

    def _request(self, sender: Sender, method: str, url: str, send: Callable[[], Any],
                 timeout: Any) -> Any:
        path = urlsplit(url).path
        if not sender.alive:
            raise Crashed
        yield_point(f"kube.{method} {_short(path)}")
        if not sender.alive:
            raise Crashed
        task = current()
        born = task.born if task is not None else self._now()
        if self.armed and method == "PUT" and "/provisioningrequests/" in path and \
                path.endswith("/status"):
            self.armed = False
            self.partition = "hang"
            self.ledger.counts["ambushes sprung (a request write held)"] += 1
            self.ledger.log(f"  {sender.tag} cut off from the API server as it sends "
                            f"{method} {_short(path)} (ambush)")
        if self.blip is not None and method == "GET" and self.partition is None and \
                "/podtemplates/" in path:  # a read between a pass's acting check and its writes
            self.partition, self.heal_at, self.blip = "hang", self._now() + self.blip, None
            self.ledger.counts["API blips (a read held past the renew deadline)"] += 1
            self.ledger.log(f"  {sender.tag} cut off from the API server as it sends "
                            f"GET {_short(path)} (blip)")
        if self.partition is None:
            return self._apply(sender, method, path, send, sender.epoch(), sender.leading(),
                               born, late=False)
        if self.partition == "refuse" or task is None:
            raise MaxRetryError(None, url, NewConnectionError(  # type: ignore[arg-type]
                None, "connection refused (partitioned from the API server)"))  # type: ignore[arg-type]
        h = Held(sender, method, path, send, sender.epoch(), sender.leading(), born)
        self.held.append(h)
        limit = _seconds(timeout)
        deadline = self._now() + limit if limit is not None else float("inf")
        task.wait_until(lambda: h.state != "held" or self._now() >= deadline,
                        f"kube.{method} held")
        if h.state == "landed":
            if h.error is not None:
                raise h.error
            return h.response
        if h.state == "dropped":
            raise ProtocolError("Connection aborted.", ConnectionResetError(
                "the partition dropped the request"))
        h.abandoned = True  # it may still land at the heal
        raise ReadTimeoutError(None, url, f"Read timed out. (read timeout={limit})")  # type: ignore[arg-type]

    def _land(self, h: Held) -> None:
        try:
            h.response = self._apply(h.sender, h.method, h.path, h.send, h.epoch, h.leading,
                                     h.born, late=h.abandoned)
        except Exception as err:  # the fake refused it at the transport: the caller hears
            h.error = err
        h.state = "landed"

    def _apply(self, sender: Sender, method: str, path: str, send: Callable[[], Any],
               epoch: int, leading: bool, born: float, *, late: bool) -> Any:
        """Send the request to the fake server now; for a write of a request, record what
        it changed of the attempt records and under which lease it landed."""
        ledger = self.ledger
        watched = method in WRITES and "/provisioningrequests" in path
        before = ledger.records() if watched else {}
        lease = ledger.lease() if method in WRITES else (None, 0)
        response = send()
        response.read()  # the whole answer now: its caller may read it much later
        if method not in WRITES:
            if response.status == 403 and "/workloads/" in path:
                ledger.workload_denied[path.rsplit("/", 1)[-1]] = ledger.step()
            return response
        deposed = lease != (sender.identity(), epoch)
        if deposed and leading:
            ledger.counts["writes landed after the sender was deposed"] += 1
            if response.status == 409:
                ledger.counts["late writes refused by the server (409)"] += 1
        if not watched or response.status >= 300:
            return response
        after = ledger.records()
        key = _request_key(path)
        ledger.prepared[key] = born
        old, new = before.get(key), after.get(key)
        uid = (new or old or ("", None, None))[0]
        if old is not None and new is not None and old[0] == new[0] and old != new:
            later = ledger.written_in.get(uid, -1) > epoch
            ledger.writes.append(RecordWrite(ledger.step(), key, old, new, sender.tag,
                                             sender.identity(), epoch, lease, late, later))
        if uid and not deposed:
            ledger.written_in[uid] = max(ledger.written_in.get(uid, -1), epoch)
        return response


def _request_key(path: str) -> str:
    """namespace/name of the ProvisioningRequest a path names ("" for a collection)."""
    parts = [p for p in path.split("/") if p]
    try:
        i = parts.index("namespaces")
        return f"{parts[i + 1]}/{parts[i + 3]}"
    except (ValueError, IndexError):
        return ""


def _seconds(timeout: Any) -> float | None:
    """A request's timeout as urllib3 takes it: total, or (connect, read)."""
    if timeout is None:
        return None
    if isinstance(timeout, tuple):
        return float(sum(t for t in timeout if t is not None))
    return float(timeout)


def _short(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts:
        i = parts.index("namespaces")
        parts = parts[i + 2:]
    elif parts and parts[0] in ("api", "apis"):
        parts = parts[2:] if parts[0] == "api" else parts[3:]
    return "/".join(parts) or path
