"""What `allset instances` shows: every instance the cloud has for this cluster and what
reconcile would make of it. Computed by the CLI from its own listing, or by a running
allset for `instances --server` (its cloud, its attempts in flight)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from provider.attempts.executor import Finished
from provider.attempts.reconcile import classify
from provider.base.clock import rfc3339
from provider.domain.cloud import CloudSnapshot

Record = dict[str, Any]


def records(snapshot: CloudSnapshot, groups: Collection[str], *, orphans_only: bool,
            in_flight: Collection[str] = (),
            finished: Mapping[str, Finished] | None = None) -> list[Record]:
    found = classify(snapshot, in_flight, finished, groups=groups)
    # Orphans: uncommitted attempts (rolled back after the grace period) and committed
    # instances of groups no longer configured (reported; see reconcile.unknownGroups).
    why = {i.id: "uncommitted" for i in (*found.orphans, *found.deleting)
           if not i.tags.committed}
    why.update({i.id: "group not configured" for i in found.unknown_group})
    rows = [i for i in snapshot.instances if not orphans_only or i.id in why]
    return [{
        "id": i.id,
        "providerID": i.provider_id,
        "nodeGroup": i.tags.node_group,
        "attempt": i.tags.attempt,
        "part": i.tags.part,
        "source": str(i.tags.source),
        "reservation": i.tags.reservation,
        "request": i.tags.request,
        "state": str(i.state),
        # Reconcile finishes a commit that a crash interrupted: those count as committed.
        "committed": i.tags.committed or i in found.to_commit,
        "orphan": why.get(i.id),
        # A termination owed since then (the deletion mark): the leader terminates it.
        "deleting": rfc3339(i.tags.deleting_since) if i.tags.deleting_since is not None
        else None,
    } for i in sorted(rows, key=lambda i: (i.tags.node_group, i.tags.attempt, i.id))]


def render(found: list[Record], *, orphans_only: bool) -> str:
    header = ("INSTANCE", "GROUP", "ATTEMPT", "PART", "SOURCE", "RESERVATION", "STATE",
              "COMMITTED", "DELETING", "ORPHAN")
    table = [header] + [(r["id"], r["nodeGroup"], r["attempt"], r["part"], r["source"],
                         r["reservation"] or "-", r["state"], "yes" if r["committed"] else "no",
                         r["deleting"] or "-", r["orphan"] or "-")
                        for r in found]
    widths = [max(len(str(row[c])) for row in table) for c in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
             for row in table]
    if not found:
        lines.append("(no orphans)" if orphans_only else "(no instances)")
    return "\n".join(lines)
