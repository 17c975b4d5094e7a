"""Where bench/scale's time went, request by request, from the API server's audit log (and
the bench's own clock for what it did itself): when each request was created, accepted by
allset, its gang launched, its Nodes registered, made Ready by kwok and labelled by allset,
and when allset wrote it Provisioned. allset's own delays (a Node registered -> labelled,
the gang Ready and labelled -> Provisioned) are told apart from the control plane's and
kwok's, which share the machine's cores with it."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

STAGES = ("created", "accepted", "launched", "registered", "ready", "labelled",
          "provisioned")


@dataclass(frozen=True, slots=True)
class Audited:
    """One request the API server received, as its audit log has it."""

    at: float  # epoch seconds
    user: str
    verb: str
    resource: str  # with its subresource: "nodes/status"
    name: str


def read_audit(lines: Iterable[bytes]) -> list[Audited]:
    out = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line still being written
        ref = event.get("objectRef") or {}
        stamp = event.get("requestReceivedTimestamp")
        if not stamp:
            continue
        resource = str(ref.get("resource", "")) + (
            f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.append(Audited(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp(),
                           str((event.get("user") or {}).get("username", "")),
                           str(event.get("verb", "")), resource, str(ref.get("name", ""))))
    return out


def milestones(audited: Sequence[Audited], *, allset: str, kwok: str,
               created: Mapping[str, float], registered: Mapping[str, float],
               nodes_of: Mapping[str, Sequence[str]]) -> dict[str, dict[str, float]]:
    """Each request's stages (epoch seconds); a stage not reached is absent.

    ``created``: request -> when the bench's create returned; ``registered``: Node -> when
    the bench's create of it returned; ``nodes_of``: request -> its gang's Node names (the
    booking label, read at the end). Accepted is allset's first status write of the
    request, launched its second (the gang's plan recorded with WaitingForNodes),
    provisioned its last; a Node's Ready is kwok's first status write of it and its label
    allset's first patch of it.

    Reading it: the audit records each request as received, so a write the server
    refused (a conflict, retried) counts too, and "launched" can then be a retry; the
    bench's own times are when its call returned, the others when the server received a
    request, which under load understates allset's waits a little."""
    status: dict[str, list[float]] = {}
    ready: dict[str, float] = {}
    labelled: dict[str, float] = {}
    for a in sorted(audited, key=lambda a: a.at):
        if a.user == allset and a.resource == "provisioningrequests/status" and \
                a.verb in ("update", "patch"):
            status.setdefault(a.name, []).append(a.at)
        elif a.user == allset and a.resource == "nodes" and a.verb == "patch":
            labelled.setdefault(a.name, a.at)
        elif a.user == kwok and a.resource == "nodes/status":
            ready.setdefault(a.name, a.at)
    out: dict[str, dict[str, float]] = {}
    for request, made in created.items():
        stages = {"created": made}
        writes = status.get(request, [])
        if writes:
            stages["accepted"] = writes[0]
        if len(writes) >= 2:
            stages["launched"] = writes[1]
        if len(writes) >= 3:
            stages["provisioned"] = writes[-1]
        nodes = nodes_of.get(request, ())
        for stage, times in (("registered", registered), ("ready", ready),
                             ("labelled", labelled)):
            if nodes and all(n in times for n in nodes):
                stages[stage] = max(times[n] for n in nodes)
        out[request] = stages
    return out


def allset_delays(stages: Mapping[str, Mapping[str, float]], *,
                  registered: Mapping[str, float], audited: Sequence[Audited], allset: str,
                  nodes_of: Mapping[str, Sequence[str]]) -> dict[str, list[float]]:
    """The waits that are allset's: created -> accepted (its queue), a Node registered ->
    labelled by allset (the watch's delivery and the patch), and the gang's last Node Ready
    and labelled -> Provisioned written."""
    first_patch: dict[str, float] = {}
    for a in sorted(audited, key=lambda a: a.at):
        if a.user == allset and a.resource == "nodes" and a.verb == "patch":
            first_patch.setdefault(a.name, a.at)
    out: dict[str, list[float]] = {"accept": [], "label": [], "provision": []}
    for request, s in stages.items():
        if "accepted" in s:
            out["accept"].append(s["accepted"] - s["created"])
        if "provisioned" in s and "ready" in s and "labelled" in s:
            out["provision"].append(s["provisioned"] - max(s["ready"], s["labelled"]))
        for node in nodes_of.get(request, ()):
            if node in first_patch and node in registered:
                out["label"].append(first_patch[node] - registered[node])
    return out


def spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):6.1f} {p95:6.1f} {ordered[-1]:6.1f}"


def render(stages: Mapping[str, Mapping[str, float]], start: float,
           delays: Mapping[str, Sequence[float]]) -> list[str]:
    lines = ["  each request's stages, seconds after the creates began (p50 p95 max over "
             "requests; a gang's stage is its last Node's):"]
    for stage in STAGES:
        reached = [s[stage] - start for s in stages.values() if stage in s]
        lines.append(f"    {stage:12} {spread(reached)}   ({len(reached)} requests)")
    lines.append("  allset's own waits, seconds (p50 p95 max):")
    for name, text in (("accept", "created -> Accepted written (its work queue)"),
                       ("label", "a Node registered -> labelled by allset"),
                       ("provision", "gang Ready and labelled -> Provisioned written")):
        lines.append(f"    {text:50} {spread(delays.get(name, []))}   "
                     f"({len(delays.get(name, []))})")
    return lines
